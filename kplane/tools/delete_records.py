"""``kplane delete-records``: delete the records of partitions up to offsets read from a
JSON file (kafka-delete-records.sh), printing each partition's new low watermark."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from kplane.client.admin import Admin
from kplane.tools.admin_session import add_connection_args, run_admin

TOOL = "kplane delete-records"
EXAMPLE = '{"partitions": [{"topic": "t", "partition": 0, "offset": 3}], "version": 1}'


def add_parser(sub: Any) -> None:
    """Register the ``delete-records`` subcommand."""
    p = sub.add_parser("delete-records", help="delete records up to offsets")
    add_connection_args(p)
    p.add_argument(
        "--offset-json-file", required=True, type=Path, help=f"partitions and offsets: {EXAMPLE}"
    )
    p.set_defaults(func=run)


def read_offsets(path: Path) -> dict[tuple[str, int], int]:
    """``(topic, partition) -> offset`` of Kafka's offset JSON; ValueError naming the fault."""
    try:
        document = json.loads(path.read_text())
        entries = document["partitions"]
        offsets = {(str(e["topic"]), int(e["partition"])): int(e["offset"]) for e in entries}
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path} is not offset JSON like {EXAMPLE} ({exc})") from None
    if not offsets:
        raise ValueError(f"{path} names no partition")
    return offsets


def run(args: argparse.Namespace) -> int:
    """Delete the records; 0 when every partition succeeded."""
    try:
        offsets = read_offsets(args.offset_json_file)
    except ValueError as exc:
        print(f"{TOOL}: {exc}", file=sys.stderr)
        return 1
    return run_admin(TOOL, args, lambda admin: _delete(admin, offsets))


async def _delete(admin: Admin, offsets: dict[tuple[str, int], int]) -> int:
    print("Executing records delete operation")
    results = await admin.delete_records(offsets)
    print("Records delete operation completed:")
    failed = False
    for (topic, partition), result in sorted(results.items()):
        if isinstance(result, int):
            print(f"partition: {topic}-{partition}\tlow_watermark: {result}")
        else:
            failed = True
            print(f"partition: {topic}-{partition}\terror: {result}")
    return 1 if failed else 0
