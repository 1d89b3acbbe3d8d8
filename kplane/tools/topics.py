"""``kplane topics``: create, list, describe, alter and delete topics (kafka-topics.sh), with
Kafka's options and output."""

from __future__ import annotations

import argparse
import base64
import sys
from typing import Any

from kplane.client.admin import (
    Admin,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
    NewTopic,
    TopicDescription,
)
from kplane.protocol.errors import ErrorCode
from kplane.tools.admin_session import add_connection_args, run_admin

TOOL = "kplane topics"


def add_parser(sub: Any) -> None:
    """Register the ``topics`` subcommand."""
    p = sub.add_parser("topics", help="create, list, describe, alter, delete topics")
    add_connection_args(p)
    actions = p.add_mutually_exclusive_group(required=True)
    for action in ("create", "list", "describe", "alter", "delete"):
        actions.add_argument(f"--{action}", action="store_true", help=f"{action} topics")
    p.add_argument("--topic", help="the topic (--list and --describe: all when absent)")
    p.add_argument("--partitions", type=int, help="number of partitions (--create, --alter)")
    p.add_argument("--replication-factor", type=int, help="replication factor (--create)")
    p.add_argument(
        "--config", action="append", default=[], metavar="KEY=VALUE", help="a topic config"
    )
    p.add_argument("--if-not-exists", action="store_true", help="--create: no error if it exists")
    p.add_argument("--if-exists", action="store_true", help="--alter/--delete/--describe")
    p.add_argument(
        "--under-replicated-partitions",
        action="store_true",
        help="--describe: only partitions whose ISR is smaller than their replicas",
    )
    p.add_argument(
        "--exclude-internal", action="store_true", help="--list/--describe: skip internal topics"
    )
    p.set_defaults(func=run)


def _fail(message: str) -> int:
    print(f"Error while executing topic command : {message}", file=sys.stderr)
    return 1


def topic_id_text(topic_id: Any) -> str:
    """A topic id as Kafka prints it: URL-safe base64 of its 16 bytes, without padding."""
    raw = getattr(topic_id, "bytes", None)
    if not raw or raw == bytes(16):
        return "AAAAAAAAAAAAAAAAAAAAAA"
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def run(args: argparse.Namespace) -> int:
    """Run the command; 0 on success, 1 with one line on stderr otherwise."""
    if (args.create or args.alter or args.delete) and not args.topic:
        return _fail("--topic is required with --create, --alter and --delete")
    if args.create and args.partitions is not None and args.partitions < 1:
        return _fail("The partitions must be greater than 0")
    if args.alter and args.partitions is None:
        return _fail("--alter needs --partitions")
    try:
        configs = dict(item.split("=", 1) for item in args.config)
    except ValueError:
        return _fail(f"--config takes KEY=VALUE: {args.config}")
    if args.create:
        return run_admin(TOOL, args, lambda admin: _create(admin, args, configs))
    if args.list:
        return run_admin(TOOL, args, lambda admin: _list(admin, args))
    if args.describe:
        return run_admin(TOOL, args, lambda admin: _describe(admin, args))
    if args.alter:
        return run_admin(TOOL, args, lambda admin: _alter(admin, args))
    return run_admin(TOOL, args, lambda admin: _delete(admin, args))


async def _create(admin: Admin, args: argparse.Namespace, configs: dict[str, str]) -> int:
    topic = NewTopic(
        args.topic,
        args.partitions if args.partitions is not None else -1,
        args.replication_factor if args.replication_factor is not None else -1,
        configs,
    )
    error = (await admin.create_topics([topic]))[args.topic]
    if error is not None:
        if args.if_not_exists and error.code == ErrorCode.topic_already_exists:
            return 0
        return _fail(error.message or f"Topic '{args.topic}' : {error.code.name}")
    print(f"Created topic {args.topic}.")
    return 0


async def _topics(admin: Admin, args: argparse.Namespace) -> list[TopicDescription] | None:
    """The topics the command names (all without --topic); None after printing the error
    of a named topic that does not exist (unless --if-exists)."""
    found = await admin.describe_topics([args.topic] if args.topic else None)
    known = [t for t in found if t.error is None]
    if args.topic and not known:
        if args.if_exists:
            return []
        _fail(f"Topic '{args.topic}' does not exist as expected")
        return None
    return [t for t in known if not (args.exclude_internal and t.internal)]


async def _list(admin: Admin, args: argparse.Namespace) -> int:
    topics = await _topics(admin, args)
    if topics is None:
        return 1
    for topic in topics:
        print(topic.name)
    return 0


async def _describe(admin: Admin, args: argparse.Namespace) -> int:
    topics = await _topics(admin, args)
    if topics is None:
        return 1
    resources = [ConfigResource(ConfigResourceType.TOPIC, t.name) for t in topics]
    described = await admin.describe_configs(resources) if resources else {}
    for topic in topics:
        partitions = topic.partitions
        if args.under_replicated_partitions:
            partitions = tuple(p for p in partitions if len(p.isr) < len(p.replicas))
            if not partitions:
                continue
        else:
            config = described.get(ConfigResource(ConfigResourceType.TOPIC, topic.name))
            entries = config.entries.values() if config is not None else ()
            overrides = ",".join(
                f"{e.name}={e.value}"
                for e in sorted(entries, key=lambda e: e.name)
                if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG
            )
            rf = len(partitions[0].replicas) if partitions else 0
            print(
                f"Topic: {topic.name}\tTopicId: {topic_id_text(topic.topic_id)}\t"
                f"PartitionCount: {len(partitions)}\tReplicationFactor: {rf}\t"
                f"Configs: {overrides}"
            )
        for p in partitions:
            leader = p.leader if p.leader >= 0 else "none"
            print(
                f"\tTopic: {topic.name}\tPartition: {p.partition}\tLeader: {leader}\t"
                f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}"
            )
    return 0


async def _alter(admin: Admin, args: argparse.Namespace) -> int:
    if not await _topics(admin, args):
        return 0 if args.if_exists else 1
    error = (await admin.create_partitions({args.topic: args.partitions}))[args.topic]
    if error is not None:
        return _fail(error.message or error.code.name)
    return 0


async def _delete(admin: Admin, args: argparse.Namespace) -> int:
    if not await _topics(admin, args):
        return 0 if args.if_exists else 1
    error = (await admin.delete_topics([args.topic]))[args.topic]
    if error is not None:
        return _fail(error.message or error.code.name)
    return 0
