"""``kplane console-consumer``: records of a topic to stdout (kafka-console-consumer.sh).

Every partition of the topic is read (or the one ``--partition`` names). kplane's client
has no group membership yet: with ``--group`` the consumer starts at the group's committed
offsets and commits where it stopped, as an admin commit (the coordinator refuses it while
the group has active members), without joining the group.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from kplane.client.admin import Admin
from kplane.client.consumer import Consumer, ConsumerRecord
from kplane.client.group_admin import GroupAdmin
from kplane.tools.admin_session import UsageError, add_connection_args, run_admin
from kplane.tools.console_io import client_settings, pairs, stop_on_signals

TOOL = "kplane console-consumer"
POLL_MS = 200


def add_parser(sub: Any) -> None:
    """Register the ``console-consumer`` subcommand."""
    p = sub.add_parser("console-consumer", help="records of a topic to stdout")
    add_connection_args(p)
    p.add_argument("--topic", required=True, help="the topic to read")
    p.add_argument("--from-beginning", action="store_true", help="start at the earliest offset")
    p.add_argument("--group", help="start at the group's committed offsets, commit at the end")
    p.add_argument("--partition", type=int, help="read only this partition")
    p.add_argument("--offset", help="with --partition: earliest, latest or an offset")
    p.add_argument("--max-messages", type=int, help="stop after this many records")
    p.add_argument("--timeout-ms", type=int, help="stop when no record came for this long")
    p.add_argument(
        "--isolation-level", choices=("read_uncommitted", "read_committed"),
        default="read_uncommitted",
    )
    p.add_argument(
        "--property", action="append", default=[], metavar="KEY=VALUE",
        help="print.key, print.timestamp, print.partition, print.offset, key.separator",
    )
    p.add_argument(
        "--consumer-property", action="append", default=[], metavar="KEY=VALUE",
        help="a consumer setting",
    )
    p.add_argument("--consumer.config", dest="consumer_config", help="consumer settings file")
    p.set_defaults(func=run)


class Formatter:
    """Kafka's DefaultMessageFormatter: the fields ``print.*`` asks for, then the value."""

    def __init__(self, properties: dict[str, str]) -> None:
        def flag(name: str) -> bool:
            return properties.get(name, "false").lower() == "true"

        self.timestamp = flag("print.timestamp")
        self.partition = flag("print.partition")
        self.offset = flag("print.offset")
        self.key = flag("print.key")
        self.separator = properties.get("key.separator", "\t").encode()

    def format(self, record: ConsumerRecord) -> bytes:
        fields: list[bytes] = []
        if self.timestamp:
            fields.append(b"CreateTime:%d" % record.timestamp)
        if self.partition:
            fields.append(b"Partition:%d" % record.partition)
        if self.offset:
            fields.append(b"Offset:%d" % record.offset)
        if self.key:
            fields.append(b"null" if record.key is None else record.key)
        fields.append(b"null" if record.value is None else record.value)
        return self.separator.join(fields) + b"\n"


def run(args: argparse.Namespace) -> int:
    """Print records until --max-messages, --timeout-ms, SIGINT or SIGTERM; 0 on success."""
    try:
        if args.offset is not None and args.partition is None:
            raise UsageError("--offset needs --partition")
        if args.offset not in (None, "earliest", "latest") and not args.offset.isdigit():
            raise UsageError(f"--offset {args.offset}: not earliest, latest or an offset")
        formatter = Formatter(pairs(args.property, "--property"))
        settings = {
            "auto.offset.reset": "earliest" if args.from_beginning else "latest",
            "isolation.level": args.isolation_level,
        }
        settings.update(
            client_settings(args.consumer_config, args.consumer_property, "--consumer-property")
        )
    except UsageError as exc:
        print(f"{TOOL}: {exc}", file=sys.stderr)
        return 1
    return run_admin(TOOL, args, lambda admin: _consume(admin, args, formatter), settings)


async def _consume(admin: Admin, args: argparse.Namespace, formatter: Formatter) -> int:
    (topic,) = await admin.describe_topics([args.topic])
    if topic.error is not None:
        print(f"{TOOL}: topic '{args.topic}': {topic.error}", file=sys.stderr)
        return 1
    partitions = [p.partition for p in topic.partitions]
    if args.partition is not None:
        if args.partition not in partitions:
            print(f"{TOOL}: {args.topic} has no partition {args.partition}", file=sys.stderr)
            return 1
        partitions = [args.partition]
    consumer = Consumer.from_config(admin.client)
    consumer.assign((args.topic, p) for p in partitions)
    groups = GroupAdmin(admin)
    if args.group:
        committed = await groups.committed_offsets(args.group)
        for p in partitions:
            if (args.topic, p) in committed:
                consumer.seek(args.topic, p, committed[(args.topic, p)])
    if args.offset == "earliest":
        await consumer.seek_to_beginning()
    elif args.offset == "latest":
        await consumer.seek_to_end()
    elif args.offset is not None:
        consumer.seek(args.topic, args.partition, int(args.offset))
    stop = stop_on_signals()
    count = 0
    last = time.monotonic()
    out = sys.stdout.buffer
    try:
        while not stop.is_set() and (args.max_messages is None or count < args.max_messages):
            left = None if args.max_messages is None else args.max_messages - count
            records = await consumer.poll(POLL_MS, max_records=left)
            for record in records:
                out.write(formatter.format(record))
            out.flush()
            count += len(records)
            now = time.monotonic()
            if records:
                last = now
            elif args.timeout_ms is not None and (now - last) * 1000 >= args.timeout_ms:
                break
        if args.group:
            positions = {
                (args.topic, p): position
                for p in partitions
                if (position := consumer.position(args.topic, p)) is not None
            }
            answers = await groups.alter_offsets(args.group, positions)
            for (name, p), error in sorted(answers.items()):
                if error is not None:
                    print(f"{TOOL}: commit {name}-{p} for {args.group}: {error}", file=sys.stderr)
    finally:
        await consumer.close()
        print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0
