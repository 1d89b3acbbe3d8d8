"""kplane's own Consumer (assign, seek, poll; no groups) against an in-process broker.

Records are produced with confluent-kafka (librdkafka), so what the Consumer decodes was
encoded by an independent implementation; everything is compared byte for byte.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Producer

from kplane.client.consumer import (
    Consumer,
    ConsumerRecord,
    IllegalStateError,
    NoOffsetForPartition,
    OffsetOutOfRange,
)
from kplane.client.kafka_client import KafkaClient, NoBrokersAvailable
from kplane.common.network.config import ClientConfig
from kplane.testing.plugin import RunningBroker
from tests.integration.helpers import produce_all

RECORDS = 30_000
PARTITIONS = 3
DEADLINE_S = 60.0
BASE_TS = 1_700_000_000_000

Headers = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class Sent:
    partition: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp: int


def make_records(count: int, seed: int = 7) -> list[Sent]:
    """Null, empty and sized keys and values; headers (some with null values) on some."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        key = None if i % 10 == 0 else (b"" if i % 10 == 1 else rng.randbytes(rng.randint(1, 40)))
        if i % 501 == 5:
            value = None
        elif i % 97 == 3:
            value = b""
        elif i % 1000 == 17:
            value = rng.randbytes(rng.randint(20_000, 60_000))
        else:
            value = rng.randbytes(rng.choice((1, 16, 100, 300, 1024, 2000)))
        headers: Headers = ()
        if i % 5 == 0:
            headers = tuple(
                (f"h{j}", None if j == 2 else rng.randbytes(rng.choice((0, 3, 30))))
                for j in range(rng.randint(1, 3))
            )
        out.append(Sent(rng.randrange(PARTITIONS), key, value, headers, BASE_TS + i))
    return out


def produce(broker: RunningBroker, topic: str, records: list[Sent], partitions: int) -> None:
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap(),
            "acks": "all",
            "linger.ms": 5,
            "batch.size": 256 * 1024,
            "compression.type": "none",
        }
    )
    delivered = produce_all(
        producer,
        topic,
        (
            {
                "key": r.key,
                "value": r.value,
                "partition": r.partition,
                "headers": list(r.headers) or None,
                "timestamp": r.timestamp,
            }
            for r in records
        ),
        partitions,
    )
    assert sum(map(len, delivered.values())) == len(records)


def simple(prefix: str, count: int, partition: int = 0, start: int = 0) -> list[Sent]:
    return [
        Sent(partition, f"{prefix}{i}".encode(), f"{prefix}-value-{i}".encode(), (), BASE_TS + i)
        for i in range(start, start + count)
    ]


def client_for(broker: RunningBroker, **extra: str) -> KafkaClient:
    props = {"bootstrap.servers": broker.bootstrap(), "request.timeout.ms": "10000"}
    props.update(extra)
    return KafkaClient(ClientConfig.from_properties(props))


async def poll_until(
    consumer: Consumer,
    done: Callable[[list[ConsumerRecord]], bool],
    timeout: float = DEADLINE_S,
    **kwargs: Any,
) -> list[ConsumerRecord]:
    got: list[ConsumerRecord] = []
    deadline = time.monotonic() + timeout
    while not done(got):
        assert time.monotonic() < deadline, f"only {len(got)} records before the deadline"
        got.extend(await consumer.poll(timeout_ms=500, **kwargs))
    return got


def as_sent(record: ConsumerRecord) -> Sent:
    return Sent(record.partition, record.key, record.value, record.headers, record.timestamp)


# everything, byte for byte -------------------------------------------------------------------
async def test_reads_30000_records_byte_exact_then_seeks_into_the_middle(
    broker: RunningBroker,
) -> None:
    topic = "consumer-all"
    broker.create_topic(topic, PARTITIONS)
    sent = make_records(RECORDS)
    assert any(r.key is None for r in sent) and any(r.value is None for r in sent)
    assert any(v is None for r in sent for _, v in r.headers)
    produce(broker, topic, sent, PARTITIONS)
    want = {p: [r for r in sent if r.partition == p] for p in range(PARTITIONS)}

    client = client_for(broker)
    await client.start()
    consumer = Consumer(client)
    try:
        partitions = [(topic, p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        assert consumer.assignment() == set(partitions)
        assert consumer.position(topic, 0) is None
        await consumer.seek_to_beginning()
        assert all(consumer.position(topic, p) == 0 for p in range(PARTITIONS))

        got = await poll_until(consumer, lambda g: len(g) >= RECORDS, max_records=7_000)
        assert len(got) == RECORDS
        for p in range(PARTITIONS):
            mine = [r for r in got if r.partition == p]
            assert [r.topic for r in mine] == [topic] * len(mine)
            assert [r.offset for r in mine] == list(range(len(want[p]))), f"offsets of {p}"
            for index, (expected, record) in enumerate(zip(want[p], mine, strict=True)):
                assert as_sent(record) == expected, f"partition {p} offset {index}"
            assert consumer.position(topic, p) == len(want[p])
        # Nothing more to read.
        assert await consumer.poll(timeout_ms=200) == []

        # Into the middle of a batch of partition 1, and of partition 2 from its start.
        middle = len(want[1]) // 2 + 1
        consumer.seek(topic, 1, middle)
        consumer.seek(topic, 2, 0)
        assert consumer.position(topic, 1) == middle
        expected_count = len(want[1]) - middle + len(want[2])
        again = await poll_until(consumer, lambda g: len(g) >= expected_count)
        assert len(again) == expected_count
        ones = [r for r in again if r.partition == 1]
        assert [r.offset for r in ones] == list(range(middle, len(want[1])))
        assert [as_sent(r) for r in ones] == want[1][middle:]
        assert [as_sent(r) for r in again if r.partition == 2] == want[2]
        assert not [r for r in again if r.partition == 0]
    finally:
        await consumer.close()
        await client.close()


# seek_to_end, long poll --------------------------------------------------------------------
async def test_seek_to_end_reads_only_new_records(broker: RunningBroker) -> None:
    topic = "consumer-end"
    broker.create_topic(topic, 1)
    produce(broker, topic, simple("old", 100), 1)
    client = client_for(broker)
    await client.start()
    consumer = Consumer(client)
    try:
        consumer.assign([(topic, 0)])
        await consumer.seek_to_end()
        assert consumer.position(topic, 0) == 100
        assert await consumer.poll(timeout_ms=200) == []
        new = simple("new", 10, start=100)
        produce(broker, topic, new, 1)
        got = await poll_until(consumer, lambda g: len(g) >= 10)
        assert [r.offset for r in got] == list(range(100, 110))
        assert [as_sent(r) for r in got] == new
        assert consumer.position(topic, 0) == 110
    finally:
        await consumer.close()
        await client.close()


async def test_long_poll_returns_records_produced_after_it_started(broker: RunningBroker) -> None:
    topic = "consumer-long-poll"
    broker.create_topic(topic, 2)
    client = client_for(broker)
    await client.start()
    consumer = Consumer(client, fetch_max_wait_ms=9_000)
    try:
        consumer.assign([(topic, 0), (topic, 1)])
        await consumer.seek_to_end()
        poll = asyncio.create_task(consumer.poll(timeout_ms=30_000))
        await asyncio.sleep(0.3)  # let the Fetch reach the broker's purgatory
        assert not poll.done(), "poll returned before anything was produced"
        late = simple("late", 3, partition=1)
        await asyncio.to_thread(produce, broker, topic, late, 2)
        got = await asyncio.wait_for(poll, 30)
        assert [as_sent(r) for r in got] == late
        assert [(r.partition, r.offset) for r in got] == [(1, 0), (1, 1), (1, 2)]
    finally:
        await consumer.close()
        await client.close()


async def test_fetch_wait_longer_than_request_timeout(broker: RunningBroker) -> None:
    """A Fetch's timeout is request.timeout.ms plus its max wait, as in Kafka's consumer:
    a long poll on an idle partition must not time out and drop the connection."""
    topic = "consumer-long-wait"
    broker.create_topic(topic, 1)
    client = client_for(broker, **{"request.timeout.ms": "500"})
    await client.start()
    consumer = Consumer(client, fetch_max_wait_ms=1_500)
    try:
        consumer.assign([(topic, 0)])
        await consumer.seek_to_end()
        assert await consumer.poll(timeout_ms=2_500) == []
        connection = await client.connection(0)
        assert not connection.closed
        late = simple("wait", 2)
        await asyncio.to_thread(produce, broker, topic, late, 1)
        got = await poll_until(consumer, lambda g: len(g) >= 2)
        assert [as_sent(r) for r in got] == late
        assert connection is await client.connection(0)
    finally:
        await consumer.close()
        await client.close()


async def test_seeks_while_a_fetch_is_in_flight(broker: RunningBroker) -> None:
    """What a round already sent for an old position is dropped, and seeking does not wait
    on (or break) the connection that round is still opening."""
    topic = "consumer-in-flight"
    broker.create_topic(topic, 1)
    sent = simple("r", 10)
    produce(broker, topic, sent, 1)
    client = client_for(broker)
    await client.start()
    consumer = Consumer(client)
    try:
        consumer.assign([(topic, 0)])
        assert await consumer.poll(timeout_ms=0) == []  # a round starts, nothing waits for it
        await asyncio.wait_for(consumer.seek_to_end(), 10)
        assert consumer.position(topic, 0) == 10
        consumer.seek(topic, 0, 4)
        got = await poll_until(consumer, lambda g: len(g) >= 6)
        assert [r.offset for r in got] == list(range(4, 10))
        assert [as_sent(r) for r in got] == sent[4:]
        consumer.seek(topic, 0, 8)
        got = await poll_until(consumer, lambda g: len(g) >= 2, max_records=1)
        assert [r.offset for r in got] == [8, 9]
    finally:
        await consumer.close()
        await client.close()


# out of range, auto.offset.reset ------------------------------------------------------------
@pytest.mark.parametrize("reset", ["earliest", "latest"])
async def test_position_past_the_end_resets(broker: RunningBroker, reset: str) -> None:
    topic = f"consumer-reset-{reset}"
    broker.create_topic(topic, 1)
    first = simple("a", 5)
    produce(broker, topic, first, 1)
    client = client_for(broker, **{"auto.offset.reset": reset, "fetch.max.wait.ms": "100"})
    await client.start()
    consumer = Consumer.from_config(client)
    assert consumer.auto_offset_reset == reset
    assert consumer.fetch_max_wait_ms == 100
    try:
        consumer.assign([(topic, 0)])
        consumer.seek(topic, 0, 1_000)
        if reset == "earliest":
            got = await poll_until(consumer, lambda g: len(g) >= 5)
            assert [as_sent(r) for r in got] == first
        else:
            assert await consumer.poll(timeout_ms=500) == []
            assert consumer.position(topic, 0) == 5
            more = simple("b", 2, start=5)
            produce(broker, topic, more, 1)
            got = await poll_until(consumer, lambda g: len(g) >= 2)
            assert [as_sent(r) for r in got] == more
        assert consumer.position(topic, 0) == 5 + (0 if reset == "earliest" else 2)
    finally:
        await consumer.close()
        await client.close()


async def test_reset_none_raises(broker: RunningBroker) -> None:
    topic = "consumer-reset-none"
    broker.create_topic(topic, 1)
    produce(broker, topic, simple("a", 3), 1)
    client = client_for(broker)
    await client.start()
    consumer = Consumer(client, auto_offset_reset="none")
    try:
        consumer.assign([(topic, 0)])
        with pytest.raises(NoOffsetForPartition, match="consumer-reset-none-0"):
            await consumer.poll(timeout_ms=200)
        consumer.seek(topic, 0, 50)
        with pytest.raises(OffsetOutOfRange) as info:
            await consumer.poll(timeout_ms=2_000)
        assert info.value.positions == {(topic, 0): 50}
        consumer.seek(topic, 0, 1)
        got = await poll_until(consumer, lambda g: len(g) >= 2)
        assert [r.offset for r in got] == [1, 2]
    finally:
        await consumer.close()
        await client.close()


# a topic that appears later; errors of the metadata layer ----------------------------------
async def test_assigned_topic_created_later(broker: RunningBroker) -> None:
    topic = "consumer-later"
    client = client_for(broker)
    await client.start()
    consumer = Consumer(client, fetch_max_wait_ms=100)
    try:
        consumer.assign([(topic, 0)])
        assert await consumer.poll(timeout_ms=300) == []  # UNKNOWN_TOPIC_OR_PARTITION: retried
        assert consumer.position(topic, 0) is None
        broker.create_topic(topic, 1)
        produce(broker, topic, simple("x", 4), 1)
        got = await poll_until(consumer, lambda g: len(g) >= 4)
        assert [r.offset for r in got] == [0, 1, 2, 3]
    finally:
        await consumer.close()
        await client.close()


async def test_no_brokers_available_propagates_out_of_poll(broker: RunningBroker) -> None:
    topic = "consumer-gone"
    broker.create_topic(topic, 1)
    produce(broker, topic, simple("x", 2), 1)
    client = client_for(
        broker,
        **{
            "metadata.recovery.strategy": "none",
            "reconnect.backoff.ms": "20",
            "reconnect.backoff.max.ms": "50",
        },
    )
    await client.start()
    consumer = Consumer(client, fetch_max_wait_ms=100)
    try:
        consumer.assign([(topic, 0)])
        await consumer.seek_to_beginning()
        assert len(await poll_until(consumer, lambda g: len(g) >= 2)) == 2
        broker.stop()
        with pytest.raises(NoBrokersAvailable, match=r"metadata\.recovery\.strategy=none"):
            await asyncio.wait_for(consumer.poll(timeout_ms=20_000), 25)
    finally:
        await consumer.close()
        await client.close()


async def test_misuse_is_refused(broker: RunningBroker) -> None:
    client = client_for(broker, **{"auto.offset.reset": "sideways"})
    with pytest.raises(ValueError, match=r"auto\.offset\.reset"):
        Consumer.from_config(client)
    consumer = Consumer(client)
    with pytest.raises(IllegalStateError):
        await consumer.poll(timeout_ms=0)
    consumer.assign([("t", 0)])
    with pytest.raises(IllegalStateError):
        consumer.seek("t", 1, 0)
    with pytest.raises(IllegalStateError):
        consumer.position("u", 0)
    consumer.assign([("t", 1)])
    assert consumer.assignment() == {("t", 1)}
    await consumer.close()
    with pytest.raises(IllegalStateError):
        await consumer.poll()
