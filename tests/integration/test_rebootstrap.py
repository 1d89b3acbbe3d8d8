"""KIP-899's test plan: bootstrap.servers=broker1,broker2 with only broker1 up; broker1
stops and broker2 starts; the client carries on with rebootstrap and fails clearly with
none."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Producer as ConfluentProducer

from kplane.client.consumer import Consumer
from kplane.client.kafka_client import KafkaClient, NoBrokersAvailable, RebootstrapRequired
from kplane.client.producer import Producer
from kplane.common.network.config import ClientConfig
from kplane.protocol import api
from kplane.protocol.errors import ErrorCode
from kplane.protocol.framing import parse_request_header, response_frame_prefix
from kplane.testing.plugin import RunningBroker, free_port


def _pair(
    broker_factory: Callable[..., RunningBroker],
) -> tuple[RunningBroker, Callable[[], RunningBroker], str]:
    """broker1 running; broker2's port reserved and started on demand."""
    port1, port2 = free_port(), free_port()
    broker1 = broker_factory({"broker.id": "1", "listeners": f"PLAINTEXT://127.0.0.1:{port1}"})

    def start_broker2() -> RunningBroker:
        return broker_factory({"broker.id": "2", "listeners": f"PLAINTEXT://127.0.0.1:{port2}"})

    return broker1, start_broker2, f"127.0.0.1:{port1},127.0.0.1:{port2}"


def _client(bootstrap: str, strategy: str, **extra: str) -> KafkaClient:
    props = {
        "bootstrap.servers": bootstrap,
        "metadata.recovery.strategy": strategy,
        "reconnect.backoff.ms": "50",
        "reconnect.backoff.max.ms": "200",
        "request.timeout.ms": "5000",
    }
    props.update(extra)
    return KafkaClient(ClientConfig.from_properties(props))


async def test_rebootstrap_reaches_the_new_broker(broker_factory) -> None:
    broker1, start_broker2, bootstrap = _pair(broker_factory)
    client = _client(bootstrap, "rebootstrap")
    try:
        await client.start()
        assert sorted(client.cluster.brokers) == [1]
        broker1.stop()
        broker2 = start_broker2()
        cluster = await client.refresh_metadata(["after-the-switch"])
        assert sorted(cluster.brokers) == [2]
        assert cluster.cluster_id == broker2.cluster_id
        assert client.rebootstraps == 1
        assert await client.leader_for("after-the-switch", 0) == 2
    finally:
        await client.close()


async def test_none_fails_naming_the_brokers_tried(broker_factory) -> None:
    broker1, start_broker2, bootstrap = _pair(broker_factory)
    client = _client(bootstrap, "none")
    try:
        await client.start()
        broker1.stop()
        start_broker2()
        with pytest.raises(NoBrokersAvailable) as info:
            await client.refresh_metadata()
        message = str(info.value)
        assert "metadata.recovery.strategy=none" in message
        assert broker1.bootstrap() in message
        assert client.rebootstraps == 0
    finally:
        await client.close()


async def test_known_limitation_low_reconnect_backoff_never_rebootstraps(broker_factory) -> None:
    """With reconnect.backoff.max.ms=0 a broker is never in backoff, so it never counts as
    unavailable: the client keeps trying broker1 until request.timeout.ms (KIP-899)."""
    broker1, start_broker2, bootstrap = _pair(broker_factory)
    client = _client(
        bootstrap,
        "rebootstrap",
        **{
            "reconnect.backoff.ms": "0",
            "reconnect.backoff.max.ms": "0",
            "request.timeout.ms": "1500",
        },
    )
    try:
        await client.start()
        broker1.stop()
        start_broker2()
        with pytest.raises(NoBrokersAvailable, match=r"request\.timeout\.ms"):
            await client.refresh_metadata()
        assert client.rebootstraps == 0
    finally:
        await client.close()


def _deliver(producer: ConfluentProducer, topic: str, value: bytes, timeout: float = 30) -> object:
    results: list[object] = []
    producer.produce(topic, value, on_delivery=lambda err, msg: results.append(err or msg))
    deadline = time.monotonic() + timeout
    while not results and time.monotonic() < deadline:
        producer.poll(0.1)
    assert results, f"no delivery report for {value!r} within {timeout}s"
    return results[0]


def test_librdkafka_rebootstraps_against_kplane(broker_factory) -> None:
    """The same scenario with librdkafka as the client: kplane behaves as Kafka does."""
    broker1, start_broker2, bootstrap = _pair(broker_factory)
    producer = ConfluentProducer(
        {
            "bootstrap.servers": bootstrap,
            "metadata.recovery.strategy": "rebootstrap",
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 200,
            "topic.metadata.refresh.interval.ms": 1000,
            "message.timeout.ms": 30000,
        }
    )
    first = _deliver(producer, "kip-899", b"before")
    assert not isinstance(first, Exception) and first.offset() == 0  # type: ignore[attr-defined]
    broker1.stop()
    broker2 = start_broker2()
    second = _deliver(producer, "kip-899", b"after")
    assert getattr(second, "error", lambda: None)() is None, second
    assert "kip-899" in broker2.topics()
    producer.flush(10)


async def test_idle_connections_are_closed(broker: RunningBroker) -> None:
    client = KafkaClient(
        ClientConfig.from_properties(
            {"bootstrap.servers": broker.bootstrap(), "connections.max.idle.ms": "200"}
        )
    )
    try:
        await client.start()
        first = await client.connection(0)
        await asyncio.sleep(0.5)
        await client.refresh_metadata()
        assert first.closed
        assert not (await client.connection(0)).closed
    finally:
        await client.close()


class _StandInBroker:
    """A wire-level stand-in for a broker that answers ApiVersions, then either answers
    Metadata with REBOOTSTRAP_REQUIRED or never answers it. kplane's broker does neither,
    so these faults cannot be caused for real."""

    def __init__(self, answer_metadata: bool = True) -> None:
        self.server: asyncio.AbstractServer | None = None
        self.metadata_requests = 0
        self.answer_metadata = answer_metadata

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"127.0.0.1:{port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big")
                header = parse_request_header(await reader.readexactly(size))
                key, version = header.api_key, header.api_version
                module = api.response_module(key, version)
                if key == 18:
                    body = api.make(
                        api.response_class(key, version),
                        error_code=ErrorCode.none,
                        api_keys=(
                            api.make(module.ApiVersion, api_key=18, min_version=0, max_version=4),
                            api.make(module.ApiVersion, api_key=3, min_version=13, max_version=13),
                        ),
                    )
                else:
                    self.metadata_requests += 1
                    if not self.answer_metadata:
                        continue
                    body = api.make(
                        api.response_class(key, version),
                        error_code=ErrorCode.rebootstrap_required,
                        brokers=(),
                        topics=(),
                    )
                payload = api.encode(body)
                writer.write(
                    response_frame_prefix(key, version, header.correlation_id, len(payload))
                    + payload
                )
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


async def test_rebootstrap_required_from_a_broker() -> None:
    fake = _StandInBroker()
    bootstrap = await fake.start()
    client = _client(bootstrap, "rebootstrap")
    try:
        with pytest.raises(RebootstrapRequired):
            await client.refresh_metadata()
        assert client.rebootstraps == 1
        assert fake.metadata_requests == 1
    finally:
        await client.close()
        fake.close()


async def test_producer_and_fetcher_carry_on_through_broker2(broker_factory) -> None:
    """The KIP's two test cases with kplane's Producer and Consumer: both keep working
    after broker1 stops and broker2 starts, through a rebootstrap."""
    broker1, start_broker2, bootstrap = _pair(broker_factory)
    client = _client(bootstrap, "rebootstrap", **{"retries": "10", "retry.backoff.ms": "100"})
    await client.start()
    producer = Producer.from_config(client)
    consumer = Consumer(client, fetch_max_wait_ms=100)
    try:
        first = await producer.send_and_wait("kip-899-clients", b"before")
        consumer.assign([("kip-899-clients", 0)])
        await consumer.seek_to_beginning()
        assert [r.value for r in await _poll_values(consumer, 1)] == [b"before"]
        assert first.offset == 0

        broker1.stop()
        broker2 = start_broker2()
        second = await producer.send_and_wait("kip-899-clients", b"after-0")
        assert second.offset == 0  # broker2 is another single-broker cluster: a fresh log
        assert (await producer.send_and_wait("kip-899-clients", b"after-1")).offset == 1
        assert client.rebootstraps >= 1
        got = await _poll_values(consumer, 1)  # the fetcher goes on from its position, 1
        assert [(r.offset, r.value) for r in got] == [(1, b"after-1")]
        assert "kip-899-clients" in broker2.topics()
    finally:
        await producer.close()
        await consumer.close()
        await client.close()


async def test_producer_and_fetcher_fail_clearly_with_none(broker_factory) -> None:
    broker1, start_broker2, bootstrap = _pair(broker_factory)
    client = _client(bootstrap, "none", **{"retries": "10", "retry.backoff.ms": "100"})
    await client.start()
    producer = Producer.from_config(client)
    consumer = Consumer(client, fetch_max_wait_ms=100)
    try:
        await producer.send_and_wait("kip-899-none", b"before")
        consumer.assign([("kip-899-none", 0)])
        await consumer.seek_to_beginning()
        await _poll_values(consumer, 1)
        broker1.stop()
        start_broker2()
        with pytest.raises(NoBrokersAvailable, match=broker1.bootstrap()):
            await producer.send_and_wait("kip-899-none", b"after")
        with pytest.raises(NoBrokersAvailable, match=broker1.bootstrap()):
            for _ in range(50):
                await consumer.poll(timeout_ms=200)
        assert client.rebootstraps == 0
    finally:
        await producer.close()
        await consumer.close()
        await client.close()


async def _poll_values(consumer: Consumer, count: int, timeout: float = 30.0) -> list:
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < count:
        assert time.monotonic() < deadline, f"only {len(got)} of {count} records"
        got.extend(await consumer.poll(timeout_ms=500))
    return got


@pytest.mark.parametrize("strategy", ["rebootstrap", "none"])
async def test_rebootstrap_trigger_when_no_metadata_for_too_long(strategy: str) -> None:
    """metadata.recovery.rebootstrap.trigger.ms: a broker that connects but never answers
    Metadata is never "unavailable", yet with rebootstrap the client bootstraps again once
    no metadata came for that long; with none it does not."""
    fake = _StandInBroker(answer_metadata=False)
    bootstrap = await fake.start()
    client = _client(
        bootstrap,
        strategy,
        **{"request.timeout.ms": "300", "metadata.recovery.rebootstrap.trigger.ms": "0"},
    )
    try:
        with pytest.raises(TimeoutError):
            await client.refresh_metadata()
        assert fake.metadata_requests == 1
        assert client.rebootstraps == (1 if strategy == "rebootstrap" else 0)
    finally:
        await client.close()
        fake.close()
