"""``kplane scram``: create, delete and describe users' SCRAM credentials through a broker.

The password is salted and hashed on this side (AlterUserScramCredentials carries only the
salted password); the broker keeps the salt and the derived keys in the metadata store.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import sys
from typing import Any

from kplane.broker.security.scram import MAX_ITERATIONS, MIN_ITERATIONS, SCRAM_MECHANISMS
from kplane.client.admin import Admin, ScramDeletion, ScramMechanism, ScramUpsertion
from kplane.tools.admin_session import UsageError, add_connection_args, client_config, with_admin


def add_parser(sub: Any) -> None:
    """Register the ``scram`` subcommand."""
    parser = sub.add_parser("scram", help="manage SCRAM-SHA-256/512 users through a broker")
    add_connection_args(parser)
    actions = parser.add_subparsers(dest="scram_action", required=True)
    add = actions.add_parser("add", help="create or replace a user's credential")
    add.add_argument("user")
    add.add_argument("--mechanism", choices=SCRAM_MECHANISMS, default="SCRAM-SHA-512")
    add.add_argument("--password", help="the password (prompted for when omitted)")
    add.add_argument(
        "--iterations",
        type=int,
        default=MIN_ITERATIONS,
        help=f"{MIN_ITERATIONS}-{MAX_ITERATIONS} (default {MIN_ITERATIONS})",
    )
    delete = actions.add_parser("delete", help="remove a user's credential for a mechanism")
    delete.add_argument("user")
    delete.add_argument("--mechanism", choices=SCRAM_MECHANISMS, required=True)
    describe = actions.add_parser("describe", help="list users and their mechanisms")
    describe.add_argument("users", nargs="*", help="users to describe (default: every user)")
    parser.set_defaults(func=run)


def mechanism(name: str) -> ScramMechanism:
    """A mechanism by its name, ``SCRAM-SHA-256`` or ``SCRAM-SHA-512``."""
    return ScramMechanism[name.replace("-", "_")]


def run(args: argparse.Namespace) -> int:
    """Run one action; 0 on success, 1 when the broker refused it."""
    try:
        config = client_config(args)
    except (UsageError, ValueError) as exc:
        print(f"kplane scram: {exc}", file=sys.stderr)
        return 1
    if args.scram_action == "add" and args.password is None:
        args.password = getpass.getpass(f"Password for {args.user}: ")
    return asyncio.run(
        with_admin("kplane scram", config, args.bootstrap_server, lambda a: _run(a, args))
    )


async def _run(admin: Admin, args: argparse.Namespace) -> int:
    if args.scram_action == "describe":
        return await _describe(admin, args.users or None)
    change: ScramUpsertion | ScramDeletion
    if args.scram_action == "add":
        change = ScramUpsertion(
            args.user, mechanism(args.mechanism), args.password, args.iterations
        )
    else:
        change = ScramDeletion(args.user, mechanism(args.mechanism))
    error = (await admin.alter_user_scram_credentials([change])).get(args.user)
    if error is not None:
        print(
            f"kplane scram {args.scram_action}: {error.code.name.upper()}: {error}", file=sys.stderr
        )
        return 1
    verb = "added" if args.scram_action == "add" else "deleted"
    print(f"{args.mechanism} credential of {args.user} {verb}")
    return 0


async def _describe(admin: Admin, users: list[str] | None) -> int:
    status = 0
    for user, described in sorted((await admin.describe_user_scram_credentials(users)).items()):
        if described.error is not None:
            print(
                f"{user}: {described.error.code.name.upper()}: {described.error}", file=sys.stderr
            )
            status = 1
            continue
        mechanisms = ", ".join(
            f"{c.mechanism.name.replace('_', '-')} (iterations={c.iterations})"
            for c in described.credentials
        )
        print(f"{user}: {mechanisms}")
    return status
