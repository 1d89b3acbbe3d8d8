"""QuotaAdmin: client quotas (DescribeClientQuotas 48, AlterClientQuotas 49; KIP-546), as
Kafka's AdminClient.describeClientQuotas and alterClientQuotas."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kplane.client.admin import Admin
from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode, KafkaError

Entity = tuple[tuple[str, str | None], ...]
"""Entity type -> name pairs (``None``: the type's default), e.g.
``(("user", "alice"), ("client-id", None))``."""

MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2


@dataclass(frozen=True)
class FilterComponent:
    """One filter component: an exact name, the default (``MATCH_DEFAULT``) or any
    specified name (``MATCH_SPECIFIED``) of an entity type."""

    entity_type: str
    match_type: int = MATCH_EXACT
    match: str | None = None


@dataclass(frozen=True)
class Alteration:
    """Changes to one entity: a value sets a key, ``None`` removes it."""

    entity: Entity
    ops: Mapping[str, float | None]


class QuotaAdmin:
    """Client quotas through an :class:`Admin`'s client (any broker answers)."""

    def __init__(self, admin: Admin) -> None:
        self.client = admin.client

    async def describe_client_quotas(
        self, components: Iterable[FilterComponent], strict: bool = False
    ) -> dict[Entity, dict[str, float]]:
        """The quota values of every entity the filter matches (KafkaError when refused)."""
        wanted = list(components)

        def build(version: int) -> object:
            module = api.request_module(ApiKey.DESCRIBE_CLIENT_QUOTAS, version)
            return api.make(
                api.request_class(ApiKey.DESCRIBE_CLIENT_QUOTAS, version),
                components=tuple(
                    api.make(
                        module.ComponentData,
                        entity_type=c.entity_type,
                        match_type=c.match_type,
                        match=c.match,
                    )
                    for c in wanted
                ),
                strict=strict,
            )

        response = await self.client.request(None, ApiKey.DESCRIBE_CLIENT_QUOTAS, build)
        if response.error_code != ErrorCode.none:
            raise KafkaError(response.error_code, response.error_message)
        return {
            tuple((e.entity_type, e.entity_name) for e in entry.entity): {
                v.key: float(v.value) for v in entry.values
            }
            for entry in response.entries or ()
        }

    async def alter_client_quotas(
        self, alterations: Iterable[Alteration], validate_only: bool = False
    ) -> dict[Entity, KafkaError | None]:
        """Apply the alterations; the outcome of each entity."""
        wanted = list(alterations)

        def build(version: int) -> object:
            module = api.request_module(ApiKey.ALTER_CLIENT_QUOTAS, version)
            return api.make(
                api.request_class(ApiKey.ALTER_CLIENT_QUOTAS, version),
                entries=tuple(
                    api.make(
                        module.EntryData,
                        entity=tuple(
                            api.make(module.EntityData, entity_type=kind, entity_name=name)
                            for kind, name in a.entity
                        ),
                        ops=tuple(
                            api.make(
                                module.OpData,
                                key=key,
                                value=0.0 if value is None else float(value),
                                remove=value is None,
                            )
                            for key, value in a.ops.items()
                        ),
                    )
                    for a in wanted
                ),
                validate_only=validate_only,
            )

        response = await self.client.request(None, ApiKey.ALTER_CLIENT_QUOTAS, build)
        return {
            tuple((e.entity_type, e.entity_name) for e in entry.entity): (
                None
                if entry.error_code == ErrorCode.none
                else KafkaError(entry.error_code, entry.error_message)
            )
            for entry in response.entries
        }
