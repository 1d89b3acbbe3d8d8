"""``kplane acls``: add, remove and list ACLs (kafka-acls.sh) with Kafka's options, its
``--producer``/``--consumer`` conveniences and its output."""

from __future__ import annotations

import argparse
import sys
from itertools import product
from typing import Any

from kplane.client.admin import Admin
from kplane.common.acl import (
    CLUSTER_NAME,
    WILDCARD,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AclResourceType,
    PatternType,
)
from kplane.tools.admin_session import UsageError, add_connection_args, run_admin

TOOL = "kplane acls"
Resource = tuple[AclResourceType, str]


def add_parser(sub: Any) -> None:
    """Register the ``acls`` subcommand."""
    p = sub.add_parser("acls", help="add, remove, list ACLs (kafka-acls)")
    add_connection_args(p)
    actions = p.add_mutually_exclusive_group(required=True)
    actions.add_argument("--add", action="store_true", help="add ACLs")
    actions.add_argument("--remove", action="store_true", help="remove ACLs")
    actions.add_argument("--list", action="store_true", help="list ACLs")
    for option in ("--allow-principal", "--deny-principal", "--allow-host", "--deny-host"):
        p.add_argument(option, action="append", default=[])
    p.add_argument("--principal", help="--list: only this principal's ACLs")
    p.add_argument(
        "--operation", action="append", default=[],
        help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
        "AlterConfigs, IdempotentWrite, All",
    )
    p.add_argument("--topic", action="append", default=[])
    p.add_argument("--group", action="append", default=[])
    p.add_argument("--transactional-id", action="append", default=[])
    p.add_argument("--cluster", action="store_true")
    p.add_argument(
        "--resource-pattern-type", default=None,
        choices=("literal", "prefixed", "match", "any", "LITERAL", "PREFIXED", "MATCH", "ANY"),
    )
    p.add_argument("--producer", action="store_true", help="Write, Describe, Create on topics")
    p.add_argument("--consumer", action="store_true", help="Read, Describe on topics and groups")
    p.add_argument("--idempotent", action="store_true", help="--producer: IdempotentWrite")
    p.add_argument("--force", action="store_true", help="--remove without asking")
    p.set_defaults(func=run)


def operation(name: str) -> AclOperation:
    """An operation by Kafka's name (``Read``, ``DescribeConfigs``...); UsageError if none."""
    try:
        return AclOperation.from_name(name)
    except KeyError:
        raise UsageError(f"--operation {name}: not an ACL operation") from None


def _resources(args: argparse.Namespace) -> list[Resource]:
    resources: list[Resource] = [(AclResourceType.TOPIC, t) for t in args.topic]
    resources += [(AclResourceType.GROUP, g) for g in args.group]
    resources += [(AclResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    if args.cluster:
        resources.append((AclResourceType.CLUSTER, CLUSTER_NAME))
    return resources


def _wanted(args: argparse.Namespace) -> dict[Resource, set[AclOperation]]:
    """Resource -> operations of an --add or --remove, --producer/--consumer as Kafka
    expands them."""
    if args.producer or args.consumer:
        if not args.topic:
            raise UsageError("--producer and --consumer need --topic")
        wanted: dict[Resource, set[AclOperation]] = {}
        for topic in args.topic:
            ops = wanted.setdefault((AclResourceType.TOPIC, topic), set())
            if args.producer:
                ops |= {AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE}
            if args.consumer:
                ops |= {AclOperation.READ, AclOperation.DESCRIBE}
        if args.consumer:
            if not args.group:
                raise UsageError("--consumer needs --group")
            for group in args.group:
                wanted[(AclResourceType.GROUP, group)] = {AclOperation.READ}
        if args.producer:
            for tid in args.transactional_id:
                wanted[(AclResourceType.TRANSACTIONAL_ID, tid)] = {
                    AclOperation.WRITE, AclOperation.DESCRIBE,
                }
            if args.idempotent:
                wanted[(AclResourceType.CLUSTER, CLUSTER_NAME)] = {AclOperation.IDEMPOTENT_WRITE}
        return wanted
    resources = _resources(args)
    if not resources:
        raise UsageError("name a resource: --topic, --group, --transactional-id or --cluster")
    ops = {operation(o) for o in args.operation} or {AclOperation.ALL}
    return {resource: set(ops) for resource in resources}


def _bindings(args: argparse.Namespace, pattern: PatternType) -> list[AclBinding]:
    if not (args.allow_principal or args.deny_principal):
        raise UsageError("--allow-principal or --deny-principal is required")
    entries = [
        (principal, host, AclPermissionType.ALLOW)
        for principal, host in product(args.allow_principal, args.allow_host or [WILDCARD])
    ] + [
        (principal, host, AclPermissionType.DENY)
        for principal, host in product(args.deny_principal, args.deny_host or [WILDCARD])
    ]
    return [
        AclBinding(rtype, name, pattern, principal, host, op, permission)
        for (rtype, name), ops in _wanted(args).items()
        for op in sorted(ops)
        for principal, host, permission in entries
    ]


def _pattern_text(rtype: AclResourceType, name: str, pattern: PatternType) -> str:
    return f"`ResourcePattern(resourceType={rtype.name}, name={name}, patternType={pattern.name})`"


def _acl_text(acl: AclBinding) -> str:
    return (
        f"(principal={acl.principal}, host={acl.host}, operation={acl.operation.name}, "
        f"permissionType={acl.permission_type.name})"
    )


def _print_grouped(title: str, acls: list[AclBinding]) -> None:
    grouped: dict[tuple[AclResourceType, str, PatternType], list[AclBinding]] = {}
    for acl in acls:
        grouped.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type), []).append(acl)
    for (rtype, name, pattern), entries in sorted(grouped.items()):
        print(f"{title} {_pattern_text(rtype, name, pattern)}: ")
        for acl in entries:
            print(f" \t{_acl_text(acl)} ")
        print()


def run(args: argparse.Namespace) -> int:
    """Run the command; 0 on success, 1 with one line on stderr otherwise."""
    pattern_name = (args.resource_pattern_type or ("any" if args.list else "literal")).upper()
    pattern = PatternType[pattern_name]
    try:
        if args.add and pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise UsageError("--add takes --resource-pattern-type literal or prefixed")
        if args.add:
            bindings = _bindings(args, pattern)
            return run_admin(TOOL, args, lambda admin: _add(admin, bindings))
        if args.remove:
            wanted = _wanted(args)
            if not args.force and not _confirm("remove"):
                return 1
            return run_admin(TOOL, args, lambda admin: _remove(admin, args, pattern, wanted))
        return run_admin(TOOL, args, lambda admin: _list(admin, args, pattern))
    except UsageError as exc:
        print(f"{TOOL}: {exc}", file=sys.stderr)
        return 1


def _confirm(what: str) -> bool:
    if not sys.stdin.isatty():
        print(f"{TOOL}: --{what} without --force needs a terminal to ask on", file=sys.stderr)
        return False
    answer = input(f"Are you sure you want to {what} ACLs? (y/n)\n")
    return answer.strip().lower() == "y"


async def _add(admin: Admin, bindings: list[AclBinding]) -> int:
    _print_grouped("Adding ACLs for resource", bindings)
    errors = [e for e in await admin.create_acls(bindings) if e is not None]
    for error in errors:
        print(f"{TOOL}: {error}", file=sys.stderr)
    if errors:
        return 1
    resources = {(b.resource_type, b.resource_name, b.pattern_type) for b in bindings}
    current = [a for a in await admin.describe_acls() if
               (a.resource_type, a.resource_name, a.pattern_type) in resources]
    _print_grouped("Current ACLs for resource", current)
    return 0


async def _remove(
    admin: Admin,
    args: argparse.Namespace,
    pattern: PatternType,
    wanted: dict[Resource, set[AclOperation]],
) -> int:
    principals = [*args.allow_principal, *args.deny_principal] or [None]
    filters = [
        AclBindingFilter(rtype, name, pattern, principal, None, op)
        for (rtype, name), ops in wanted.items()
        for op in (sorted(ops) if args.operation or args.producer or args.consumer
                   else [AclOperation.ANY])
        for principal in principals
    ]
    failed = False
    for result in await admin.delete_acls(filters):
        if result.error is not None:
            failed = True
            print(f"{TOOL}: {result.error}", file=sys.stderr)
        removed = [acl for acl, error in result.matches if error is None]
        if removed:
            _print_grouped("Removing ACLs for resource", removed)
    return 1 if failed else 0


async def _list(admin: Admin, args: argparse.Namespace, pattern: PatternType) -> int:
    resources: list[tuple[AclResourceType, str | None]] = [*_resources(args)]
    found: list[AclBinding] = []
    for rtype, name in resources or [(AclResourceType.ANY, None)]:
        found += await admin.describe_acls(
            AclBindingFilter(rtype, name, pattern, args.principal)
        )
    _print_grouped("Current ACLs for resource", sorted(set(found), key=str))
    return 0
