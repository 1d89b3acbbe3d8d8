"""Connection limits as Kafka's ConnectionQuotas sets them (KIP-402, KIP-612, KIP-226):
``max.connections.per.ip`` (and its overrides) closes the extra connection at once,
``max.connections`` (broker-wide and per listener) makes it wait for a slot, the
inter-broker listener is exempt from the broker-wide limit, and
``max.connection.creation.rate`` delays accepting; every one of them changes at runtime."""

from __future__ import annotations

import re
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from structlog.testing import capture_logs

from kplane.protocol import api
from kplane.protocol.framing import encode_request_frame
from kplane.testing.plugin import RunningBroker
from tests.integration.helpers import wait_until
from tests.repo import REPO_ROOT

ANSWERED, WAITING, CLOSED = "answered", "waiting", "closed"
REQUEST = encode_request_frame(
    18,
    3,
    1,
    "t",
    api.encode(ApiVersionsRequest(client_software_name="t", client_software_version="1")),
)


class Client:
    """A raw connection from ``source`` (any 127.0.0.0/8 address is this host's)."""

    def __init__(self, broker: RunningBroker, source: str, listener: str | None = None) -> None:
        self.sock = socket.socket()
        self.sock.bind((source, 0))
        self.sock.settimeout(10)
        self.sock.connect(broker.address(listener))
        self.asked = False

    def ask(self, timeout: float = 5.0) -> str:
        """Send ApiVersions (once) and say what became of it within ``timeout``."""
        if not self.asked:
            try:
                self.sock.sendall(REQUEST)
            except OSError:
                return CLOSED
            self.asked = True
        self.sock.settimeout(timeout)
        try:
            head = self.sock.recv(4)
        except TimeoutError:
            return WAITING
        except OSError:
            return CLOSED
        if len(head) < 4:
            return CLOSED
        (size,) = struct.unpack(">i", head)
        while size:
            size -= len(self.sock.recv(size))
        self.asked = False
        return ANSWERED

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def clients() -> Iterator[list[Client]]:
    opened: list[Client] = []
    yield opened
    for client in opened:
        client.close()


def _open(
    clients: list[Client],
    broker: RunningBroker,
    count: int,
    source: str = "127.0.0.2",
    listener: str | None = None,
) -> list[Client]:
    new = [Client(broker, source, listener) for _ in range(count)]
    clients.extend(new)
    return new


def _from(broker: RunningBroker, source: str) -> int:
    """Open connections whose client is at ``source``."""
    return sum(1 for c in broker.connections() if f"-{source}:" in c)


def _admin(broker: RunningBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap()})


def _set_broker(broker: RunningBroker, configs: dict[str, str | None]) -> None:
    """IncrementalAlterConfigs on broker 0 with confluent-kafka: set, or delete for None."""
    entries = [
        ConfigEntry(
            name,
            value,
            incremental_operation=(
                AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET
            ),
        )
        for name, value in configs.items()
    ]
    resource = ConfigResource(ResourceType.BROKER, "0", incremental_configs=entries)
    admin = _admin(broker)
    (future,) = admin.incremental_alter_configs([resource]).values()
    future.result(timeout=10)


def _kplane_configs(broker: RunningBroker, *args: str) -> None:
    """``kplane configs`` against the broker's cluster-wide default (kafka-configs.sh)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kplane",
            "configs",
            "--bootstrap-server",
            broker.bootstrap(),
            "--alter",
            "--entity-type",
            "brokers",
            "--entity-default",
            *args,
        ],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _metric(broker: RunningBroker, name: str, **labels: str) -> float:
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    pattern = re.compile(rf"^{re.escape(name)}(\{{{re.escape(wanted)}\}})? (\S+)$", re.M)
    found = pattern.search(broker.metrics_text())
    assert found, f"{name}{{{wanted}}} not exposed"
    return float(found.group(2))


def test_max_connections_per_ip_closes_the_extra_connection(broker_factory, clients) -> None:
    broker = broker_factory(
        {"max.connections.per.ip": "2", "max.connections.per.ip.overrides": "127.0.0.1:50"}
    )
    held = _open(clients, broker, 2)
    assert [c.ask() for c in held] == [ANSWERED, ANSWERED]
    with capture_logs() as logs:
        [extra] = _open(clients, broker, 1)
        assert extra.ask() == CLOSED
    refused = [e for e in logs if "too many connections" in e["event"]]
    assert len(refused) == 1 and refused[0]["client_host"] == "127.0.0.2", logs
    assert refused[0]["limit"] == 2
    # 127.0.0.1's override lets it hold more than the default of 2
    assert [c.ask() for c in _open(clients, broker, 6, "127.0.0.1")] == [ANSWERED] * 6
    assert _admin(broker).list_topics(timeout=10).brokers
    before = len(broker.connections())
    held[0].close()
    wait_until(lambda: len(broker.connections()) < before, what="the closed connection gone")
    [again] = _open(clients, broker, 1)  # a freed slot is taken again
    assert again.ask() == ANSWERED


def _fill(
    clients: list[Client],
    broker: RunningBroker,
    source: str = "127.0.0.2",
    listener: str | None = None,
    most: int = 12,
) -> Client:
    """Open connections until one is made to wait; return it (the others are answered)."""
    for _ in range(most):
        [client] = _open(clients, broker, 1, source, listener)
        outcome = client.ask(timeout=1.5)
        if outcome == WAITING:
            return client
        assert outcome == ANSWERED
    raise AssertionError(f"{most} connections and none waited")


def test_max_connections_makes_the_extra_wait_until_one_closes(broker_factory, clients) -> None:
    broker = broker_factory({"max.connections": "6"})
    extra = _fill(clients, broker)  # the kernel completes its handshake, the broker waits
    assert len(broker.connections()) == 6  # the controller's own connection counts too
    clients[0].close()
    assert extra.ask() == ANSWERED
    # confluent-kafka waits the same way, then gets in
    delivered: list[object] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap(), "message.timeout.ms": 30000})
    producer.produce("limits", b"v", on_delivery=lambda err, msg: delivered.append(err))
    producer.flush(2)
    assert delivered == []
    for client in clients[1:3]:
        client.close()
    assert producer.flush(20) == 0 and delivered == [None]


TWO_LISTENERS = {
    "listeners": "PLAINTEXT://127.0.0.1:0,CLIENT://127.0.0.1:0",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CLIENT:PLAINTEXT",
    "inter.broker.listener.name": "PLAINTEXT",
}


def test_a_listener_limit_makes_its_connections_wait(broker_factory, clients) -> None:
    broker = broker_factory({**TWO_LISTENERS, "listener.name.client.max.connections": "3"})
    waiting = _fill(clients, broker, listener="CLIENT")
    assert len(clients) == 4
    assert _open(clients, broker, 1, listener="PLAINTEXT")[0].ask() == ANSWERED
    clients[0].close()
    assert waiting.ask() == ANSWERED
    count = _metric(
        broker, "kafka_server_socket_server_metrics_connection_count", listener="CLIENT"
    )
    assert count == 3


def test_the_inter_broker_listener_is_exempt_from_the_broker_wide_limit(
    broker_factory, clients
) -> None:
    broker = broker_factory({**TWO_LISTENERS, "max.connections": "4"})
    assert len(broker.connections()) == 1  # the controller's, on the inter-broker listener
    blocked = _fill(clients, broker, listener="CLIENT")
    on_client = clients[:3]
    with capture_logs() as logs:
        [inter_broker] = _open(clients, broker, 1, listener="PLAINTEXT")
        assert inter_broker.ask() == ANSWERED
        time.sleep(2.5)  # network threads look at the limit every second
        # over the limit: the least recently used connection of another listener goes
        closed = [c for c in on_client if c.ask() == CLOSED]
    assert closed, "no connection of the CLIENT listener was closed"
    assert any("max.connections" in e["event"] for e in logs), logs
    inter_broker.close()  # now there is room for the one waiting
    assert blocked.ask() == ANSWERED


def test_limits_change_at_runtime(broker_factory, clients) -> None:
    broker = broker_factory(TWO_LISTENERS)
    before = _open(clients, broker, 3)
    assert {c.ask() for c in before} == {ANSWERED}
    _kplane_configs(
        broker,
        "--add-config",
        "max.connections.per.ip=1,max.connections.per.ip.overrides=[127.0.0.1:100]",
    )
    assert broker.current_config("max.connections.per.ip") == 1
    assert {c.ask() for c in before} == {ANSWERED}  # open connections stay
    assert _open(clients, broker, 1)[0].ask() == CLOSED
    for client in before:
        client.close()
    deadline = time.monotonic() + 10
    while _from(broker, "127.0.0.2") and time.monotonic() < deadline:
        time.sleep(0.05)
    first, second = _open(clients, broker, 2)
    assert (first.ask(), second.ask()) == (ANSWERED, CLOSED)
    # a listener's own limit, per broker, with confluent-kafka's IncrementalAlterConfigs
    # over the other listener
    _set_broker(broker, {"listener.name.client.max.connections": "2"})
    waiting = _fill(clients, broker, "127.0.0.1", listener="CLIENT")
    _set_broker(broker, {"listener.name.client.max.connections": None})
    assert waiting.ask() == ANSWERED
    _kplane_configs(
        broker, "--delete-config", "max.connections.per.ip,max.connections.per.ip.overrides"
    )
    assert {c.ask() for c in _open(clients, broker, 3)} == {ANSWERED}


def test_connection_creation_rate_delays_accepting(broker, clients) -> None:
    _set_broker(broker, {"listener.name.plaintext.max.connection.creation.rate": "2"})
    started = time.monotonic()
    # Kafka's rate is measured over 11 one-second samples, at least 10 s: about 20
    # connections go at once, then each waits for the rate to come down
    opened = _open(clients, broker, 26)
    outcomes = [c.ask(timeout=30) for c in opened]
    elapsed = time.monotonic() - started
    assert outcomes == [ANSWERED] * 26  # delayed, never refused
    assert elapsed >= 2.0, elapsed
    throttle = _metric(
        broker,
        "kafka_server_socket_server_metrics_connection_accept_throttle_time",
        listener="PLAINTEXT",
    )
    assert throttle > 0
    _set_broker(broker, {"listener.name.plaintext.max.connection.creation.rate": None})


def test_broker_wide_creation_rate_spares_the_inter_broker_listener(
    broker_factory, clients
) -> None:
    broker = broker_factory(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,CLIENT://127.0.0.1:0",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CLIENT:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "max.connection.creation.rate": "1",
            # a listener's own limit is the broker-wide one unless set: the inter-broker
            # listener has its own, and the broker-wide one does not hold it
            "listener.name.plaintext.max.connection.creation.rate": "1000",
        }
    )
    results: dict[str, float] = {}

    def burst(listener: str) -> None:
        started = time.monotonic()
        opened = _open(clients, broker, 16, listener=listener)
        assert all(c.ask(timeout=30) == ANSWERED for c in opened)
        results[listener] = time.monotonic() - started

    threads = [threading.Thread(target=burst, args=(name,)) for name in ("CLIENT", "PLAINTEXT")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert results["CLIENT"] >= 2.0 and results["PLAINTEXT"] < results["CLIENT"], results
    assert _metric(broker, "kafka_server_socket_server_metrics_broker_connection_accept_rate") > 0
