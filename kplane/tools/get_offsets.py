"""``kplane get-offsets``: the offsets of partitions at a time (kafka-get-offsets.sh), printed
``topic:partition:offset`` as Kafka's tool prints them."""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from kplane.client.admin import EARLIEST, LATEST, MAX_TIMESTAMP, Admin
from kplane.tools.admin_session import add_connection_args, run_admin

TOOL = "kplane get-offsets"
TIMES = {"latest": LATEST, "earliest": EARLIEST, "max-timestamp": MAX_TIMESTAMP}


def add_parser(sub: Any) -> None:
    """Register the ``get-offsets`` subcommand."""
    p = sub.add_parser("get-offsets", help="offsets of partitions at a time (kafka-get-offsets)")
    add_connection_args(p)
    p.add_argument("--topic", help="a topic name or a regular expression (all topics if absent)")
    p.add_argument("--partitions", help="comma-separated partition ids (all if absent)")
    p.add_argument(
        "--time",
        default="latest",
        help="-1 or latest, -2 or earliest, -3 or max-timestamp, or a timestamp in ms",
    )
    p.add_argument(
        "--exclude-internal-topics", action="store_true", help="skip internal topics"
    )
    p.set_defaults(func=run)


def parse_time(text: str) -> int:
    """The ListOffsets timestamp of ``--time``; ValueError when it is none."""
    if text in TIMES:
        return TIMES[text]
    try:
        value = int(text)
    except ValueError:
        value = MAX_TIMESTAMP - 1
    if value < MAX_TIMESTAMP:
        raise ValueError(
            f"Malformed time argument {text}. Please use -1 or latest / -2 or earliest / "
            "-3 or max-timestamp, or a specified long format timestamp"
        )
    return value


def run(args: argparse.Namespace) -> int:
    """Print ``topic:partition:offset`` for every partition asked; 0 on success."""
    try:
        timestamp = parse_time(args.time)
        wanted = {int(p) for p in args.partitions.split(",")} if args.partitions else None
        pattern = re.compile(args.topic) if args.topic else None
    except (ValueError, re.error) as exc:
        print(f"{TOOL}: {exc}", file=sys.stderr)
        return 1
    return run_admin(TOOL, args, lambda admin: _print(admin, args, timestamp, wanted, pattern))


async def _print(
    admin: Admin,
    args: argparse.Namespace,
    timestamp: int,
    wanted: set[int] | None,
    pattern: re.Pattern[str] | None,
) -> int:
    topics = [
        t
        for t in await admin.describe_topics()
        if t.error is None
        and (pattern is None or pattern.fullmatch(t.name))
        and not (args.exclude_internal_topics and t.internal)
    ]
    asked = {
        (t.name, p.partition): timestamp
        for t in topics
        for p in t.partitions
        if wanted is None or p.partition in wanted
    }
    if not asked:
        print(f"{TOOL}: no partition matches", file=sys.stderr)
        return 1
    found = await admin.list_offsets(asked)
    for (topic, partition), (offset, _) in sorted(found.items()):
        print(f"{topic}:{partition}:{offset}")
    return 0
