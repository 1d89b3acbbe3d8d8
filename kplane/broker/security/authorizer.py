"""AclAuthorizer: Kafka's ACL authorizer over ACLs kept in the metadata store.

Every broker keeps the ACLs in memory; a change is written to its resource's node and
announced under ``/kafka-acl-changes`` (literal) or ``/kafka-acl-extended-changes``
(prefixed), which every broker watches and reloads from.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterable

import structlog

from kplane.broker.config.errors import ConfigException
from kplane.broker.config.kafka_config import KafkaConfig
from kplane.broker.metadata.store import MetadataStore, NodeExistsError, NoNodeError
from kplane.common.acl import (
    STORE_ROOTS,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AclResourceType,
    PatternType,
    decode_acls,
    encode_acls,
    implied,
    store_path,
)

log = structlog.get_logger(__name__)

AUTHORIZER_CLASS_NAMES = (
    "kafka.security.authorizer.AclAuthorizer",
    "kafka.security.auth.SimpleAclAuthorizer",
    "kplane.broker.security.authorizer.AclAuthorizer",
)
_CHANGES = {
    PatternType.LITERAL: "/kafka-acl-changes",
    PatternType.PREFIXED: "/kafka-acl-extended-changes",
}
_Key = tuple[AclResourceType, PatternType, str]


class AclAuthorizer:
    """Allows or denies (principal, host, operation, resource) by Kafka's rules:
    super users may do anything; a matching DENY wins; else a matching ALLOW (or one of an
    implying operation) allows; a resource without any ACL follows
    ``allow.everyone.if.no.acl.found``."""

    def __init__(
        self, store: MetadataStore, super_users: Iterable[str], allow_if_no_acl: bool
    ) -> None:
        self.store = store
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._lock = threading.Lock()
        self._acls: dict[_Key, tuple[AclBinding, ...]] = {}
        self._seen: dict[PatternType, set[str]] = {p: set() for p in _CHANGES}

    def startup(self) -> None:
        """Load every ACL and follow the change notifications."""
        for pattern_type, root in STORE_ROOTS.items():
            for resource_type in AclResourceType:
                parent = f"{root}/{resource_type.store_name}"
                with contextlib.suppress(NoNodeError):
                    for name in self.store.get_children(parent):
                        self._reload((resource_type, pattern_type, name))
        for pattern_type, path in _CHANGES.items():
            with contextlib.suppress(NodeExistsError):
                self.store.create(path, makepath=True)
            self._seen[pattern_type] = set(self.store.get_children(path))
            self.store.watch_children(
                path,
                lambda _path, p=pattern_type: self._on_change(p),  # type: ignore[misc]
            )

    # decisions -------------------------------------------------------------------------
    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: AclResourceType,
        name: str,
    ) -> bool:
        """Whether ``principal`` connected from ``host`` may do ``operation`` on the resource."""
        if principal in self.super_users:
            return True
        acls = self._matching(resource_type, name)
        if not acls:
            return self.allow_if_no_acl
        principals = (principal, WILDCARD_PRINCIPAL)
        hosts = (host, WILDCARD)
        for acl in acls:
            if (
                acl.permission_type is AclPermissionType.DENY
                and acl.principal in principals
                and acl.host in hosts
                and acl.operation in (operation, AclOperation.ALL)
            ):
                return False
        allowing = implied(operation)
        return any(
            acl.permission_type is AclPermissionType.ALLOW
            and acl.principal in principals
            and acl.host in hosts
            and acl.operation in allowing
            for acl in acls
        )

    def _matching(self, resource_type: AclResourceType, name: str) -> list[AclBinding]:
        acls = self._acls
        out = [
            *acls.get((resource_type, PatternType.LITERAL, name), ()),
            *acls.get((resource_type, PatternType.LITERAL, WILDCARD), ()),
        ]
        for (rtype, ptype, pattern), entries in acls.items():
            if (
                rtype is resource_type
                and ptype is PatternType.PREFIXED
                and name.startswith(pattern)
            ):
                out.extend(entries)
        return out

    def any_allowed(
        self, principal: str, host: str, operation: AclOperation, resource_type: AclResourceType
    ) -> bool:
        """Whether ``principal`` may do ``operation`` on at least one resource of the type
        (Kafka's check for an idempotent producer without IdempotentWrite on the cluster):
        ``allow.everyone.if.no.acl.found`` allows while no ACL covers every resource of the
        type (the literal wildcard); else some stored pattern must be allowed, a DENY on the
        wildcard that matches this principal and host denying them all."""
        if principal in self.super_users:
            return True
        if self.allow_if_no_acl and not self._acls.get(
            (resource_type, PatternType.LITERAL, WILDCARD)
        ):
            return True
        names = {key[2] for key in self._acls if key[0] is resource_type}
        return any(self.authorize(principal, host, operation, resource_type, n) for n in names)

    # administration --------------------------------------------------------------------
    def acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """Every stored ACL the filter matches."""
        return [
            acl
            for entries in list(self._acls.values())
            for acl in entries
            if acl_filter.matches(acl)
        ]

    def create_acls(self, bindings: Iterable[AclBinding]) -> None:
        """Store ``bindings`` (validated by the caller); existing ones stay once."""
        by_key: dict[_Key, list[AclBinding]] = {}
        for acl in bindings:
            by_key.setdefault(_key_of(acl), []).append(acl)
        with self._lock:
            for key, added in by_key.items():
                current = list(self._stored(key))
                merged = current + [a for a in dict.fromkeys(added) if a not in current]
                if merged != current:
                    self._write(key, merged)

    def delete_acls(self, filters: list[AclBindingFilter]) -> list[list[AclBinding]]:
        """Delete what each filter matches; the deleted ACLs per filter."""
        deleted: list[list[AclBinding]] = [[] for _ in filters]
        with self._lock:
            for key in list(self._acls):
                current = list(self._stored(key))
                kept = []
                for acl in current:
                    hits = [i for i, f in enumerate(filters) if f.matches(acl)]
                    for i in hits:
                        deleted[i].append(acl)
                    if not hits:
                        kept.append(acl)
                if len(kept) != len(current):
                    self._write(key, kept)
        return deleted

    # store -----------------------------------------------------------------------------
    def _stored(self, key: _Key) -> list[AclBinding]:
        try:
            data, _stat = self.store.get(store_path(*key))
        except NoNodeError:
            return []
        return decode_acls(*key, data)

    def _write(self, key: _Key, acls: list[AclBinding]) -> None:
        """Store ``key``'s ACLs and take them into this broker's cache at once (read after
        write, as Kafka's authorizer); the change notice tells the other brokers."""
        path = store_path(*key)
        if acls:
            self.store.set_or_create(path, encode_acls(acls))
            self._acls[key] = tuple(acls)
        else:
            with contextlib.suppress(NoNodeError):
                self.store.delete(path)
            self._acls.pop(key, None)
        resource_type, pattern_type, name = key
        notice = (
            f"{resource_type.store_name}:{name}"
            if pattern_type is PatternType.LITERAL
            else json.dumps(
                {
                    "version": 1,
                    "resourceType": resource_type.store_name,
                    "name": name,
                    "patternType": "Prefixed",
                }
            )
        )
        self.store.create(
            _CHANGES[pattern_type] + "/acl_changes_",
            notice.encode(),
            sequential=True,
            makepath=True,
        )

    def _reload(self, key: _Key) -> None:
        acls = tuple(self._stored(key))
        if acls:
            self._acls[key] = acls
        else:
            self._acls.pop(key, None)

    def _on_change(self, pattern_type: PatternType) -> None:
        path = _CHANGES[pattern_type]
        children = self.store.get_children(path)
        fresh = [c for c in children if c not in self._seen[pattern_type]]
        self._seen[pattern_type] = set(children)
        for child in sorted(fresh):
            with contextlib.suppress(NoNodeError):
                data = self.store.get(f"{path}/{child}")[0].decode()
                if pattern_type is PatternType.LITERAL:
                    type_name, _, name = data.partition(":")
                else:
                    doc = json.loads(data)
                    type_name, name = doc["resourceType"], doc["name"]
                try:
                    resource_type = AclResourceType.from_name(type_name)
                except KeyError:
                    continue
                self._reload((resource_type, pattern_type, name))
                log.info("ACLs reloaded", resource=f"{type_name}:{name}", pattern=pattern_type.name)


def _key_of(acl: AclBinding) -> _Key:
    return (acl.resource_type, acl.pattern_type, acl.resource_name)


def authorizer_from_config(config: KafkaConfig, store: MetadataStore) -> AclAuthorizer | None:
    """The authorizer ``authorizer.class.name`` names, or None when it is empty."""
    name = str(config.get("authorizer.class.name") or "").strip()
    if not name:
        return None
    if name not in AUTHORIZER_CLASS_NAMES:
        raise ConfigException(
            f"authorizer.class.name: {name} is not available in kplane "
            f"(use {AUTHORIZER_CLASS_NAMES[0]})",
            name="authorizer.class.name",
        )
    super_users = [u.strip() for u in config.get_str("super.users").split(";") if u.strip()]
    return AclAuthorizer(store, super_users, config.get_bool("allow.everyone.if.no.acl.found"))
