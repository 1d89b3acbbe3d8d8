"""``kplane console-producer``: one record per line of stdin (kafka-console-producer.sh)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from kplane.client.admin import Admin
from kplane.client.producer import Producer
from kplane.tools.admin_session import UsageError, add_connection_args, run_admin
from kplane.tools.console_io import client_settings, pairs, stdin_lines, stop_on_signals

TOOL = "kplane console-producer"


def add_parser(sub: Any) -> None:
    """Register the ``console-producer`` subcommand."""
    p = sub.add_parser("console-producer", help="records from stdin, one per line")
    add_connection_args(p)
    p.add_argument("--topic", required=True, help="the topic to produce to")
    p.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="parse.key=true, key.separator=SEP (a tab by default)",
    )
    p.add_argument(
        "--producer-property", action="append", default=[], metavar="KEY=VALUE",
        help="a producer setting, e.g. acks=1, linger.ms=5",
    )
    p.add_argument("--producer.config", dest="producer_config", help="producer settings file")
    p.add_argument(
        "--request-required-acks", default="-1", help="acks of the produce requests (-1)"
    )
    p.add_argument(
        "--compression-codec", nargs="?", const="gzip",
        choices=("none", "gzip", "snappy", "lz4", "zstd"),
        help="compress the batches (gzip when given without a codec)",
    )
    p.add_argument("--sync", action="store_true", help="wait for each record's acknowledgement")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Send stdin's lines; 0 when every record was acknowledged."""
    try:
        properties = pairs(args.property, "--property")
        settings = {"acks": args.request_required_acks, "linger.ms": "5"}
        if args.compression_codec:
            settings["compression.type"] = args.compression_codec
        settings.update(
            client_settings(args.producer_config, args.producer_property, "--producer-property")
        )
    except UsageError as exc:
        print(f"{TOOL}: {exc}", file=sys.stderr)
        return 1
    parse_key = properties.get("parse.key", "false").lower() == "true"
    separator = properties.get("key.separator", "\t").encode()
    return run_admin(
        TOOL, args, lambda admin: _produce(admin, args, parse_key, separator), settings
    )


async def _produce(admin: Admin, args: argparse.Namespace, parse_key: bool, sep: bytes) -> int:
    producer = Producer.from_config(admin.client)
    lines = stdin_lines()
    stop = stop_on_signals()
    failures = 0

    def delivered(future: asyncio.Future[Any]) -> None:
        nonlocal failures
        if not future.cancelled() and future.exception() is not None:
            failures += 1
            print(f"{TOOL}: {future.exception()}", file=sys.stderr)

    line_number = 0
    try:
        while not stop.is_set():
            reading = asyncio.ensure_future(lines.get())
            stopping = asyncio.ensure_future(stop.wait())
            done, _ = await asyncio.wait({reading, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if reading not in done:
                reading.cancel()
                break
            line = reading.result()
            if not line:
                break
            line_number += 1
            value = line.rstrip(b"\r\n")
            key = None
            if parse_key:
                key, found, rest = value.partition(sep)
                if not found:
                    print(
                        f"{TOOL}: No key separator found on line number {line_number}: "
                        f"'{value.decode(errors='replace')}'",
                        file=sys.stderr,
                    )
                    failures += 1
                    break
                value = rest
            future = await producer.send(args.topic, value, key=key)
            future.add_done_callback(delivered)
            if args.sync:
                await asyncio.wait({future})
    finally:
        await producer.close()
    return 1 if failures else 0
