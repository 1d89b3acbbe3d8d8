"""``kplane log-dirs``: the log directories of brokers and the replicas in them, as
kafka-log-dirs.sh prints them (``--describe``, ``--topic-list``, ``--broker-list``)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kplane.client.admin import Admin
from kplane.client.log_dir_admin import LogDirAdmin, LogDirDescription
from kplane.protocol.errors import ErrorCode
from kplane.tools.admin_session import add_connection_args, run_admin

TOOL = "kplane log-dirs"
EXCEPTIONS = {
    ErrorCode.kafka_storage_error: "KafkaStorageException",
    ErrorCode.unknown_server_error: "UnknownServerException",
}
"""The Java exception kafka-log-dirs.sh names for a log dir's error."""


def add_parser(sub: Any) -> None:
    """Register the ``log-dirs`` subcommand."""
    p = sub.add_parser("log-dirs", help="query the log directories of brokers")
    add_connection_args(p)
    p.add_argument(
        "--describe",
        action="store_true",
        required=True,
        help="describe the log directories of the brokers",
    )
    p.add_argument(
        "--topic-list",
        default="",
        help='topics to show, "topic1,topic2" (all when not given)',
    )
    p.add_argument(
        "--broker-list", default="", help='brokers to query, "0,1,2" (all when not given)'
    )
    p.set_defaults(func=run)


def _names(text: str) -> list[str]:
    return [part for part in text.split(",") if part]


def run(args: argparse.Namespace) -> int:
    """Print the JSON of every queried broker's log dirs; 1 on any failure."""
    try:
        brokers = {int(b) for b in _names(args.broker_list)}
    except ValueError:
        print(f"{TOOL}: --broker-list takes broker ids: {args.broker_list}", file=sys.stderr)
        return 1
    topics = set(_names(args.topic_list))
    return run_admin(TOOL, args, lambda admin: _describe(admin, brokers, topics))


async def _describe(admin: Admin, asked: set[int], topics: set[str]) -> int:
    cluster = {b.node_id for b in (await admin.describe_cluster()).brokers}
    missing = asked - cluster
    if missing:
        print(
            "ERROR: The given brokers do not exist from --broker-list: "
            f"{_ids(missing)}. Current existent brokers: {_ids(cluster)}",
            file=sys.stderr,
        )
        return 1
    brokers = sorted(asked or cluster)
    print("Querying brokers for log directories information")
    log_dirs = LogDirAdmin(admin)
    described = {b: await log_dirs.describe_log_dirs(b) for b in brokers}
    print(f"Received log directory information from brokers {_ids(brokers)}")
    document = {
        "brokers": [
            {"broker": broker, "logDirs": [_log_dir(d, topics) for d in dirs]}
            for broker, dirs in described.items()
        ],
        "version": 1,
    }
    print(json.dumps(document, separators=(",", ":")))
    return 0


def _ids(ids: set[int] | list[int]) -> str:
    return ",".join(str(i) for i in sorted(ids))


def _log_dir(d: LogDirDescription, topics: set[str]) -> dict[str, Any]:
    error = None
    if d.error is not None:
        error = "org.apache.kafka.common.errors." + EXCEPTIONS.get(d.error, d.error.name)
    return {
        "partitions": [
            {
                "partition": f"{r.topic}-{r.partition}",
                "size": r.size,
                "offsetLag": r.offset_lag,
                "isFuture": r.is_future,
            }
            for r in sorted(d.replicas, key=lambda r: (r.topic, r.partition, r.is_future))
            if not topics or r.topic in topics
        ],
        "error": error,
        "logDir": d.path,
    }
