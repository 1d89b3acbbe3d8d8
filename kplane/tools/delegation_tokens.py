"""``kplane delegation-tokens``: create, renew, expire and describe delegation tokens, with
kafka-delegation-tokens.sh's options and output (``--create --max-life-time-period
[--renewer-principal ...] [--owner-principal]``, ``--renew --renew-time-period --hmac``,
``--expire --expiry-time-period --hmac``, ``--describe [--owner-principal ...]``)."""

from __future__ import annotations

import argparse
import base64
import binascii
import sys
import time
from typing import Any

from kplane.client.token_admin import DelegationToken, TokenAdmin, principal_parts
from kplane.protocol.errors import ErrorCode, KafkaError
from kplane.tools.admin_session import add_connection_args, run_admin

TOOL = "kplane delegation-tokens"
JAVA_ERRORS = {
    ErrorCode.delegation_token_auth_disabled: (
        "DelegationTokenDisabledException",
        "Delegation Token feature is not enabled.",
    ),
    ErrorCode.delegation_token_not_found: (
        "DelegationTokenNotFoundException",
        "Delegation Token is not found on server.",
    ),
    ErrorCode.delegation_token_owner_mismatch: (
        "DelegationTokenOwnerMismatchException",
        "Specified Principal is not valid Owner/Renewer.",
    ),
    ErrorCode.delegation_token_request_not_allowed: (
        "UnsupportedByAuthenticationException",
        "Delegation Token requests are not allowed on PLAINTEXT/1-way SSL channels and on "
        "delegation token authenticated channels.",
    ),
    ErrorCode.delegation_token_authorization_failed: (
        "DelegationTokenAuthorizationException",
        "Delegation Token authorization failed.",
    ),
    ErrorCode.delegation_token_expired: (
        "DelegationTokenExpiredException",
        "Delegation Token is expired.",
    ),
    ErrorCode.invalid_principal_type: (
        "InvalidPrincipalTypeException",
        "Supplied principalType is not supported.",
    ),
}
"""The exception (in org.apache.kafka.common.errors) and message kafka-delegation-tokens.sh
prints for a refusal."""
ACTIONS = ("create", "renew", "expire", "describe")
ROW = "\n{:<15} {:<30} {:<15} {:<15} {:<25} {:<15} {:<15} {:<15}\n"


def add_parser(sub: Any) -> None:
    """Register the ``delegation-tokens`` subcommand."""
    p = sub.add_parser(
        "delegation-tokens",
        help="create, renew, expire or describe delegation tokens",
        description="This tool helps to create, renew, expire, or describe delegation tokens.",
    )
    add_connection_args(p)
    p.add_argument("--create", action="store_true", help="create a new delegation token")
    p.add_argument("--renew", action="store_true", help="renew a delegation token")
    p.add_argument("--expire", action="store_true", help="expire a delegation token")
    p.add_argument("--describe", action="store_true", help="describe delegation tokens")
    p.add_argument(
        "--owner-principal",
        action="append",
        default=[],
        metavar="PRINCIPAL",
        help="owner, Type:name (--create: the token's owner; --describe: owners or renewers)",
    )
    p.add_argument(
        "--renewer-principal",
        action="append",
        default=[],
        metavar="PRINCIPAL",
        help="a principal allowed to renew the token, Type:name",
    )
    p.add_argument(
        "--max-life-time-period",
        type=int,
        metavar="MS",
        help="max life of the token in ms; -1: the broker's delegation.token.max.lifetime.ms",
    )
    p.add_argument(
        "--renew-time-period",
        type=int,
        metavar="MS",
        help="renew time period in ms; -1: the broker's delegation.token.expiry.time.ms",
    )
    p.add_argument(
        "--expiry-time-period",
        type=int,
        metavar="MS",
        help="expiry time period in ms; -1: invalidate the token at once",
    )
    p.add_argument("--hmac", help="HMAC of the delegation token")
    p.set_defaults(func=run)


REQUIRED = {
    "create": ("max_life_time_period",),
    "renew": ("hmac", "renew_time_period"),
    "expire": ("hmac", "expiry_time_period"),
    "describe": (),
}
INVALID = {
    "create": ("hmac", "renew_time_period", "expiry_time_period"),
    "renew": ("renewer_principal", "max_life_time_period", "expiry_time_period", "owner_principal"),
    "expire": ("renewer_principal", "max_life_time_period", "renew_time_period", "owner_principal"),
    "describe": ("renew_time_period", "max_life_time_period", "hmac", "expiry_time_period"),
}
"""kafka-delegation-tokens.sh's checkArgs: options each action needs, and refuses."""


def _option(dest: str) -> str:
    return dest.replace("_", "-")


def _usage_error(args: argparse.Namespace) -> str | None:
    actions = [a for a in ACTIONS if getattr(args, a)]
    if len(actions) != 1:
        return "Command must include exactly one action: --create, --renew, --expire or --describe"
    if not args.command_config:
        return 'Missing required argument "[command-config]"'
    action = actions[0]
    for dest in REQUIRED[action]:
        if getattr(args, dest) is None:
            return f'Missing required argument "[{_option(dest)}]"'
    for dest in INVALID[action]:
        if getattr(args, dest) not in (None, []):
            return f'Option "[{action}]" can\'t be used with option "[{_option(dest)}]"'
    try:
        for principal in (*args.owner_principal, *args.renewer_principal):
            principal_parts(principal.strip())
    except ValueError as exc:
        return str(exc)
    if args.hmac is not None:
        try:
            base64.b64decode(args.hmac, validate=True)
        except binascii.Error as exc:
            return f"--hmac is not base64: {exc}"
    return None


def run(args: argparse.Namespace) -> int:
    """Run the one action asked for; 1 on a usage error or a refusal."""
    problem = _usage_error(args)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 1
    return run_admin(TOOL, args, lambda admin: _act(TokenAdmin(admin), args))


def _date(ms: int) -> str:
    """Kafka's ``yyyy-MM-dd'T'HH:mm`` in the local time zone."""
    return time.strftime("%Y-%m-%dT%H:%M", time.localtime(ms / 1000))


def _java_list(items: list[str] | tuple[str, ...]) -> str:
    return f"[{', '.join(items)}]"


def _print_tokens(tokens: list[DelegationToken]) -> None:
    out = ROW.format(
        "TOKENID", "HMAC", "OWNER", "REQUESTER", "RENEWERS", "ISSUEDATE", "EXPIRYDATE", "MAXDATE"
    )
    for token in tokens:
        info = token.info
        out += ROW.format(
            info.token_id,
            token.hmac_base64,
            info.owner,
            info.requester,
            _java_list(info.renewers),
            _date(info.issue_timestamp),
            _date(info.expiry_timestamp),
            _date(info.max_timestamp),
        )
    sys.stdout.write(out)


async def _act(tokens: TokenAdmin, args: argparse.Namespace) -> int:
    owners = [o.strip() for o in args.owner_principal]
    try:
        if args.create:
            renewers = [r.strip() for r in args.renewer_principal]
            print(
                f"Calling create token operation with renewers :{_java_list(renewers)} , "
                f"max-life-time-period :{args.max_life_time_period}"
            )
            token = await tokens.create_delegation_token(
                renewers, args.max_life_time_period, owners[0] if owners else None
            )
            print(f"Created delegation token with tokenId : {token.info.token_id}")
            _print_tokens([token])
        elif args.renew:
            print(
                f"Calling renew token operation with hmac :{args.hmac} , "
                f"renew-time-period :{args.renew_time_period}"
            )
            expiry = await tokens.renew_delegation_token(
                base64.b64decode(args.hmac), args.renew_time_period
            )
            sys.stdout.write(f"Completed renew operation. New expiry date : {_date(expiry)}")
        elif args.expire:
            print(
                f"Calling expire token operation with hmac :{args.hmac} , "
                f"expire-time-period :{args.expiry_time_period}"
            )
            expiry = await tokens.expire_delegation_token(
                base64.b64decode(args.hmac), args.expiry_time_period
            )
            sys.stdout.write(f"Completed expire operation. New expiry date : {_date(expiry)}")
        else:
            if owners:
                print(f"Calling describe token operation for owners: {_java_list(owners)}")
            else:
                print("Calling describe token operation for current user.")
            found = await tokens.describe_delegation_token(owners or None)
            sys.stdout.write(f"Total number of tokens : {len(found)}")
            _print_tokens(found)
    except KafkaError as exc:
        java = JAVA_ERRORS.get(exc.code)
        if java is None:
            raise
        sys.stdout.flush()
        print(f"org.apache.kafka.common.errors.{java[0]}: {java[1]}", file=sys.stderr)
        return 1
    return 0
