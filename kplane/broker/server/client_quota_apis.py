"""DescribeClientQuotas and AlterClientQuotas (48, 49; KIP-546) over the quota store.

Kafka's checks: describing needs DESCRIBE_CONFIGS on the cluster, altering ALTER_CONFIGS;
a bad filter fails the whole describe (INVALID_REQUEST, or UNSUPPORTED_VERSION for an
unknown entity type), a bad entity, key or value fails its own entry (INVALID_REQUEST) and
``validate_only`` checks without writing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog

from kplane.broker.quota.entity import (
    QuotaEntity,
    QuotaError,
    QuotaFilter,
    config_keys,
    validate_entity,
    validate_value,
)
from kplane.broker.quota.store import ClientQuotaStore
from kplane.broker.server.context import Handler, RequestContext
from kplane.common.acl import AclOperation, AclResourceType
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode

log = structlog.get_logger(__name__)


class ClientQuotaApis:
    """The client quota APIs."""

    def __init__(self, store: ClientQuotaStore) -> None:
        self.store = store

    def handlers(self) -> Mapping[int, Handler]:
        return {
            ApiKey.DESCRIBE_CLIENT_QUOTAS: self.handle_describe,
            ApiKey.ALTER_CLIENT_QUOTAS: self.handle_alter,
        }

    def handle_describe(self, ctx: RequestContext) -> None:
        if not ctx.authorized(AclOperation.DESCRIBE_CONFIGS, AclResourceType.CLUSTER):
            self._describe_error(ctx, ErrorCode.cluster_authorization_failed, None)
            return
        body = ctx.body
        try:
            wanted = QuotaFilter.parse(
                ((c.entity_type, int(c.match_type), c.match) for c in body.components),
                bool(body.strict),
            )
        except QuotaError as exc:
            log.warning("DescribeClientQuotas refused", reason=str(exc), principal=ctx.principal)
            code = ErrorCode.unsupported_version if exc.unsupported else ErrorCode.invalid_request
            self._describe_error(ctx, code, str(exc))
            return
        entries = tuple(
            ctx.make(
                "EntryData",
                entity=tuple(
                    ctx.make("EntityData", entity_type=kind, entity_name=name)
                    for kind, name in entity.entries
                ),
                values=tuple(
                    ctx.make("ValueData", key=key, value=value)
                    for key, value in sorted(values.items())
                ),
            )
            for entity, values in sorted(self.store.all().items(), key=lambda e: str(e[0]))
            if wanted.matches(entity)
        )
        ctx.respond(ctx.make_response(error_code=ErrorCode.none, entries=entries))

    @staticmethod
    def _describe_error(ctx: RequestContext, code: ErrorCode, message: str | None) -> None:
        ctx.respond(ctx.make_response(error_code=code, error_message=message, entries=None))

    def handle_alter(self, ctx: RequestContext) -> None:
        allowed = ctx.authorized(AclOperation.ALTER_CONFIGS, AclResourceType.CLUSTER)
        validate_only = bool(ctx.body.validate_only)
        results = []
        seen: set[QuotaEntity] = set()
        for entry in ctx.body.entries:
            raw = tuple((e.entity_type, e.entity_name) for e in entry.entity)
            code, message = ErrorCode.none, None
            if not allowed:
                code = ErrorCode.cluster_authorization_failed
            else:
                try:
                    entity, changes = _alteration(raw, entry.ops, seen)
                    if not validate_only:
                        self.store.alter(entity, changes)
                        log.info(
                            "client quotas altered",
                            entity=str(entity),
                            changes=changes,
                            principal=ctx.principal,
                        )
                except QuotaError as exc:
                    code, message = ErrorCode.invalid_request, str(exc)
                    log.warning("client quota alteration refused", reason=message)
            results.append(
                ctx.make(
                    "EntryData",
                    error_code=code,
                    error_message=message,
                    entity=tuple(
                        ctx.make("EntityData", entity_type=kind, entity_name=name)
                        for kind, name in raw
                    ),
                )
            )
        ctx.respond(ctx.make_response(entries=tuple(results)))


def _alteration(
    raw: tuple[tuple[str, str | None], ...], ops: tuple[Any, ...], seen: set[QuotaEntity]
) -> tuple[QuotaEntity, dict[str, float | None]]:
    """An entry's entity and its changes (``None`` removes), checked as Kafka checks them."""
    entity = validate_entity(raw)
    if entity in seen:
        raise QuotaError(f"Ignoring duplicate entity {entity}")
    seen.add(entity)
    changes: dict[str, float | None] = {}
    for op in ops:
        key = str(op.key)
        if key in changes:
            raise QuotaError(
                f"Duplicate quota key {key} not updating quota for this entity {entity}"
            )
        changes[key] = None if op.remove else float(op.value)
    keys = config_keys(entity)
    for key, value in changes.items():
        if value is not None:
            validate_value(keys, key, value)
    return entity, changes
