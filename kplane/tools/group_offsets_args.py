"""What ``kplane consumer-groups`` and ``kplane share-groups`` (kafka-consumer-groups.sh,
kafka-share-groups.sh) share in reading their options: the checks every action's options
pass, the partitions ``--topic``/``--all-topics`` name and ``--to-datetime``'s instant."""

from __future__ import annotations

import argparse
import datetime
from collections.abc import Iterable

from kplane.client.admin import Admin
from kplane.tools.admin_session import UsageError


def check_action_args(args: argparse.Namespace) -> None:
    """UsageError when an action lacks the options every group tool asks of it (the
    reset specification each tool checks itself)."""
    if not args.list and not args.group:
        raise UsageError(
            "--group is required with --describe, --reset-offsets, --delete, --delete-offsets"
        )
    if args.delete_offsets and not args.topic:
        raise UsageError("--delete-offsets needs --topic")
    if args.reset_offsets and not (args.topic or args.all_topics):
        raise UsageError("--reset-offsets needs --topic or --all-topics")


async def named_partitions(
    admin: Admin, args: argparse.Namespace, stored: Iterable[tuple[str, int]]
) -> list[tuple[str, int]]:
    """The partitions the options name, sorted: every ``stored`` one with ``--all-topics``;
    else each ``--topic`` ``T:0,1`` as given and each ``T`` with all its partitions
    (UsageError for a topic that cannot be described)."""
    if args.all_topics:
        return sorted(set(stored))
    wanted: list[tuple[str, int]] = []
    for item in args.topic:
        name, _, numbers = item.partition(":")
        if numbers:
            wanted += [(name, int(p)) for p in numbers.split(",")]
            continue
        (topic,) = await admin.describe_topics([name])
        if topic.error is not None:
            raise UsageError(f"topic '{name}': {topic.error}")
        wanted += [(name, p.partition) for p in topic.partitions]
    return sorted(set(wanted))


def timestamp_ms(text: str) -> int:
    """``--to-datetime`` (ISO 8601, UTC unless it names an offset) in ms since the epoch."""
    moment = datetime.datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)
