"""Client quota entities and their configs, as Kafka names and stores them.

An entity maps entity types (``user``, ``client-id``, ``ip``) to a name, ``None`` being the
type's default. In the metadata store an entity is Kafka's ZooKeeper path under ``/config``:
``users/<user>``, ``clients/<client-id>``, ``users/<user>/clients/<client-id>``,
``ips/<ip>``, each name sanitized as Kafka's ``Sanitizer`` does and a default written
``<default>``.
"""

from __future__ import annotations

import ipaddress
import math
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from urllib.parse import unquote

from kplane.broker.security.scram import sanitize

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)
DEFAULT = "<default>"
"""Kafka's name of a default entity in store paths (``ConfigEntityName.DEFAULT``)."""

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
IP_CONNECTION_RATE = "connection_creation_rate"


class QuotaValueType(Enum):
    LONG = "long"
    DOUBLE = "double"
    INT = "int"


USER_AND_CLIENT_CONFIGS: Mapping[str, QuotaValueType] = {
    PRODUCER_BYTE_RATE: QuotaValueType.LONG,
    CONSUMER_BYTE_RATE: QuotaValueType.LONG,
    REQUEST_PERCENTAGE: QuotaValueType.DOUBLE,
    CONTROLLER_MUTATION_RATE: QuotaValueType.DOUBLE,
}
"""Kafka's ``QuotaConfig.userAndClientQuotaConfigs``."""
IP_CONFIGS: Mapping[str, QuotaValueType] = {IP_CONNECTION_RATE: QuotaValueType.INT}
"""Kafka's ``QuotaConfig.ipConfigs``."""
QUOTA_CONFIGS: Mapping[str, QuotaValueType] = {**USER_AND_CLIENT_CONFIGS, **IP_CONFIGS}

_STORE_TYPES = {USER: "users", CLIENT_ID: "clients", IP: "ips"}
_TYPES_OF_STORE = {v: k for k, v in _STORE_TYPES.items()}
_LIMITS = {QuotaValueType.INT: 2**31 - 1, QuotaValueType.LONG: 2**63 - 1}


class QuotaError(ValueError):
    """A quota entity, filter or value Kafka refuses (INVALID_REQUEST, or
    UNSUPPORTED_VERSION for an entity type Kafka does not know in a filter)."""

    def __init__(self, message: str, unsupported: bool = False) -> None:
        super().__init__(message)
        self.unsupported = unsupported


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """Entity type -> name (``None``: the type's default), sorted by type."""

    entries: tuple[tuple[str, str | None], ...]

    @classmethod
    def of(cls, **names: str | None) -> QuotaEntity:
        """``QuotaEntity.of(user="alice", client_id=None)``: keyword names with ``_``."""
        return cls(tuple(sorted((k.replace("_", "-"), v) for k, v in names.items())))

    def get(self, entity_type: str) -> tuple[bool, str | None]:
        """(whether the entity has the type, its name)."""
        for kind, name in self.entries:
            if kind == entity_type:
                return True, name
        return False, None

    @property
    def types(self) -> frozenset[str]:
        return frozenset(kind for kind, _ in self.entries)

    def store_path(self) -> tuple[str, str]:
        """(entity type, name) as ``set_entity_config`` takes them: the node is
        ``/config/<type>/<name>`` (``users/<user>/clients`` for user and client id)."""
        by_type = dict(self.entries)
        if USER in by_type and CLIENT_ID in by_type:
            return (
                f"users/{_node(by_type[USER])}/clients",
                _node(by_type[CLIENT_ID]),
            )
        ((kind, name),) = self.entries
        return _STORE_TYPES[kind], _node(name)

    def __str__(self) -> str:
        return ", ".join(
            f"{kind}={DEFAULT if name is None else name}" for kind, name in self.entries
        )


def _node(name: str | None) -> str:
    return DEFAULT if name is None else sanitize(name)


def entity_name(node: str) -> str | None:
    """An entity name from its node name (``<default>``: ``None``, the default)."""
    return None if node == DEFAULT else unquote(node)


def entity_of_path(entity_path: str) -> QuotaEntity | None:
    """The quota entity a change notification's entity path names (``users/alice``,
    ``users/alice/clients/app``, ``clients/<default>``, ``ips/10.0.0.1``), or ``None``."""
    parts = entity_path.split("/")
    if len(parts) == 2 and parts[0] in _TYPES_OF_STORE:
        return QuotaEntity(((_TYPES_OF_STORE[parts[0]], entity_name(parts[1])),))
    if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients":
        return QuotaEntity(((CLIENT_ID, entity_name(parts[3])), (USER, entity_name(parts[1]))))
    return None


def quota_values(configs: Mapping[str, str]) -> dict[str, float]:
    """The quota keys of a stored config (a user's node holds SCRAM credentials too)."""
    out: dict[str, float] = {}
    for key, value in configs.items():
        if key in QUOTA_CONFIGS:
            try:
                out[key] = float(value)
            except ValueError:
                continue
    return out


def format_value(key: str, value: float) -> str:
    """A quota value as Kafka writes it in the store (integral types without a fraction)."""
    if QUOTA_CONFIGS.get(key, QuotaValueType.DOUBLE) is QuotaValueType.DOUBLE:
        return repr(float(value))
    return str(int(value))


# validation (Kafka's ClientQuotaControlManager) --------------------------------------------
def validate_entity(entries: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    """An entity of an AlterClientQuotas entry, checked as Kafka checks it."""
    seen: dict[str, str | None] = {}
    for kind, name in entries:
        if kind in seen:
            raise QuotaError(f"Invalid client quota entity, duplicate entity entry {kind}")
        if kind not in ENTITY_TYPES:
            raise QuotaError(f"Unhandled client quota entity type: {kind}")
        if name is not None and name == "":
            raise QuotaError(f"Empty {kind} not supported")
        seen[kind] = name
    if not seen:
        raise QuotaError("Invalid empty client quota entity")
    entity = QuotaEntity(tuple(sorted(seen.items())))
    config_keys(entity)
    return entity


def config_keys(entity: QuotaEntity) -> Mapping[str, QuotaValueType]:
    """The quota keys an entity takes; the entity type combination checked."""
    types = entity.types
    if IP in types:
        if types & {USER, CLIENT_ID}:
            raise QuotaError(
                "Invalid quota entity combination, IP entity shouldnot be combined with User "
                "or ClientId"
            )
        _, ip = entity.get(IP)
        if ip is not None and not valid_ip(ip):
            raise QuotaError(f"{ip} is not a valid IP or resolvable host.")
        return IP_CONFIGS
    if types & {USER, CLIENT_ID}:
        return USER_AND_CLIENT_CONFIGS
    raise QuotaError("Invalid empty client quota entity")


def validate_value(keys: Mapping[str, QuotaValueType], key: str, value: float) -> None:
    """Kafka's validateQuotaKeyValue."""
    kind = keys.get(key)
    if kind is None:
        raise QuotaError(f"Invalid configuration key {key}")
    if not value > 0.0:
        raise QuotaError(f"Quota {key} must be greater than 0")
    if kind is QuotaValueType.DOUBLE:
        return
    if value > _LIMITS[kind]:
        article = "an" if kind is QuotaValueType.INT else "a"
        raise QuotaError(f"Proposed value for {key} is too large for {article} {kind.name}.")
    if math.fmod(abs(value), 1.0) > 1e-6:
        raise QuotaError(f"{key} cannot be a fractional value.")


def valid_ip(host: str) -> bool:
    """An IP address, or a host name that resolves (Kafka's isValidIpEntity)."""
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    try:
        socket.getaddrinfo(host, None)
    except OSError:
        return False
    return True


# DescribeClientQuotas filters (Kafka's ClientQuotasImage.describe) ---------------------------
MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2


@dataclass(frozen=True, slots=True)
class QuotaFilter:
    """Exact names (``None``: the default) and types that must merely be present."""

    exact: Mapping[str, str | None]
    specified: frozenset[str]
    strict: bool

    @classmethod
    def parse(cls, components: Iterable[tuple[str, int, str | None]], strict: bool) -> QuotaFilter:
        """Filter components (entity type, match type, match) checked as Kafka does."""
        exact: dict[str, str | None] = {}
        specified: set[str] = set()
        for kind, match_type, match in components:
            if not kind:
                raise QuotaError("Invalid empty entity type.")
            if kind in exact or kind in specified:
                raise QuotaError(f"Entity type {kind} cannot appear more than once in the filter.")
            if kind not in ENTITY_TYPES:
                raise QuotaError(f"Unsupported entity type {kind}", unsupported=True)
            if match_type == MATCH_EXACT:
                if match is None:
                    raise QuotaError(
                        "Request specified MATCH_TYPE_EXACT, but set match string to null."
                    )
                exact[kind] = match
            elif match_type == MATCH_DEFAULT:
                if match is not None:
                    raise QuotaError(
                        "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."
                    )
                exact[kind] = None
            elif match_type == MATCH_SPECIFIED:
                if match is not None:
                    raise QuotaError(
                        "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."
                    )
                specified.add(kind)
            else:
                raise QuotaError(f"Unknown match type {match_type}")
        named = set(exact) | specified
        if IP in named and named & {USER, CLIENT_ID}:
            raise QuotaError(
                "Invalid entity filter component combination. IP filter component should not "
                "be used with user or clientId filter component."
            )
        return cls(exact, frozenset(specified), strict)

    def matches(self, entity: QuotaEntity) -> bool:
        by_type = dict(entity.entries)
        if self.strict and len(by_type) != len(self.exact) + len(self.specified):
            return False
        for kind, name in self.exact.items():
            if kind not in by_type or by_type[kind] != name:
                return False
        return all(kind in by_type for kind in self.specified)
