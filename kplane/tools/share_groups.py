"""``kplane share-groups``: list, describe (offsets, members, state), reset the offsets of,
delete and delete the offsets of share groups (kafka-share-groups.sh), with Kafka's options
and tables. The requests (ListGroups by type, ShareGroupDescribe, the share-group offset
APIs) go to each group's coordinator."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kplane.client.admin import EARLIEST, LATEST, Admin
from kplane.client.kafka_client import CoordinatorType
from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode, KafkaError
from kplane.tools.admin_session import UsageError, add_connection_args, run_admin
from kplane.tools.consumer_groups import table
from kplane.tools.group_offsets_args import check_action_args, named_partitions, timestamp_ms

TOOL = "kplane share-groups"


def add_parser(sub: Any) -> None:
    """Register the ``share-groups`` subcommand."""
    p = sub.add_parser("share-groups", help="list, describe, reset, delete share groups")
    add_connection_args(p)
    actions = p.add_mutually_exclusive_group(required=True)
    actions.add_argument("--list", action="store_true", help="list every share group")
    actions.add_argument("--describe", action="store_true", help="a share group's offsets")
    actions.add_argument("--reset-offsets", action="store_true", help="reset start offsets")
    actions.add_argument("--delete", action="store_true", help="delete a share group")
    actions.add_argument(
        "--delete-offsets", action="store_true", help="delete a share group's offsets of --topic"
    )
    p.add_argument("--group", help="the share group")
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--members", action="store_true", help="--describe: the members")
    shown.add_argument("--state", action="store_true", help="--describe: the group's state")
    shown.add_argument("--offsets", action="store_true", help="--describe: offsets (default)")
    p.add_argument("--verbose", action="store_true", help="--describe: epochs")
    p.add_argument(
        "--topic", action="append", default=[], help="--reset-offsets, --delete-offsets: T or T:0,1"
    )
    p.add_argument("--all-topics", action="store_true", help="--reset-offsets: every topic")
    reset = p.add_mutually_exclusive_group()
    reset.add_argument("--to-earliest", action="store_true")
    reset.add_argument("--to-latest", action="store_true")
    reset.add_argument("--to-offset", type=int)
    reset.add_argument("--to-datetime", help="YYYY-MM-DDTHH:mm:SS.sss (UTC unless an offset)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="show the new offsets")
    mode.add_argument("--execute", action="store_true", help="set the new offsets")
    p.add_argument("--timeout", type=int, default=5000, help="ms to wait (accepted, as Kafka)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the command; 0 on success, 1 with one line on stderr otherwise."""
    try:
        check_action_args(args)
        if args.reset_offsets:
            if not (
                args.to_earliest or args.to_latest or args.to_offset is not None or args.to_datetime
            ):
                raise UsageError(
                    "--reset-offsets needs one of --to-earliest, --to-latest, --to-offset, "
                    "--to-datetime"
                )
            if not (args.dry_run or args.execute):
                raise UsageError("--reset-offsets takes the option: --execute or --dry-run")
    except UsageError as exc:
        print(f"{TOOL}: {exc}", file=sys.stderr)
        return 1
    if args.list:
        return run_admin(TOOL, args, lambda admin: _list(admin, args.state))
    if args.describe:
        return run_admin(TOOL, args, lambda admin: _describe(admin, args))
    if args.reset_offsets:
        return run_admin(TOOL, args, lambda admin: _reset(admin, args))
    if args.delete_offsets:
        return run_admin(TOOL, args, lambda admin: _delete_offsets(admin, args))
    return run_admin(TOOL, args, lambda admin: _delete(admin, args.group))


def _make(key: ApiKey, version: int, entity: str | None = None, **values: Any) -> Any:
    cls = (
        api.request_class(key, version)
        if entity is None
        else getattr(api.request_module(key, version), entity)
    )
    return api.make(cls, **values)


async def _coordinator(admin: Admin, group: str) -> int:
    return await admin.client.find_coordinator(CoordinatorType.GROUP, group)


async def _list(admin: Admin, with_state: bool) -> int:
    cluster = await admin.client.refresh_metadata()
    found: dict[str, str] = {}
    for node in sorted(cluster.brokers):
        response = await admin.client.request(
            node,
            ApiKey.LIST_GROUPS,
            lambda v: _make(ApiKey.LIST_GROUPS, v, states_filter=(), types_filter=("share",)),
        )
        if response.error_code != ErrorCode.none:
            raise KafkaError(response.error_code, f"ListGroups at broker {node}")
        found.update({str(g.group_id): g.group_state for g in response.groups})
    if with_state:
        print(table([("GROUP", "STATE"), *sorted(found.items())]))
    else:
        for group in sorted(found):
            print(group)
    return 0


async def _described(admin: Admin, group: str) -> tuple[Any, int]:
    node = await _coordinator(admin, group)
    response = await admin.client.request(
        node,
        ApiKey.SHARE_GROUP_DESCRIBE,
        lambda v: _make(
            ApiKey.SHARE_GROUP_DESCRIBE, v, group_ids=(group,), include_authorized_operations=False
        ),
    )
    return response.groups[0], node


async def _offsets(admin: Admin, group: str, node: int) -> tuple[ErrorCode, list[Any]]:
    response = await admin.client.request(
        node,
        ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
        lambda v: _make(
            ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
            v,
            groups=(
                _make(
                    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
                    v,
                    "DescribeShareGroupOffsetsRequestGroup",
                    group_id=group,
                    topics=None,
                ),
            ),
        ),
    )
    (found,) = response.groups
    rows = [(str(t.topic_name), p) for t in found.topics for p in t.partitions]
    return found.error_code, rows


def _assignment(member: Any) -> str:
    parts = ";".join(
        f"{tp.topic_name}:{','.join(str(p) for p in sorted(tp.partitions))}"
        for tp in sorted(member.assignment.topic_partitions, key=lambda tp: tp.topic_name)
    )
    return parts or "-"


async def _describe(admin: Admin, args: argparse.Namespace) -> int:
    described, node = await _described(admin, args.group)
    if described.error_code == ErrorCode.group_id_not_found:
        print(f"Error: Share group '{args.group}' does not exist.", file=sys.stderr)
        return 1
    if described.error_code != ErrorCode.none:
        raise KafkaError(described.error_code, f"ShareGroupDescribe {args.group!r}")
    if args.state:
        broker = admin.client.cluster.brokers.get(node)
        where = f"{broker.host}:{broker.port}" if broker else "?"
        epochs = ("GROUP-EPOCH", "ASSIGNMENT-EPOCH") if args.verbose else ()
        print()
        print(table([
            ("GROUP", "COORDINATOR (ID)", "STATE", *epochs, "#MEMBERS"),
            (args.group, f"{where} ({node})", described.group_state,
             *((described.group_epoch, described.assignment_epoch) if args.verbose else ()),
             len(described.members)),
        ]))  # fmt: skip
        return 0
    if args.members:
        if not described.members:
            print(f"\nShare group '{args.group}' has no active members.")
            return 0
        rows: list[tuple[Any, ...]] = [
            ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
             *(("MEMBER-EPOCH",) if args.verbose else ()), "ASSIGNMENT"),
        ]  # fmt: skip
        for m in described.members:
            count = sum(len(tp.partitions) for tp in m.assignment.topic_partitions)
            rows.append((
                args.group, m.member_id, m.client_host, m.client_id, count,
                *((m.member_epoch,) if args.verbose else ()), _assignment(m),
            ))  # fmt: skip
        print()
        print(table(rows))
        return 0
    error, offsets = await _offsets(admin, args.group, node)
    if error != ErrorCode.none:
        raise KafkaError(error, f"DescribeShareGroupOffsets {args.group!r}")
    if not described.members:
        print(f"\nShare group '{args.group}' has no active members.")
    epoch = ("LEADER-EPOCH",) if args.verbose else ()
    out: list[tuple[Any, ...]] = [("GROUP", "TOPIC", "PARTITION", *epoch, "START-OFFSET", "LAG")]
    for topic, p in sorted(offsets, key=lambda r: (r[0], r[1].partition_index)):
        start = "-" if p.start_offset < 0 else p.start_offset
        lag = "-" if p.lag < 0 else p.lag
        leader_epoch = (("-" if p.leader_epoch < 0 else p.leader_epoch),) if args.verbose else ()
        out.append((args.group, topic, p.partition_index, *leader_epoch, start, lag))
    print()
    print(table(out))
    return 0


async def _reset(admin: Admin, args: argparse.Namespace) -> int:
    described, node = await _described(admin, args.group)
    if described.error_code == ErrorCode.none and described.members:
        print(
            f"Error: Share group '{args.group}' is not empty.",
            file=sys.stderr,
        )
        return 1
    _error, stored = await _offsets(admin, args.group, node)
    try:
        partitions = await named_partitions(
            admin, args, ((t, p.partition_index) for t, p in stored)
        )
    except (UsageError, ValueError) as exc:
        print(f"{TOOL}: {exc}", file=sys.stderr)
        return 1
    if args.to_earliest:
        specs = dict.fromkeys(partitions, EARLIEST)
    elif args.to_latest:
        specs = dict.fromkeys(partitions, LATEST)
    elif args.to_datetime:
        specs = dict.fromkeys(partitions, timestamp_ms(args.to_datetime))
    else:
        specs = {}
    found = await admin.list_offsets(specs) if specs else {}
    if args.to_offset is not None:
        new = dict.fromkeys(partitions, args.to_offset)
    else:
        latest = await admin.list_offsets(dict.fromkeys(partitions, LATEST)) if partitions else {}
        new = {tp: found[tp][0] if found[tp][0] >= 0 else latest[tp][0] for tp in partitions}
    if args.execute and new:
        failed = await _alter(admin, args.group, node, new)
        for what, error in failed:
            print(f"{TOOL}: {what}: {error}", file=sys.stderr)
        if failed:
            return 1
    print()
    print(table([
        ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"),
        *((args.group, tp[0], tp[1], offset) for tp, offset in sorted(new.items())),
    ]))  # fmt: skip
    return 0


async def _alter(
    admin: Admin, group: str, node: int, new: dict[tuple[str, int], int]
) -> list[tuple[str, str]]:
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (topic, partition), offset in sorted(new.items()):
        by_topic.setdefault(topic, []).append((partition, offset))
    key = ApiKey.ALTER_SHARE_GROUP_OFFSETS

    def build(v: int) -> Any:
        return _make(
            key,
            v,
            group_id=group,
            topics=tuple(
                _make(
                    key,
                    v,
                    "AlterShareGroupOffsetsRequestTopic",
                    topic_name=topic,
                    partitions=tuple(
                        _make(
                            key,
                            v,
                            "AlterShareGroupOffsetsRequestPartition",
                            partition_index=p,
                            start_offset=o,
                        )
                        for p, o in parts
                    ),
                )
                for topic, parts in by_topic.items()
            ),
        )

    response = await admin.client.request(node, key, build)
    if response.error_code != ErrorCode.none:
        return [(group, response.error_message or ErrorCode(response.error_code).name)]
    return [
        (f"{t.topic_name}-{p.partition_index}", ErrorCode(p.error_code).name)
        for t in response.responses
        for p in t.partitions
        if p.error_code != ErrorCode.none
    ]


async def _delete(admin: Admin, group: str) -> int:
    node = await _coordinator(admin, group)
    response = await admin.client.request(
        node,
        ApiKey.DELETE_GROUPS,
        lambda v: _make(ApiKey.DELETE_GROUPS, v, groups_names=(group,)),
    )
    code = response.results[0].error_code
    if code != ErrorCode.none:
        print(
            f"Deletion of some share groups failed:\n* Share group '{group}' could not be "
            f"deleted due to: {KafkaError(ErrorCode(code))}",
            file=sys.stderr,
        )
        return 1
    print(f"Deletion of requested share groups ('{group}') was successful.")
    return 0


async def _delete_offsets(admin: Admin, args: argparse.Namespace) -> int:
    node = await _coordinator(admin, args.group)
    key = ApiKey.DELETE_SHARE_GROUP_OFFSETS
    topics = sorted({t.partition(":")[0] for t in args.topic})
    response = await admin.client.request(
        node,
        key,
        lambda v: _make(
            key,
            v,
            group_id=args.group,
            topics=tuple(
                _make(key, v, "DeleteShareGroupOffsetsRequestTopic", topic_name=t) for t in topics
            ),
        ),
    )
    if response.error_code != ErrorCode.none:
        message = response.error_message or ErrorCode(response.error_code).name
        print(f"Error: {message}", file=sys.stderr)
        return 1
    failed = any(t.error_code != ErrorCode.none for t in response.responses)
    if failed:
        print(
            "Error: Encounter some partition level error, see the follow-up details:",
            file=sys.stderr,
        )
    print()
    print(table([
        ("TOPIC", "STATUS"),
        *((str(t.topic_name),
           "Successful" if t.error_code == ErrorCode.none
           else f"Error: {ErrorCode(t.error_code).name}") for t in response.responses),
    ]))  # fmt: skip
    return 1 if failed else 0
