"""``kplane doctor``: why a client cannot reach the brokers, in a sentence per endpoint.

It connects to the bootstrap server the way a client does (``--command-config``'s
``security.protocol``, ``ssl.*``, ``sasl.*``), asks for the brokers that listener
advertises (Metadata answers with the arrival listener's endpoints only, KIP-103), then
probes each advertised endpoint as a client would: DNS, TCP, TLS, SASL, ApiVersions.
Where it can (DescribeConfigs allowed), it also names the listener the bootstrap landed on
and says when that is the control-plane listener. Exit 0 only when every endpoint works.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import ssl
import sys
from dataclasses import dataclass
from typing import Any

from kplane.client.admin import Admin, ConfigResource, ConfigResourceType
from kplane.client.kafka_client import KafkaClient
from kplane.common.network.config import ClientConfig
from kplane.common.network.connection import BrokerConnection, BrokerConnectionError
from kplane.common.network.sasl import SaslAuthenticationError
from kplane.common.network.security import SslAuthenticationError, client_ssl_context
from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.tools.admin_session import UsageError, add_connection_args, client_config

TOOL = "kplane doctor"
TIMEOUT_S = 5.0
LISTENER_KEYS = (
    "listeners",
    "advertised.listeners",
    "listener.security.protocol.map",
    "control.plane.listener.name",
    "inter.broker.listener.name",
)


def add_parser(sub: Any) -> None:
    """Register the ``doctor`` subcommand."""
    p = sub.add_parser("doctor", help="explain why a client cannot reach the brokers")
    add_connection_args(p)
    p.set_defaults(func=run)


@dataclass(frozen=True)
class Probe:
    """What connecting to one endpoint as a client found."""

    address: str
    problem: str | None
    metadata: Any = None

    @property
    def ok(self) -> bool:
        return self.problem is None


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


async def _speaks_tls(host: str, port: int) -> bool:
    """Whether ``host:port`` completes a TLS handshake (certificates not checked)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=context, server_hostname=host), TIMEOUT_S
        )
    except (OSError, TimeoutError, ssl.SSLError):
        return False
    writer.close()
    return True


async def probe(host: str, port: int, config: ClientConfig, with_metadata: bool) -> Probe:
    """Connect to ``host:port`` with ``config``'s security, speak ApiVersions (and Metadata),
    and say in one sentence what went wrong, if anything."""
    address = f"{host}:{port}"
    protocol = config.security_protocol
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return Probe(address, f"{host} does not resolve from here")
    resolved = ", ".join(sorted({str(info[4][0]) for info in infos}))
    connection = BrokerConnection(
        host,
        port,
        "kplane-doctor",
        int(TIMEOUT_S * 1000),
        ssl_context=client_ssl_context(config) if config.uses_ssl else None,
        sasl=config.sasl_credentials() if config.uses_sasl else None,
    )
    try:
        await connection.connect(TIMEOUT_S)
        if not with_metadata:
            return Probe(address, None)
        metadata = await connection.request(ApiKey.METADATA, _metadata_request)
        return Probe(address, None, metadata)
    except ConnectionRefusedError:
        return Probe(address, f"nothing listens on {address} ({host} is {resolved})")
    except TimeoutError:
        if not config.uses_ssl and await _speaks_tls(host, port):
            return Probe(address, _tls_listener(protocol))
        return Probe(
            address,
            f"no answer from {address} ({host} is {resolved}) within {TIMEOUT_S:.0f} s: "
            "a firewall, or an address of another machine",
        )
    except SslAuthenticationError as exc:
        return Probe(address, f"{exc}")
    except SaslAuthenticationError as exc:
        return Probe(address, f"SASL authentication failed: {exc}")
    except (BrokerConnectionError, ConnectionError, ssl.SSLError) as exc:
        if config.uses_ssl:
            return Probe(
                address,
                f"{address} does not speak TLS but security.protocol is {protocol}: the "
                "listener is PLAINTEXT or SASL_PLAINTEXT in listener.security.protocol.map",
            )
        if await _speaks_tls(host, port):
            return Probe(address, _tls_listener(protocol))
        if connection.versions and not config.uses_sasl:
            return Probe(
                address,
                f"{address} answered ApiVersions, then closed the connection: it expects SASL "
                f"authentication, but security.protocol is {protocol}; set SASL_PLAINTEXT (or "
                "SASL_SSL), sasl.mechanism, sasl.username and sasl.password",
            )
        return Probe(address, f"{address} closed the connection: {exc}")
    finally:
        connection.close(None)


def _tls_listener(protocol: str) -> str:
    return (
        f"this listener speaks TLS but security.protocol is {protocol}: it is mapped to SSL "
        "or SASL_SSL in listener.security.protocol.map; set security.protocol and "
        "ssl.ca.location (or ssl.truststore.location)"
    )


def _metadata_request(version: int) -> Any:
    return api.make(
        api.request_class(ApiKey.METADATA, version),
        topics=(),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


def run(args: argparse.Namespace) -> int:
    """Probe the bootstrap server and every endpoint it advertises; 0 when all work."""
    try:
        config = client_config(args)
    except (UsageError, ValueError) as exc:
        print(f"{TOOL}: {exc}", file=sys.stderr)
        return 1
    return asyncio.run(_diagnose(config))


async def _diagnose(config: ClientConfig) -> int:
    failures = 0
    bootstrap: Probe | None = None
    for host, port in config.bootstrap_servers:
        found = await probe(host, port, config, with_metadata=True)
        if found.ok:
            print(f"bootstrap {found.address}: OK ({config.security_protocol})")
            bootstrap = found
            break
        print(f"bootstrap {found.address}: {found.problem}")
        failures += 1
    if bootstrap is None:
        return 1
    brokers = sorted(bootstrap.metadata.brokers, key=lambda b: int(b.node_id))
    if not brokers:
        print("the cluster lists no broker: the brokers have not registered yet, or the "
              "listener's broker cannot reach its controller")
        return 1
    if int(bootstrap.metadata.controller_id) < 0:
        print("no controller is elected yet: administration requests will fail for now")
    advertised = {f"{b.host}:{b.port}" for b in brokers}
    if bootstrap.address not in advertised:
        print(f"note: {bootstrap.address} is not among the advertised endpoints; clients "
              "switch to these after bootstrapping, so these must work from here")
    await _name_the_listener(config, bootstrap.address, int(brokers[0].node_id))
    for broker in brokers:
        found = await probe(broker.host, int(broker.port), config, with_metadata=False)
        where = f"broker {int(broker.node_id)} advertises {found.address}"
        if found.ok:
            print(f"{where}: OK")
            continue
        failures += 1
        print(f"{where}: {found.problem}; check advertised.listeners of broker "
              f"{int(broker.node_id)} for this listener")
    return 1 if failures else 0


async def _name_the_listener(config: ClientConfig, bootstrap: str, broker_id: int) -> None:
    """Say which listener the bootstrap landed on, and warn when it is the control plane;
    silent when the broker's configs cannot be described (an authorizer may deny it)."""
    client = KafkaClient(config)
    try:
        await asyncio.wait_for(client.start(), TIMEOUT_S)
        resource = ConfigResource(ConfigResourceType.BROKER, str(broker_id))
        described = (await Admin(client).describe_configs([resource]))[resource]
    except Exception:  # best effort: the probes above already said what fails
        return
    finally:
        await client.close()
    if described.error is not None:
        return
    values = {k: described.entries[k].value for k in LISTENER_KEYS if k in described.entries}
    _, port = _split(bootstrap)
    names = [
        item.split("://", 1)[0]
        for key in ("advertised.listeners", "listeners")
        for item in (values.get(key) or "").split(",")
        if item.strip().endswith(f":{port}")
    ]
    if not names:
        return
    name = names[0]
    print(f"the bootstrap server is listener {name} of broker {broker_id}")
    if name == values.get("control.plane.listener.name"):
        others = sorted(
            {item.split("://", 1)[0] for item in (values.get("listeners") or "").split(",")}
            - {name, values.get("inter.broker.listener.name") or ""}
        )
        print(f"warning: {name} is the control-plane listener (control.plane.listener.name): "
              "it is for the controller's requests, and clients on it queue with them; "
              f"use a client listener instead ({', '.join(others) or 'none is configured'})")
