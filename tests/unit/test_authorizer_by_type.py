"""AclAuthorizer.any_allowed: Kafka's authorization by resource type (an idempotent producer
without IdempotentWrite may write if it may Write some topic)."""

from __future__ import annotations

from kplane.broker.metadata.store import EmbeddedMetadataStore
from kplane.broker.security.authorizer import AclAuthorizer
from kplane.common.acl import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AclResourceType,
    PatternType,
)

TOPIC, WRITE = AclResourceType.TOPIC, AclOperation.WRITE
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
HERE, THERE = "127.0.0.1", "10.0.0.9"


def authorizer(allow_if_no_acl: bool, *acls: AclBinding) -> AclAuthorizer:
    a = AclAuthorizer(EmbeddedMetadataStore(None), ["User:admin"], allow_if_no_acl)
    a.startup()
    a.create_acls(acls)
    return a


def acl(
    name: str,
    permission: AclPermissionType,
    principal: str = "User:alice",
    host: str = "*",
    pattern: PatternType = PatternType.LITERAL,
) -> AclBinding:
    return AclBinding(TOPIC, name, pattern, principal, host, WRITE, permission)


def may_write(a: AclAuthorizer, principal: str = "User:alice", host: str = HERE) -> bool:
    return a.any_allowed(principal, host, WRITE, TOPIC)


def test_without_acls_the_default_decides() -> None:
    assert not may_write(authorizer(False))
    assert may_write(authorizer(True))
    assert may_write(authorizer(False), "User:admin")  # a super user


def test_an_allow_on_some_topic_is_enough() -> None:
    a = authorizer(False, acl("orders", ALLOW))
    assert may_write(a)
    assert not may_write(a, "User:bob")


def test_a_wildcard_deny_counts_only_from_its_host() -> None:
    a = authorizer(False, acl("orders", ALLOW), acl("*", DENY, host=THERE))
    assert may_write(a, host=HERE)
    assert not may_write(a, host=THERE)


def test_a_wildcard_deny_wins_over_allow_everyone() -> None:
    a = authorizer(True, acl("*", DENY))
    assert not may_write(a)
    assert not may_write(a, "User:bob")  # an ACL covers every topic: bob needs an ALLOW
    assert may_write(authorizer(True, acl("orders", DENY)))  # only one topic is covered


def test_an_allow_dominated_by_a_prefix_deny_is_not_enough() -> None:
    a = authorizer(
        False,
        acl("logs-", ALLOW, pattern=PatternType.PREFIXED),
        acl("log", DENY, pattern=PatternType.PREFIXED),
    )
    assert not may_write(a)
    b = authorizer(False, acl("logs-", ALLOW, pattern=PatternType.PREFIXED), acl("x", DENY))
    assert may_write(b)
