"""``kplane consumer-groups``: list, describe (with lag), reset offsets of and delete consumer
groups (kafka-consumer-groups.sh), with Kafka's options and tables."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kplane.client.admin import EARLIEST, LATEST, Admin
from kplane.client.group_admin import GroupAdmin, GroupDescription
from kplane.protocol.errors import ErrorCode
from kplane.tools.admin_session import UsageError, add_connection_args, run_admin
from kplane.tools.group_offsets_args import check_action_args, named_partitions, timestamp_ms

TOOL = "kplane consumer-groups"
INACTIVE = ("Empty", "Dead")
RESETS = ("to_earliest", "to_latest", "to_offset", "shift_by", "to_datetime")


def add_parser(sub: Any) -> None:
    """Register the ``consumer-groups`` subcommand."""
    p = sub.add_parser("consumer-groups", help="list, describe, reset, delete consumer groups")
    add_connection_args(p)
    actions = p.add_mutually_exclusive_group(required=True)
    actions.add_argument("--list", action="store_true", help="list every group")
    actions.add_argument("--describe", action="store_true", help="offsets and lag of a group")
    actions.add_argument("--reset-offsets", action="store_true", help="reset a group's offsets")
    actions.add_argument("--delete", action="store_true", help="delete a group")
    actions.add_argument(
        "--delete-offsets", action="store_true", help="delete a group's offsets of --topic"
    )
    p.add_argument("--group", help="the group")
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--members", action="store_true", help="--describe: the members")
    shown.add_argument("--state", action="store_true", help="--describe: the group's state")
    p.add_argument(
        "--verbose",
        action="store_true",
        help="--describe --members/--state: assignments and epochs (KIP-1099)",
    )
    p.add_argument(
        "--topic", action="append", default=[], help="--reset-offsets, --delete-offsets: T or T:0,1"
    )
    p.add_argument("--all-topics", action="store_true", help="--reset-offsets: every topic")
    reset = p.add_mutually_exclusive_group()
    reset.add_argument("--to-earliest", action="store_true")
    reset.add_argument("--to-latest", action="store_true")
    reset.add_argument("--to-offset", type=int)
    reset.add_argument("--shift-by", type=int)
    reset.add_argument("--to-datetime", help="YYYY-MM-DDTHH:mm:SS.sss (UTC unless an offset)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="show the new offsets (default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    p.set_defaults(func=run)


def table(rows: list[tuple[Any, ...]]) -> str:
    """Rows (the first the header) in left-aligned columns, Kafka's way."""
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        " ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def run(args: argparse.Namespace) -> int:
    """Run the command; 0 on success, 1 with one line on stderr otherwise."""
    try:
        check_action_args(args)
        if args.reset_offsets and not any(
            getattr(args, name) not in (None, False) for name in RESETS
        ):
            raise UsageError(
                "--reset-offsets needs one of --to-earliest, --to-latest, --to-offset, "
                "--shift-by, --to-datetime"
            )
    except UsageError as exc:
        print(f"{TOOL}: {exc}", file=sys.stderr)
        return 1
    if args.list:
        return run_admin(TOOL, args, _list)
    if args.describe:
        return run_admin(TOOL, args, lambda admin: _describe(admin, args))
    if args.reset_offsets:
        return run_admin(TOOL, args, lambda admin: _reset(admin, args))
    if args.delete_offsets:
        return run_admin(TOOL, args, lambda admin: _delete_offsets(admin, args))
    return run_admin(TOOL, args, lambda admin: _delete(admin, args.group))


async def _list(admin: Admin) -> int:
    for group in await GroupAdmin(admin).list_groups():
        print(group.group_id)
    return 0


async def _describe(admin: Admin, args: argparse.Namespace) -> int:
    groups = GroupAdmin(admin)
    group = await groups.describe_group(args.group)
    if group.state == "Dead":
        print(f"Error: Consumer group '{args.group}' does not exist.", file=sys.stderr)
        return 1
    if args.state:
        print()
        print(table(state_rows(admin, group, args.verbose)))
        return 0
    if not group.members:
        print(f"\nConsumer group '{args.group}' has no active members.")
    if args.members:
        print()
        print(table(member_rows(group, args.verbose)))
        return 0
    committed = await groups.committed_offsets(args.group)
    owners = {tp: m for m in group.members for tp in m.assignment}
    partitions = sorted(set(committed) | set(owners))
    ends = await admin.list_offsets({tp: LATEST for tp in partitions}) if partitions else {}
    rows: list[tuple[Any, ...]] = [(
        "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
        "CONSUMER-ID", "HOST", "CLIENT-ID",
    )]
    for tp in partitions:
        current = committed.get(tp)
        end = ends[tp][0]
        owner = owners.get(tp)
        rows.append((
            group.group_id, tp[0], tp[1],
            "-" if current is None else current, end,
            "-" if current is None else max(end - current, 0),
            owner.member_id if owner else "-", owner.host if owner else "-",
            owner.client_id if owner else "-",
        ))
    print()
    print(table(rows))
    return 0


def state_rows(admin: Admin, group: GroupDescription, verbose: bool) -> list[tuple[Any, ...]]:
    """``--describe --state``; ``--verbose`` adds a consumer group's epochs."""
    node = admin.client.cluster.brokers.get(group.coordinator)
    where = f"{node.host}:{node.port}" if node else "?"
    epochs = verbose and group.group_type == "consumer"
    return [
        ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE",
         *(("GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH") if epochs else ()), "#MEMBERS"),
        (group.group_id, f"{where} ({group.coordinator})", group.protocol, group.state,
         *((group.group_epoch, group.assignment_epoch) if epochs else ()), len(group.members)),
    ]  # fmt: skip


def assignment_text(partitions: tuple[tuple[str, int], ...]) -> str:
    """``topic:0,1;other:2`` (KIP-1099), ``-`` for none."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    text = ";".join(f"{t}:{','.join(map(str, sorted(p)))}" for t, p in sorted(by_topic.items()))
    return text or "-"


def member_rows(group: GroupDescription, verbose: bool) -> list[tuple[Any, ...]]:
    """``--describe --members``: GROUP-INSTANCE-ID when a member has one (always with
    ``--verbose``, which adds each member's epoch, assignment and target)."""
    static = verbose or any(m.instance_id for m in group.members)
    rows: list[tuple[Any, ...]] = [(
        "GROUP", "CONSUMER-ID", *(("GROUP-INSTANCE-ID",) if static else ()), "HOST",
        "CLIENT-ID", "#PARTITIONS",
        *(("CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT")
          if verbose else ()),
    )]  # fmt: skip
    for m in group.members:
        rows.append((
            group.group_id, m.member_id, *((m.instance_id or "-",) if static else ()), m.host,
            m.client_id, len(m.assignment),
            *((_or_dash(m.member_epoch), assignment_text(m.assignment),
               _or_dash(group.assignment_epoch), assignment_text(m.target_assignment))
              if verbose else ()),
        ))  # fmt: skip
    return rows


def _or_dash(value: int | None) -> Any:
    return "-" if value is None else value


async def _new_offsets(
    admin: Admin,
    args: argparse.Namespace,
    partitions: list[tuple[str, int]],
    committed: dict[tuple[str, int], int],
) -> dict[tuple[str, int], int]:
    earliest = await admin.list_offsets({tp: EARLIEST for tp in partitions})
    latest = await admin.list_offsets({tp: LATEST for tp in partitions})

    def clamp(tp: tuple[str, int], offset: int) -> int:
        return min(max(offset, earliest[tp][0]), latest[tp][0])

    if args.to_earliest:
        return {tp: earliest[tp][0] for tp in partitions}
    if args.to_latest:
        return {tp: latest[tp][0] for tp in partitions}
    if args.to_offset is not None:
        return {tp: clamp(tp, args.to_offset) for tp in partitions}
    if args.shift_by is not None:
        return {
            tp: clamp(tp, committed.get(tp, latest[tp][0]) + args.shift_by) for tp in partitions
        }
    at = await admin.list_offsets({tp: timestamp_ms(args.to_datetime) for tp in partitions})
    return {tp: at[tp][0] if at[tp][0] >= 0 else latest[tp][0] for tp in partitions}


async def _reset(admin: Admin, args: argparse.Namespace) -> int:
    groups = GroupAdmin(admin)
    group: GroupDescription = await groups.describe_group(args.group)
    if group.state not in INACTIVE:
        print(
            f"Error: Assignments can only be reset if the group '{args.group}' is inactive, "
            f"but the current state is {group.state}.",
            file=sys.stderr,
        )
        return 1
    committed = await groups.committed_offsets(args.group)
    try:
        partitions = await named_partitions(admin, args, committed)
        new = await _new_offsets(admin, args, partitions, committed) if partitions else {}
    except (UsageError, ValueError) as exc:
        print(f"{TOOL}: {exc}", file=sys.stderr)
        return 1
    if args.execute and new:
        failed = {tp: e for tp, e in (await groups.alter_offsets(args.group, new)).items() if e}
        for (topic, partition), error in sorted(failed.items()):
            print(f"{TOOL}: {topic}-{partition}: {error}", file=sys.stderr)
        if failed:
            return 1
    elif not args.dry_run and not args.execute:
        print(
            "WARN: No action will be performed as the --execute option is missing. "
            "In a future major release, the default behavior of this command will be to "
            "prompt the user before executing the reset rather than doing a dry run. You "
            "should add the --dry-run option explicitly if you are scripting this command "
            "and want to keep the current default behavior without prompting.",
            file=sys.stderr,
        )
    print()
    print(table([
        ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"),
        *((args.group, tp[0], tp[1], offset) for tp, offset in sorted(new.items())),
    ]))
    return 0


async def _delete(admin: Admin, group: str) -> int:
    error = (await GroupAdmin(admin).delete_groups([group])).get(group)
    if error is not None:
        print(
            f"Deletion of some consumer groups failed:\n* Group '{group}' could not be "
            f"deleted due to: {error}",
            file=sys.stderr,
        )
        return 1
    print(f"Deletion of requested consumer groups ('{group}') was successful.")
    return 0


DELETE_OFFSETS_ERRORS = {
    ErrorCode.invalid_group_id: "'{group}' is not valid.",
    ErrorCode.group_id_not_found: "'{group}' does not exist.",
    ErrorCode.group_authorization_failed: "Access to '{group}' is not authorized.",
    ErrorCode.non_empty_group: (
        "Deleting offsets of a consumer group '{group}' is forbidden if the group is not empty."
    ),
}
PARTITION_LEVEL = (
    ErrorCode.group_subscribed_to_topic,
    ErrorCode.topic_authorization_failed,
    ErrorCode.unknown_topic_or_partition,
)


async def _delete_offsets(admin: Admin, args: argparse.Namespace) -> int:
    try:
        partitions = await named_partitions(admin, args, ())
    except (UsageError, ValueError) as exc:
        print(f"{TOOL}: {exc}", file=sys.stderr)
        return 1
    top, results = await GroupAdmin(admin).delete_offsets(args.group, partitions)
    # As Kafka's AdminClient: the first partition's error fails the whole request.
    top = top or next((e for e in results.values() if e is not None), None)
    if top is None:
        print(
            f"Request succeed for deleting offsets with topic {', '.join(args.topic)} "
            f"group {args.group}"
        )
    elif top.code in DELETE_OFFSETS_ERRORS:
        print("Error: " + DELETE_OFFSETS_ERRORS[top.code].format(group=args.group), file=sys.stderr)
    elif top.code in PARTITION_LEVEL:
        print(
            "Error: Encounter some partition level error, see the follow-up details:",
            file=sys.stderr,
        )
    else:
        print(f"Error: Encounter some unknown error: {top.code.name}", file=sys.stderr)
    print()
    print(table([
        ("TOPIC", "PARTITION", "STATUS"),
        *(
            (topic, partition, "Successful" if error is None else f"Error: {error}")
            for (topic, partition), error in sorted(results.items())
        ),
    ]))
    return 0 if top is None else 1
