"""ACLs: Kafka's resource types, operations and permissions (wire codes), bindings and filters.

Shared by the broker's authorizer and kplane's admin client. Stored as Kafka stored them in
ZooKeeper: ``/kafka-acl/<Type>/<name>`` for literal patterns and
``/kafka-acl-extended/prefixed/<Type>/<name>`` for prefixed ones, each node holding
``{"version":1,"acls":[{"principal":..,"permissionType":"Allow","operation":"Read","host":"*"}]}``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import IntEnum
from typing import Self

WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
# What ZooKeeper refuses in a node name (PathUtils.validatePath), "/" included.
_NOT_IN_NODE_NAME = re.compile(r"[/\x00-\x1f\x7f-\x9f\ud800-\uf8ff\ufff0-\uffff]")


class _KafkaNamed(IntEnum):
    """An enum whose members Kafka names in ZooKeeper and kafka-acls.sh in PascalCase:
    ``Topic``, ``TransactionalId``, ``DescribeConfigs``, ``Allow``."""

    @property
    def store_name(self) -> str:
        """Kafka's spelling of the member: ``TRANSACTIONAL_ID`` is ``TransactionalId``."""
        return "".join(part.capitalize() for part in self.name.split("_"))

    @classmethod
    def from_name(cls, name: str) -> Self:
        """The member Kafka's ``name`` spells (``DescribeConfigs``, also ``read``);
        KeyError if none."""
        return cls["".join("_" + c if c.isupper() else c for c in name).strip("_").upper()]


class AclResourceType(_KafkaNamed):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_KafkaNamed):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(_KafkaNamed):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME = "kafka-cluster"
SUPPORTED_OPERATIONS: dict[AclResourceType, tuple[AclOperation, ...]] = {
    AclResourceType.TOPIC: (
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.CREATE,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    AclResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE),
    AclResourceType.CLUSTER: (
        AclOperation.CREATE,
        AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
    ),
    AclResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    AclResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    AclResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}
"""The operations an ACL may name per resource type (Kafka's AclEntry.supportedOperations):
the bits of an ``authorized_operations`` field (KIP-430)."""
# Allowing any of these implies DESCRIBE; allowing ALTER_CONFIGS implies DESCRIBE_CONFIGS.
_IMPLIES_DESCRIBE = frozenset(
    {AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
)


@dataclass(frozen=True)
class AclBinding:
    """One ACL: ``principal`` from ``host`` may (ALLOW) or may not (DENY) ``operation``
    on the resources the pattern matches."""

    resource_type: AclResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def invalid_reason(self) -> str | None:
        """Why Kafka would refuse to create this ACL, or None."""
        if self.resource_type in (AclResourceType.ANY, AclResourceType.UNKNOWN):
            return "Resource type must be a concrete type"
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            return "Pattern type must be LITERAL or PREFIXED"
        if self.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
            return "Operation must be a concrete operation"
        if self.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            return "Permission type must be ALLOW or DENY"
        if not self.resource_name:
            return "Resource name must not be empty"
        if self.resource_name in (".", "..") or _NOT_IN_NODE_NAME.search(self.resource_name):
            return (
                f"Resource name {self.resource_name!r} cannot be stored: it is not a valid "
                "ZooKeeper node name"
            )
        if ":" not in self.principal:
            return f"Could not parse principal from `{self.principal}` (no colon is found)"
        if self.resource_type is AclResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
        return None

    def entry_json(self) -> dict[str, str]:
        return {
            "principal": self.principal,
            "permissionType": self.permission_type.store_name,
            "operation": self.operation.store_name,
            "host": self.host,
        }


@dataclass(frozen=True)
class AclBindingFilter:
    """Matches ACLs; None and ANY match everything."""

    resource_type: AclResourceType = AclResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def matches(self, acl: AclBinding) -> bool:
        """Kafka's filter semantics, MATCH included (literal, wildcard or prefix of the name)."""
        if self.resource_type not in (AclResourceType.ANY, acl.resource_type):
            return False
        if self.pattern_type is PatternType.MATCH:
            if self.resource_name is not None and not pattern_matches(
                acl.pattern_type, acl.resource_name, self.resource_name
            ):
                return False
        else:
            if self.pattern_type not in (PatternType.ANY, acl.pattern_type):
                return False
            if self.resource_name is not None and self.resource_name != acl.resource_name:
                return False
        return (
            self.principal in (None, acl.principal)
            and self.host in (None, acl.host)
            and self.operation in (AclOperation.ANY, acl.operation)
            and self.permission_type in (AclPermissionType.ANY, acl.permission_type)
        )


def pattern_matches(pattern_type: PatternType, pattern: str, name: str) -> bool:
    """Whether a stored resource pattern covers the resource ``name``."""
    if pattern_type is PatternType.PREFIXED:
        return name.startswith(pattern)
    return pattern in (WILDCARD, name)


def implied(operation: AclOperation) -> frozenset[AclOperation]:
    """The operations an ALLOW ACL must name to permit ``operation``: itself, ALL, and the
    operations that imply it."""
    ops = {operation, AclOperation.ALL}
    if operation is AclOperation.DESCRIBE:
        ops |= _IMPLIES_DESCRIBE
    if operation is AclOperation.DESCRIBE_CONFIGS:
        ops.add(AclOperation.ALTER_CONFIGS)
    return frozenset(ops)


STORE_ROOTS = {
    PatternType.LITERAL: "/kafka-acl",
    PatternType.PREFIXED: "/kafka-acl-extended/prefixed",
}
"""Where the ACLs of each stored pattern type live: ``<root>/<Type>/<name>``."""


def store_path(resource_type: AclResourceType, pattern_type: PatternType, name: str) -> str:
    """Where the ACLs of one resource pattern live in the metadata store."""
    return f"{STORE_ROOTS[pattern_type]}/{resource_type.store_name}/{name}"


def encode_acls(acls: list[AclBinding]) -> bytes:
    return json.dumps({"version": 1, "acls": [a.entry_json() for a in acls]}).encode()


def decode_acls(
    resource_type: AclResourceType, pattern_type: PatternType, name: str, data: bytes
) -> list[AclBinding]:
    """The ACLs of one stored node."""
    return [
        AclBinding(
            resource_type,
            name,
            pattern_type,
            entry["principal"],
            entry["host"],
            AclOperation.from_name(entry["operation"]),
            AclPermissionType.from_name(entry["permissionType"]),
        )
        for entry in json.loads(data).get("acls", [])
    ]
