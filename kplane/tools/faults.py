"""``kplane faults``: inject faults into a running ``kplane serve`` broker started with
``kplane.faults.enable=true`` (kplane's own API, key 10000; super users only when the broker
has an authorizer), for testing clients:

    kplane faults --bootstrap-server H:P push-errors --api Produce NOT_LEADER_OR_FOLLOWER
    kplane faults --bootstrap-server H:P rtt --ms 200 [--listener CLIENT]
    kplane faults --bootstrap-server H:P drop-connections --listener CLIENT
    kplane faults --bootstrap-server H:P down --seconds 5
    kplane faults --bootstrap-server H:P clear | describe
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kplane.client.admin import Admin
from kplane.common.network.connection import UnsupportedApi
from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode
from kplane.tools.admin_session import UsageError, add_connection_args, run_admin

TOOL = "kplane faults"


def add_parser(sub: Any) -> None:
    """Register the ``faults`` subcommand."""
    p = sub.add_parser("faults", help="inject faults into a broker (kplane.faults.enable)")
    add_connection_args(p)
    p.add_argument("--broker", type=int, help="the broker's id (default: any broker)")
    actions = p.add_subparsers(dest="action", required=True)
    push = actions.add_parser("push-errors", help="answer the next requests of an API with errors")
    push.add_argument("--api", required=True, help="the API, e.g. Produce, Fetch, Metadata")
    push.add_argument("errors", nargs="+", help="Kafka error names, e.g. NOT_LEADER_OR_FOLLOWER")
    rtt = actions.add_parser("rtt", help="delay every response")
    rtt.add_argument("--ms", type=int, required=True)
    rtt.add_argument("--listener", help="only on this listener")
    drop = actions.add_parser("drop-connections", help="drop a listener's connections")
    drop.add_argument("--listener", required=True)
    down = actions.add_parser("down", help="close every listener for a while")
    down.add_argument("--seconds", type=float, required=True)
    actions.add_parser("clear", help="no queued error, no delay")
    actions.add_parser("describe", help="the errors still queued")
    p.set_defaults(func=run)


def api_key_named(name: str) -> int:
    """An API's key from its name (``Produce``, ``ListOffsets``, ``list_offsets``)."""
    wanted = name.replace("_", "").lower()
    for key in ApiKey:
        if key.name.replace("_", "").lower() == wanted:
            return int(key)
    raise UsageError(f"no Kafka API is named {name!r}")


def error_named(name: str) -> ErrorCode:
    """An ErrorCode from its name (``NOT_LEADER_OR_FOLLOWER``)."""
    try:
        return ErrorCode[name.lower()]
    except KeyError:
        raise UsageError(f"no Kafka error is named {name!r}") from None


def run(args: argparse.Namespace) -> int:
    """Send the action; 0 when the broker applied it."""
    try:
        fields: dict[str, Any] = {"action": args.action, "listener": None}
        if args.action == "push-errors":
            fields["api_key"] = api_key_named(args.api)
            fields["error_codes"] = tuple(int(error_named(e)) for e in args.errors)
        elif args.action == "rtt":
            fields.update(rtt_ms=args.ms, listener=args.listener)
        elif args.action == "drop-connections":
            fields["listener"] = args.listener
        elif args.action == "down":
            fields["down_ms"] = int(args.seconds * 1000)
    except UsageError as exc:
        print(f"{TOOL}: {exc}", file=sys.stderr)
        return 1
    return run_admin(TOOL, args, lambda admin: _send(admin, args.broker, fields))


async def _send(admin: Admin, broker: int | None, fields: dict[str, Any]) -> int:
    def build(version: int) -> Any:
        return api.make(api.request_class(ApiKey.KPLANE_FAULTS, version), **fields)

    try:
        response = await admin.client.request(broker, ApiKey.KPLANE_FAULTS, build)
    except UnsupportedApi:
        print(
            f"{TOOL}: fault injection is off on this broker: start it with "
            "kplane.faults.enable=true",
            file=sys.stderr,
        )
        return 1
    if response.error_code != ErrorCode.none:
        print(f"{TOOL}: {response.error_code.name}: {response.error_message}", file=sys.stderr)
        return 1
    for queued in response.queued:
        print(f"{api.API_NAMES.get(int(queued.api_key))}: {queued.count} error(s) queued")
    print(f"{fields['action']}: done")
    return 0
