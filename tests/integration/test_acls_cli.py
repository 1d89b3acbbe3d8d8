"""``kplane acls`` with prefixed patterns, deny rules and MATCH listing, checked with
confluent-kafka's AdminClient."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from kplane.tools.cli import main


def acls(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["acls", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_prefixed_deny_and_match(broker_factory, capsys) -> None:  # type: ignore[no-untyped-def]
    broker = broker_factory({
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS",
    })
    b = ("--bootstrap-server", broker.bootstrap_servers)
    code, out, _ = acls(capsys, *b, "--add", "--deny-principal", "User:bob", "--deny-host",
                        "10.0.0.1", "--operation", "Read", "--topic", "ord",
                        "--resource-pattern-type", "prefixed")
    assert code == 0
    assert out.startswith(
        "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=ord, "
        "patternType=PREFIXED)`: \n \t(principal=User:bob, host=10.0.0.1, operation=READ, "
        "permissionType=DENY) \n"
    )
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    found = admin.describe_acls(AclBindingFilter(
        ResourceType.TOPIC, "ord", ResourcePatternType.PREFIXED, None, None,
        AclOperation.ANY, AclPermissionType.ANY,
    )).result(timeout=10)
    assert [(a.principal, a.host, a.operation, a.permission_type) for a in found] == [
        ("User:bob", "10.0.0.1", AclOperation.READ, AclPermissionType.DENY)
    ]
    code, out, _ = acls(capsys, *b, "--list", "--topic", "orders",
                        "--resource-pattern-type", "match")
    assert code == 0 and "name=ord, patternType=PREFIXED" in out and "User:bob" in out
    assert acls(capsys, *b, "--list", "--topic", "orders")[1] == ""

    code, out, err = acls(capsys, *b, "--add", "--allow-principal", "User:a", "--topic", "x",
                          "--resource-pattern-type", "match")
    assert (code, out) == (1, "") and err.count("\n") == 1 and "prefixed" in err
