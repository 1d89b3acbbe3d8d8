"""What the admin commands (``kplane configs``, ``kplane scram``) share: how they reach a
broker (``--bootstrap-server``, ``--command-config`` with client security settings) and how
a failure to reach it becomes one line on stderr."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable

from broker.config.errors import ConfigException
from broker.config.properties import load_properties
from client.admin import Admin
from client.kafka_client import KafkaClient, NoBrokersAvailable
from common.network.config import ClientConfig
from common.network.connection import UnsupportedApi
from common.network.security import AuthenticationError


class UsageError(Exception):
    """A command line the tool refuses; its message is the one line printed."""


def add_connection_args(parser: argparse.ArgumentParser) -> None:
    """``--bootstrap-server`` and ``--command-config``, as Kafka's tools spell them."""
    parser.add_argument("--bootstrap-server", required=True, help="the Kafka server to connect to")
    parser.add_argument(
        "--command-config",
        metavar="FILE",
        help="properties file of client settings (security.protocol, ssl.*, sasl.*)",
    )


def read_properties(path: str) -> dict[str, str]:
    """A properties file; UsageError naming the problem."""
    try:
        return load_properties(path)
    except ConfigException as exc:
        raise UsageError(str(exc)) from None


def client_properties(args: argparse.Namespace) -> dict[str, str]:
    """The client settings: ``--command-config``'s, with ``bootstrap.servers`` from
    ``--bootstrap-server``."""
    props = read_properties(args.command_config) if args.command_config else {}
    props["bootstrap.servers"] = args.bootstrap_server
    return props


def client_config(args: argparse.Namespace) -> ClientConfig:
    """The ClientConfig of the command line; UsageError or ValueError when invalid."""
    return ClientConfig.from_properties(client_properties(args))


async def with_admin(
    tool: str, config: ClientConfig, bootstrap: str, body: Callable[[Admin], Awaitable[int]]
) -> int:
    """Run ``body`` with an Admin on a started client; a broker that cannot be reached,
    refuses the credentials or lacks the API is one line on stderr and exit code 1."""
    client = KafkaClient(config)
    try:
        await client.start()
        return await body(Admin(client))
    except (UnsupportedApi, NoBrokersAvailable, AuthenticationError) as exc:
        print(f"{tool}: {exc}", file=sys.stderr)
        return 1
    except (TimeoutError, OSError) as exc:
        print(f"{tool}: cannot reach {bootstrap}: {exc}", file=sys.stderr)
        return 1
    finally:
        await client.close()
