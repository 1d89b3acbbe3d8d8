"""kplane's asyncio Producer against a real in-process broker.

What it sends is read back with confluent-kafka (librdkafka) byte for byte, offsets and
timestamps included; idempotent batches are checked on the wire (producer id, epoch,
sequences); keyed records must land where Java's default partitioner puts them (compared with
kafka-python's murmur2, which implements Java's, and with vectors from Kafka's own tests).
Faults are injected by wrapping the client's ``request``: a response lost after the broker
appended, a request lost before it was sent while later ones are in flight.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME
from confluent_kafka.admin import AdminClient, NewPartitions
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from kplane.client.kafka_client import KafkaClient, NoBrokersAvailable
from kplane.client.producer import (
    Producer,
    RecordMetadata,
    default_partition,
    murmur2,
)
from kplane.common.network.config import ClientConfig
from kplane.common.network.connection import BrokerConnectionError
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode, KafkaError
from kplane.protocol.records import read_partial_batches
from kplane.testing.plugin import RunningBroker
from tests.integration.helpers import fetch_partition, fetch_request, read_from_beginning

RECORDS = 20_000

Headers = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class Rec:
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp: int | None


def make_records(seed: int, count: int = RECORDS) -> list[Rec]:
    """Null, empty and random keys; null, empty and sized values; headers (some with null
    values, one with a non-ASCII name) and explicit timestamps on some records."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        roll = i % 10
        if roll == 0:
            key = None
        elif roll == 1:
            key = b""
        else:
            key = f"key-{rng.randrange(3000)}".encode() + rng.randbytes(rng.randrange(8))
        if i % 499 == 5 and key is not None:
            value = None
        elif i % 50 == 7:
            value = b""
        else:
            value = rng.randbytes(rng.choice((1, 10, 100, 300, 1000, 3000)))
        headers: Headers = ()
        if i % 6 == 0:
            headers = (("trace", rng.randbytes(8)), ("nothing", None), ("ünïcode", b""))
        timestamp = 1_700_000_000_000 + i if i % 9 == 0 else None
        out.append(Rec(key, value, headers, timestamp))
    return out


def _client(bootstrap: str, **props: str) -> KafkaClient:
    return KafkaClient(ClientConfig.from_properties({"bootstrap.servers": bootstrap, **props}))


@asynccontextmanager
async def producing(
    broker: RunningBroker, client_props: dict[str, str] | None = None, **options: Any
) -> AsyncIterator[tuple[KafkaClient, Producer]]:
    client = _client(broker.bootstrap(), **(client_props or {}))
    await client.start()
    producer = Producer(client, **options)
    try:
        yield client, producer
    finally:
        await asyncio.wait_for(producer.close(), 60)
        await client.close()


Hook = Callable[[Callable[..., Awaitable[Any]], Any, int, Callable[[int], Any]], Awaitable[Any]]


def intercept(client: KafkaClient, hook: Hook) -> None:
    """Route the client's requests through ``hook(original, node_id, api_key, build)``."""
    original = client.request

    async def request(node_id: Any, api_key: int, build: Callable[[int], Any]) -> Any:
        return await hook(original, node_id, api_key, build)

    client.request = request  # type: ignore[method-assign]


async def send_all(producer: Producer, topic: str, records: list[Rec]) -> list[RecordMetadata]:
    futures = [
        await producer.send(topic, r.value, r.key, r.headers, timestamp_ms=r.timestamp)
        for r in records
    ]
    await asyncio.wait_for(producer.flush(), 60)
    return [f.result() for f in futures]


def read_back(broker: RunningBroker, topic: str, counts: dict[int, int]) -> dict[int, list[Any]]:
    got = read_from_beginning(
        broker.bootstrap(), f"g-{uuid.uuid4().hex[:6]}", topic, counts, batch=5000, timeout=60
    )
    for p, count in counts.items():
        assert len(got[p]) == count, (p, len(got[p]), count)
    return got


def fetch_batches(broker: RunningBroker, topic: str, partition: int) -> list[Any]:
    """Every stored batch header of a partition, over the wire."""
    headers: list[Any] = []
    offset = 0
    with broker.wire() as wire:
        while True:
            part = fetch_partition(wire, fetch_request(topic, offset, partition=partition))
            assert part.error_code == ErrorCode.none, part
            found = read_partial_batches(part.records or b"")
            headers += found
            if found:
                offset = found[-1].next_offset
            if offset >= part.high_watermark or not found:
                return headers


# round trips ---------------------------------------------------------------------------------
@pytest.mark.parametrize("acks", [-1, 1, 0])
async def test_records_read_back_byte_exact(broker: RunningBroker, acks: int) -> None:
    topic = f"produce-acks{acks}"
    partitions = 3
    broker.create_topic(topic, partitions)
    records = make_records(seed=acks + 10)
    async with producing(broker, acks=acks, batch_size=64 * 1024) as (client, producer):
        metadata = await send_all(producer, topic, records)
        if acks == 0:
            # acks=0 futures resolve once the requests are written; an acks=1 request on the
            # same connection is answered only after the broker handled every one before it
            # (and kplane's broker drops requests still unread when a client disconnects)
            broker.create_topic(f"{topic}-marker", 1)
            async with Producer(client, acks=1) as marker:
                await marker.send_and_wait(f"{topic}-marker", b"after")

    sent: dict[int, list[tuple[Rec, RecordMetadata]]] = {p: [] for p in range(partitions)}
    for rec, md in zip(records, metadata, strict=True):
        assert md.topic == topic
        if rec.key is not None:
            assert md.partition == default_partition(rec.key, partitions)
        if rec.timestamp is not None:
            assert md.timestamp == rec.timestamp
        sent[md.partition].append((rec, md))
    assert all(sent.values()), "every partition should get records (sticky and keyed)"
    if acks == 0:
        assert {md.offset for md in metadata} == {-1}
    else:
        for p, items in sent.items():
            assert [md.offset for _, md in items] == list(range(len(items))), p

    got = read_back(broker, topic, {p: len(items) for p, items in sent.items()})
    for p, items in sent.items():
        for i, ((rec, md), msg) in enumerate(zip(items, got[p], strict=True)):
            assert msg.offset() == i
            assert msg.key() == rec.key, (p, i)
            assert msg.value() == rec.value, (p, i)
            assert tuple(msg.headers() or ()) == rec.headers, (p, i)
            assert msg.timestamp() == (TIMESTAMP_CREATE_TIME, md.timestamp)


async def test_send_and_wait_and_explicit_partition(broker: RunningBroker) -> None:
    broker.create_topic("explicit", 4)
    async with producing(broker, linger_ms=0) as (_, producer):
        first = await producer.send_and_wait("explicit", b"v0", b"k", partition=3)
        second = await producer.send_and_wait("explicit", b"v1", partition=3, timestamp_ms=42)
        assert (first.partition, first.offset) == (3, 0)
        assert (second.partition, second.offset, second.timestamp) == (3, 1, 42)
        missing = await producer.send("explicit", b"nowhere", partition=9)
        with pytest.raises(KafkaError) as info:
            await asyncio.wait_for(missing, 30)
        assert info.value.code == ErrorCode.unknown_topic_or_partition


# partitioning --------------------------------------------------------------------------------
# Kafka's UtilsTest.testMurmur2
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def test_murmur2_is_javas() -> None:
    for data, expected in JAVA_MURMUR2.items():
        assert murmur2(data) == expected, data
    rng = random.Random(7)
    for _ in range(5000):
        key = rng.randbytes(rng.randrange(0, 70))
        theirs = kafka_python_murmur2(key)
        assert murmur2(key) & 0xFFFFFFFF == theirs & 0xFFFFFFFF, key
        for partitions in (1, 3, 7, 100):
            assert default_partition(key, partitions) == (theirs & 0x7FFFFFFF) % partitions


async def test_keyed_records_land_where_java_puts_them(broker: RunningBroker) -> None:
    broker.create_topic("keyed", 7)
    keys = [f"user-{i}".encode() for i in range(300)] + list(JAVA_MURMUR2)
    async with producing(broker) as (_, producer):
        futures = [await producer.send("keyed", b"v", key) for key in keys]
        await producer.flush()
    for key, future in zip(keys, futures, strict=True):
        assert future.result().partition == (kafka_python_murmur2(key) & 0x7FFFFFFF) % 7


async def test_null_keys_stick_to_a_partition_per_batch(broker: RunningBroker) -> None:
    broker.create_topic("sticky", 4)
    async with producing(broker, batch_size=4096, linger_ms=1000) as (_, producer):
        futures = [await producer.send("sticky", b"x" * 100) for _ in range(400)]
        await producer.flush()
    partitions = [f.result().partition for f in futures]
    runs = [partitions[0]]
    for p in partitions[1:]:
        if p != runs[-1]:
            runs.append(p)
    # a batch of 4096 bytes holds a few dozen of these records: long runs, several switches
    assert 5 <= len(runs) <= 40, runs
    assert len(set(partitions)) > 1


async def test_new_partitions_are_used_after_a_metadata_refresh(broker: RunningBroker) -> None:
    topic = "growing"
    broker.create_topic(topic, 2)
    async with producing(broker, {"metadata.max.age.ms": "300"}, linger_ms=1) as (_, producer):
        before = [await producer.send_and_wait(topic, b"v", f"k{i}".encode()) for i in range(50)]
        assert {md.partition for md in before} == {0, 1}
        admin = AdminClient({"bootstrap.servers": broker.bootstrap()})
        admin.create_partitions([NewPartitions(topic, 4)])[topic].result(timeout=30)
        broker.wait_for_partitions(topic, 4)
        deadline = time.monotonic() + 20
        seen: set[int] = set()
        i = 0
        while seen != {0, 1, 2, 3}:
            assert time.monotonic() < deadline, f"still only partitions {seen}"
            key = f"k{i}".encode()
            md = await producer.send_and_wait(topic, b"v", key)
            i += 1
            if md.partition >= 2:
                assert md.partition == default_partition(key, 4)
            seen.add(md.partition)
        # from now on every key follows the four partitions
        after = [await producer.send(topic, b"v", f"z{j}".encode()) for j in range(200)]
        await producer.flush()
        for j, future in enumerate(after):
            assert future.result().partition == default_partition(f"z{j}".encode(), 4)
        nulls = [await producer.send(topic, b"n") for _ in range(2000)]
        await producer.flush()
        assert all(f.result().partition in range(4) for f in nulls)


# idempotence ---------------------------------------------------------------------------------
async def test_idempotent_batches_carry_producer_id_and_sequences(broker: RunningBroker) -> None:
    topic = "idempotent"
    broker.create_topic(topic, 2)
    records = make_records(seed=3, count=5000)
    async with producing(broker, enable_idempotence=True, batch_size=16 * 1024) as (_, producer):
        metadata = await send_all(producer, topic, records)
    counts = {p: sum(1 for md in metadata if md.partition == p) for p in (0, 1)}
    producer_ids = set()
    for p in (0, 1):
        batches = fetch_batches(broker, topic, p)
        assert len(batches) > 3
        expected_sequence = 0
        for batch in batches:
            producer_ids.add(batch.producer_id)
            assert batch.producer_epoch == 0
            assert batch.base_sequence == expected_sequence
            expected_sequence += batch.record_count
        assert expected_sequence == counts[p]
    (producer_id,) = producer_ids
    assert producer_id >= 0
    got = read_back(broker, topic, counts)
    for p in (0, 1):
        assert [m.offset() for m in got[p]] == list(range(counts[p]))


async def test_idempotent_retry_after_a_lost_response_is_not_duplicated(
    broker: RunningBroker,
) -> None:
    topic = "lost-response"
    broker.create_topic(topic, 1)
    produce_calls = 0

    async def lose_third_response(original: Any, node: Any, api_key: int, build: Any) -> Any:
        nonlocal produce_calls
        response = await original(node, api_key, build)
        if api_key == ApiKey.PRODUCE:
            produce_calls += 1
            if produce_calls == 3:
                raise BrokerConnectionError("injected: response lost after the append")
        return response

    records = make_records(seed=4, count=3000)
    options = {"enable_idempotence": True, "batch_size": 8 * 1024, "retry_backoff_ms": 10}
    async with producing(broker, **options) as (client, producer):
        intercept(client, lose_third_response)
        metadata = await send_all(producer, topic, records)
    assert produce_calls > 4
    assert [md.offset for md in metadata] == list(range(len(records)))
    got = read_back(broker, topic, {0: len(records)})
    assert [m.value() for m in got[0]] == [r.value for r in records]


async def test_idempotent_retry_keeps_order_behind_requests_in_flight(
    broker: RunningBroker,
) -> None:
    """Produce #3 is lost before it reaches the broker while #4.. are in flight: those get
    OUT_OF_ORDER_SEQUENCE_NUMBER and go again after #3, in sequence order."""
    topic = "lost-request"
    broker.create_topic(topic, 1)
    produce_calls = 0
    out_of_order = 0

    async def lose_third_request(original: Any, node: Any, api_key: int, build: Any) -> Any:
        nonlocal produce_calls, out_of_order
        if api_key != ApiKey.PRODUCE:
            return await original(node, api_key, build)
        produce_calls += 1
        if produce_calls == 3:
            await asyncio.sleep(0.2)  # later requests go out meanwhile
            raise BrokerConnectionError("injected: request lost before it was sent")
        response = await original(node, api_key, build)
        for topic_response in response.responses:
            for part in topic_response.partition_responses:
                out_of_order += part.error_code == ErrorCode.out_of_order_sequence_number
        return response

    records = make_records(seed=5, count=4000)
    options = {
        "enable_idempotence": True,
        "batch_size": 4 * 1024,
        "linger_ms": 0,
        "retry_backoff_ms": 10,
    }
    async with producing(broker, **options) as (client, producer):
        intercept(client, lose_third_request)
        metadata = await send_all(producer, topic, records)
    assert out_of_order > 0, "no request was in flight behind the lost one"
    assert [md.offset for md in metadata] == list(range(len(records)))
    got = read_back(broker, topic, {0: len(records)})
    assert [m.value() for m in got[0]] == [r.value for r in records]
    assert [m.key() for m in got[0]] == [r.key for r in records]


async def test_idempotent_producer_takes_a_new_id_after_a_batch_fails_for_good(
    broker: RunningBroker,
) -> None:
    """A sequenced batch that fails leaves a gap in the partition's sequences; the producer
    continues under a new producer id instead of sending OUT_OF_ORDER batches forever."""
    topic = "gap"
    broker.create_topic(topic, 1)
    failing = False
    init_calls = 0

    async def hook(original: Any, node: Any, api_key: int, build: Any) -> Any:
        nonlocal init_calls
        init_calls += api_key == 22
        if api_key == ApiKey.PRODUCE and failing:
            raise BrokerConnectionError("injected: broker unreachable")
        return await original(node, api_key, build)

    options = {"enable_idempotence": True, "retries": 2, "retry_backoff_ms": 10}
    async with producing(broker, **options) as (client, producer):
        intercept(client, hook)
        assert (await producer.send_and_wait(topic, b"first")).offset == 0
        failing = True
        with pytest.raises(KafkaError) as info:
            await asyncio.wait_for(producer.send_and_wait(topic, b"lost"), 30)
        assert info.value.code == ErrorCode.network_exception
        failing = False
        assert (await producer.send_and_wait(topic, b"second")).offset == 1
        assert (await producer.send_and_wait(topic, b"third")).offset == 2
    assert init_calls == 2
    first, second, third = fetch_batches(broker, topic, 0)
    assert first.producer_id != second.producer_id == third.producer_id
    assert (first.base_sequence, second.base_sequence, third.base_sequence) == (0, 0, 1)


# errors --------------------------------------------------------------------------------------
async def test_unknown_topic_fails_in_bounded_time(broker_factory: Any) -> None:
    broker = broker_factory({"auto.create.topics.enable": "false"})
    async with producing(broker, retries=3, retry_backoff_ms=50) as (_, producer):
        started = time.monotonic()
        future = await producer.send("no-such-topic", b"v")
        with pytest.raises(KafkaError) as info:
            await asyncio.wait_for(future, 20)
        assert info.value.code == ErrorCode.unknown_topic_or_partition
        assert time.monotonic() - started < 10


async def test_non_retriable_error_fails_at_once(broker_factory: Any) -> None:
    broker = broker_factory({"message.max.bytes": "2000"})
    broker.create_topic("small", 1)
    produce_calls = 0

    async def count(original: Any, node: Any, api_key: int, build: Any) -> Any:
        nonlocal produce_calls
        produce_calls += api_key == ApiKey.PRODUCE
        return await original(node, api_key, build)

    async with producing(broker, linger_ms=0) as (client, producer):
        intercept(client, count)
        with pytest.raises(KafkaError) as info:
            await asyncio.wait_for(producer.send_and_wait("small", b"x" * 4000), 30)
        assert info.value.code == ErrorCode.message_too_large
        assert produce_calls == 1
        ok = await producer.send_and_wait("small", b"fits")
        assert ok.offset == 0


async def test_retriable_error_retries_then_fails(broker_factory: Any) -> None:
    broker = broker_factory({"min.insync.replicas": "2"})
    broker.create_topic("under-replicated", 1)
    produce_calls = 0

    async def count(original: Any, node: Any, api_key: int, build: Any) -> Any:
        nonlocal produce_calls
        produce_calls += api_key == ApiKey.PRODUCE
        return await original(node, api_key, build)

    async with producing(broker, acks=-1, retries=2, retry_backoff_ms=10) as (client, producer):
        intercept(client, count)
        with pytest.raises(KafkaError) as info:
            await asyncio.wait_for(producer.send_and_wait("under-replicated", b"v"), 30)
        assert info.value.code == ErrorCode.not_enough_replicas
        assert produce_calls == 3
        # acks=1 does not need the ISR: the same producer settings work there
    async with producing(broker, acks=1) as (_, producer):
        assert (await producer.send_and_wait("under-replicated", b"v")).offset == 0


async def test_no_brokers_available_fails_the_pending_futures(broker: RunningBroker) -> None:
    broker.create_topic("doomed", 1)
    client_props = {
        "metadata.recovery.strategy": "none",
        "reconnect.backoff.ms": "50",
        "reconnect.backoff.max.ms": "200",
        "request.timeout.ms": "5000",
    }
    calls = 0

    async def count(original: Any, node: Any, api_key: int, build: Any) -> Any:
        nonlocal calls
        calls += 1
        return await original(node, api_key, build)

    async with producing(broker, client_props, retry_backoff_ms=20) as (client, producer):
        intercept(client, count)
        assert (await producer.send_and_wait("doomed", b"before")).offset == 0
        broker.stop()
        started = time.monotonic()
        futures = [await producer.send("doomed", f"after-{i}".encode()) for i in range(50)]
        done, pending = await asyncio.wait(futures, timeout=20)
        assert not pending
        errors = {type(f.exception()) for f in done}
        assert errors == {NoBrokersAvailable}, [f.exception() for f in done][:3]
        assert "metadata.recovery.strategy=none" in str(futures[0].exception())
        assert time.monotonic() - started < 15
        # nothing spins afterwards, and a new send fails the same way
        quiet = calls
        await asyncio.sleep(0.5)
        assert calls == quiet
        later = await producer.send("doomed", b"later")
        with pytest.raises(NoBrokersAvailable):
            await asyncio.wait_for(later, 20)
        await asyncio.sleep(0.5)
        assert calls - quiet <= 3


# configuration -------------------------------------------------------------------------------
async def test_from_config_reads_the_kafka_keys(broker: RunningBroker) -> None:
    client = _client(
        broker.bootstrap(),
        **{
            "acks": "all",
            "linger.ms": "0",
            "batch.size": "32768",
            "enable.idempotence": "true",
            "retries": "7",
            "retry.backoff.ms": "20",
            "max.in.flight.requests.per.connection": "3",
        },
    )
    await client.start()
    producer = Producer.from_config(client)
    try:
        assert producer._acks == -1
        assert producer._linger == 0
        assert producer._batch_size == 32768
        assert producer._idempotent
        assert producer._retries == 7
        assert producer._max_in_flight == 3
        broker.create_topic("configured", 1)
        assert (await producer.send_and_wait("configured", b"v")).offset == 0
    finally:
        await producer.close()
        await client.close()
    for acks, expected in (("0", 0), ("1", 1), ("-1", -1)):
        client.config.extra = {"acks": acks}
        assert Producer.from_config(client)._acks == expected
    client.config.extra = {"acks": "2"}
    with pytest.raises(ValueError, match="acks"):
        Producer.from_config(client)
    client.config.extra = {"acks": "1", "enable.idempotence": "true"}
    with pytest.raises(ValueError, match="acks=all"):
        Producer.from_config(client)


async def test_send_after_close_is_refused(broker: RunningBroker) -> None:
    broker.create_topic("closed", 1)
    async with producing(broker) as (_, producer):
        future = await producer.send("closed", b"v")
        await producer.close()
        assert future.result().offset == 0
        with pytest.raises(RuntimeError):
            await producer.send("closed", b"late")


async def test_close_while_a_send_waits_for_metadata(broker_factory: Any) -> None:
    broker = broker_factory({"auto.create.topics.enable": "false"})
    async with producing(broker, retries=50, retry_backoff_ms=100) as (_, producer):
        sending = asyncio.ensure_future(producer.send("never-created", b"v"))
        await asyncio.sleep(0.3)
        await asyncio.wait_for(producer.close(), 10)
        future = await asyncio.wait_for(sending, 10)
        with pytest.raises(RuntimeError, match="closed"):
            future.result()
