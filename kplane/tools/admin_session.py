"""What the admin commands (``kplane configs``, ``kplane scram``) share: how they reach a
broker (``--bootstrap-server``, ``--command-config`` with client security settings) and how
a failure to reach it becomes one line on stderr."""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
from collections.abc import Awaitable, Callable, Mapping

from kplane.broker.config.errors import ConfigException
from kplane.broker.config.properties import load_properties
from kplane.client.admin import Admin
from kplane.client.kafka_client import KafkaClient, NoBrokersAvailable
from kplane.common.network.config import ClientConfig
from kplane.common.network.connection import UnsupportedApi
from kplane.common.network.security import AuthenticationError
from kplane.protocol.errors import KafkaError


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


WAIT_NOTICE_S = 2.0
"""How long a command waits for the bootstrap servers before saying that it is waiting."""


async def start_client(tool: str, client: KafkaClient, config: ClientConfig) -> None:
    """Start ``client`` as a command does: NoBrokersAvailable at once when no bootstrap host
    resolves (as Kafka's clients refuse such a ``bootstrap.servers``), and one line on stderr
    when the servers have not answered within WAIT_NOTICE_S, so a wait is never silent."""
    loop = asyncio.get_running_loop()
    resolved = 0
    for host, port in config.bootstrap_servers:
        try:
            await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            resolved += 1
        except OSError:
            continue
    if not resolved:
        names = ",".join(f"{host}:{port}" for host, port in config.bootstrap_servers)
        raise NoBrokersAvailable(f"no resolvable bootstrap address in {names}")
    starting = asyncio.ensure_future(client.start())
    done, _ = await asyncio.wait({starting}, timeout=WAIT_NOTICE_S)
    if not done:
        print(
            f"{tool}: no answer from the bootstrap servers yet; still trying for up to "
            f"{config.request_timeout_ms / 1000:.0f} s (request.timeout.ms)",
            file=sys.stderr,
            flush=True,
        )
    await starting


async def with_admin(
    tool: str, config: ClientConfig, bootstrap: str, body: Callable[[Admin], Awaitable[int]]
) -> int:
    """Run ``body`` with an Admin on a started client; a broker that cannot be reached,
    refuses the credentials or lacks the API is one line on stderr and exit code 1."""
    client = KafkaClient(config)
    try:
        await start_client(tool, client, config)
        return await body(Admin(client))
    except (UnsupportedApi, NoBrokersAvailable, AuthenticationError, KafkaError) as exc:
        print(f"{tool}: {exc}", file=sys.stderr)
        return 1
    except (TimeoutError, OSError) as exc:
        print(f"{tool}: cannot reach {bootstrap}: {exc}", file=sys.stderr)
        return 1
    finally:
        await client.close()


def run_admin(
    tool: str,
    args: argparse.Namespace,
    body: Callable[[Admin], Awaitable[int]],
    extra: Mapping[str, str] | None = None,
) -> int:
    """A command's whole run: its client settings (``--command-config``'s, then ``extra``
    such as a producer's or consumer's properties; a bad one is one line), then ``body``
    with an Admin through :func:`with_admin`; the exit code."""
    try:
        config = ClientConfig.from_properties({**client_properties(args), **(extra or {})})
    except (UsageError, ValueError) as exc:
        print(f"{tool}: {exc}", file=sys.stderr)
        return 1
    return asyncio.run(with_admin(tool, config, args.bootstrap_server, body))

