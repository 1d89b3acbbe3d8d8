"""Large Fetch responses reach real consumers byte for byte, at the offsets the records were
stored at: from the file log, segment ranges sent with sendfile on PLAINTEXT and read with
pread on TLS; on TLS from either log, handed to the transport a piece at a time as it
drains."""

from __future__ import annotations

import contextlib
import hashlib
import ssl
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition

from kplane.common.certs import PkiFiles
from kplane.testing.plugin import RunningBroker
from kplane.testing.wire import WireClient
from tests.integration.helpers import fetch_request, produce_all

TOPIC = "fetched"
PARTITIONS = 3
COUNT = 12_000  # about 20 MB: many responses larger than a socket buffer


def _value(i: int) -> bytes:
    """Record i's value: 200 to 3,400 bytes, different for every record."""
    seed = hashlib.sha256(b"%d" % i).digest()
    return seed * (7 + i % 100)


def _broker(broker_factory, pki: PkiFiles, storage: str = "file", **extra: str) -> RunningBroker:  # type: ignore[no-untyped-def]
    return broker_factory(
        {
            **extra,
            "kplane.log.storage": storage,
            "log.segment.bytes": str(4 << 20),  # reads span several segments
            "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
            "listener.name.ssl.ssl.keystore.type": "PKCS12",
            "listener.name.ssl.ssl.keystore.location": str(pki.broker_p12),
            "listener.name.ssl.ssl.keystore.password": pki.password,
        }
    )


def _fill(broker: RunningBroker, partitions: int = PARTITIONS) -> dict[int, list[int]]:
    broker.create_topic(TOPIC, partitions)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap("PLAINTEXT"), "acks": "all", "linger.ms": 5}
    )
    messages = ({"value": _value(i), "partition": i % partitions} for i in range(COUNT))
    return produce_all(producer, TOPIC, messages, partitions)


def _read_confluent(config: dict[str, object]) -> dict[int, list[tuple[int, bytes]]]:
    consumer = Consumer(
        {
            **config,
            "group.id": "file-fetch",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52_428_800,
            "max.partition.fetch.bytes": 52_428_800,
            "receive.message.max.bytes": 104_857_600,
        }
    )
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    try:
        for _ in range(600):
            if sum(len(v) for v in got.values()) >= COUNT:
                break
            for msg in consumer.consume(num_messages=5000, timeout=0.5):
                assert msg.error() is None, msg.error()
                got[msg.partition()].append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    return got


def _expected() -> dict[int, list[tuple[int, bytes]]]:
    """Each partition's records at the offsets one producer in order stores them at."""
    return {
        p: [(n, _value(i)) for n, i in enumerate(range(p, COUNT, PARTITIONS))]
        for p in range(PARTITIONS)
    }


@pytest.mark.parametrize("storage", ["file", "memory"])
def test_consumers_read_every_record_over_plaintext_and_tls(broker_factory, pki, storage) -> None:  # type: ignore[no-untyped-def]
    broker = _broker(broker_factory, pki, storage)
    delivered = _fill(broker)
    assert {p: sorted(o) for p, o in delivered.items()} == {
        p: [n for n, _ in records] for p, records in _expected().items()
    }
    plaintext = _read_confluent({"bootstrap.servers": broker.bootstrap("PLAINTEXT")})
    assert plaintext == _expected()
    tls = _read_confluent(
        {
            "bootstrap.servers": broker.bootstrap("SSL"),
            "security.protocol": "SSL",
            "ssl.ca.location": str(pki.ca_cert),
        }
    )
    assert tls == _expected()


def test_kafka_python_reads_every_record_over_plaintext(broker_factory, pki) -> None:  # type: ignore[no-untyped-def]
    broker = _broker(broker_factory, pki)
    _fill(broker)
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap("PLAINTEXT"),
        consumer_timeout_ms=10_000,
        fetch_max_bytes=52_428_800,
        max_partition_fetch_bytes=4 << 20,
    )
    consumer.assign([KpTopicPartition(TOPIC, p) for p in range(PARTITIONS)])
    consumer.seek_to_beginning()
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    for msg in consumer:
        got[msg.partition].append((msg.offset, msg.value))
        if sum(len(v) for v in got.values()) == COUNT:
            break
    consumer.close()
    assert got == _expected()


@pytest.mark.parametrize("listener", ["PLAINTEXT", "SSL"])
def test_a_client_that_stops_reading_a_large_response_is_closed_when_idle(  # type: ignore[no-untyped-def]
    broker_factory, pki, listener
) -> None:
    """A response the client stopped reading (sendfile on PLAINTEXT, paced on TLS) makes no
    progress: after ``connections.max.idle.ms`` the connection is closed, as Kafka closes a
    channel idle that long, rather than held forever."""
    broker = _broker(broker_factory, pki, **{"connections.max.idle.ms": "1000"})
    _fill(broker, partitions=1)
    before = set(broker.connections())
    client = WireClient(*broker.address(listener), timeout=10)
    if listener == "SSL":
        context = ssl.create_default_context(cafile=str(pki.ca_cert))
        client.sock = context.wrap_socket(client.sock, server_hostname="127.0.0.1")
    client.send(fetch_request(TOPIC, 0, partition_max_bytes=50 << 20))  # ~20 MB answer
    deadline = time.monotonic() + 15
    stalled: set[str] = set()
    while not stalled and time.monotonic() < deadline:
        stalled = set(broker.connections()) - before  # registered by its Processor
    while time.monotonic() < deadline and stalled & set(broker.connections()):
        time.sleep(0.2)  # not reading
    assert stalled and not stalled & set(broker.connections()), "the stalled connection stayed"
    received = 0
    client.sock.settimeout(10)
    with contextlib.suppress(ConnectionError, ssl.SSLError):
        while chunk := client.sock.recv(1 << 20):
            received += len(chunk)
    assert received < 10 << 20, "the response went out although nobody read it"
    client.close()
