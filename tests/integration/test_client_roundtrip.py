"""100,000 records through each client library and back, compared byte for byte.

confluent-kafka (librdkafka), kafka-python and aiokafka each produce the same deterministic set
of records to a 3-partition topic on an in-process broker, then read everything back. Every
record names its partition, so the expected order within each partition is the send order.
Keys and values vary in size and include null and empty ones; some records carry headers.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTopicPartition
from confluent_kafka import Producer
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

from kplane.testing.plugin import RunningBroker
from tests.integration.helpers import produce_all, read_from_beginning

RECORDS = 100_000
PARTITIONS = 3
DEADLINE_S = 90.0

Headers = tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class Rec:
    partition: int
    key: bytes | None
    value: bytes | None
    headers: Headers


def _sized(rng: random.Random, size: int) -> bytes:
    return rng.randbytes(size)


def make_records(seed: int, count: int = RECORDS) -> list[Rec]:
    """Deterministic records: null/empty/small/large keys and values, headers on some."""
    rng = random.Random(seed)
    records = []
    for i in range(count):
        roll = i % 20
        if roll == 0:
            key = None
        elif roll == 1:
            key = b""
        else:
            key = _sized(rng, rng.choice((1, 4, 8, 16, 36, 100, 255)))
        if i % 997 == 3:
            value = None  # a tombstone; given a key below if it drew a null one
        elif i % 50 == 7:
            value = b""
        elif i % 1000 == 11:
            value = _sized(rng, rng.randint(8_000, 40_000))
        else:
            value = _sized(rng, rng.choice((1, 10, 64, 100, 200, 333, 500, 1024)))
        if value is None and key is None:
            key = b"tombstone"
        headers: Headers = ()
        if i % 7 == 0:
            headers = tuple(
                (f"h{j}-{rng.randint(0, 999)}", _sized(rng, rng.choice((0, 1, 8, 40))))
                for j in range(rng.randint(1, 4))
            )
        records.append(Rec(rng.randrange(PARTITIONS), key, value, headers))
    return records


def by_partition(records: Iterable[Rec]) -> dict[int, list[Rec]]:
    result: dict[int, list[Rec]] = {p: [] for p in range(PARTITIONS)}
    for rec in records:
        result[rec.partition].append(rec)
    return result


def norm_headers(headers: Sequence[tuple[str, bytes | None]] | None) -> Headers:
    return tuple((k, v if v is not None else b"") for k, v in headers or ())


def _describe(rec: Rec | None) -> str:
    if rec is None:
        return "<missing>"

    def size(b: bytes | None) -> str:
        return "null" if b is None else f"{len(b)}B:{b[:12].hex()}"

    return f"key={size(rec.key)} value={size(rec.value)} headers={list(rec.headers)}"


def assert_same(expected: list[Rec], got: dict[int, list[Rec]], offsets: dict[int, list[int]]):
    """Per partition: same records in the same order, offsets 0..n-1 without gaps."""
    want = by_partition(expected)
    for p in range(PARTITIONS):
        w, g = want[p], got.get(p, [])
        for index, (a, b) in enumerate(zip(w, g, strict=False)):
            assert a == b, (
                f"partition {p} offset {index}: expected {_describe(a)}, got {_describe(b)}"
            )
        assert len(g) == len(w), f"partition {p}: expected {len(w)} records, got {len(g)}"
        assert offsets[p] == list(range(len(w))), f"partition {p}: offsets not 0..{len(w) - 1}"


# confluent-kafka --------------------------------------------------------------------------
def test_confluent_kafka_roundtrip_acks_all_assign(broker: RunningBroker) -> None:
    """acks=all, idempotent producer; read back with assign() from the beginning, no group."""
    topic = "roundtrip-confluent"
    broker.create_topic(topic, PARTITIONS)
    records = make_records(seed=1)
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap(),
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 10,
            "batch.size": 512 * 1024,
            "batch.num.messages": 10_000,
            "compression.type": "none",
        }
    )
    produced = produce_all(
        producer,
        topic,
        (
            {
                "value": rec.value,
                "key": rec.key,
                "partition": rec.partition,
                "headers": list(rec.headers) or None,
            }
            for rec in records
        ),
        PARTITIONS,
    )
    want = by_partition(records)
    for p in range(PARTITIONS):
        assert produced[p] == list(range(len(want[p]))), f"delivery offsets of partition {p}"

    # group.id is required by librdkafka; no subscribe, no commits
    read = read_from_beginning(
        broker.bootstrap(),
        "unused-assign-only",
        topic,
        {p: len(want[p]) for p in range(PARTITIONS)},
        batch=10_000,
        timeout=DEADLINE_S,
    )
    got = {
        p: [Rec(p, m.key(), m.value(), norm_headers(m.headers())) for m in msgs]
        for p, msgs in read.items()
    }
    offsets = {p: [m.offset() for m in msgs] for p, msgs in read.items()}
    assert_same(records, got, offsets)


# kafka-python -----------------------------------------------------------------------------
def test_kafka_python_roundtrip_acks_1_group(broker: RunningBroker) -> None:
    """acks=1; read back through a consumer group (subscribe, earliest), then commit."""
    topic = "roundtrip-kafka-python"
    broker.create_topic(topic, PARTITIONS)
    records = make_records(seed=2)
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap(),
        acks=1,
        linger_ms=10,
        batch_size=256 * 1024,
        max_request_size=4 * 1024 * 1024,
    )
    try:
        futures = [
            producer.send(
                topic,
                value=rec.value,
                key=rec.key,
                partition=rec.partition,
                headers=list(rec.headers),
            )
            for rec in records
        ]
        producer.flush(timeout=60)
    finally:
        producer.close(timeout=10)
    produced: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    for future in futures:
        metadata = future.get(timeout=0)
        produced[metadata.partition].append(metadata.offset)
    want = by_partition(records)
    for p in range(PARTITIONS):
        assert produced[p] == list(range(len(want[p]))), f"delivery offsets of partition {p}"

    group = "roundtrip-kafka-python-group"
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap(),
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_poll_records=5_000,
    )
    got: dict[int, list[Rec]] = {p: [] for p in range(PARTITIONS)}
    offsets: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + DEADLINE_S
    try:
        consumer.subscribe([topic])
        while time.monotonic() < deadline and sum(map(len, got.values())) < len(records):
            for tp, messages in consumer.poll(timeout_ms=1000).items():
                for msg in messages:
                    got[tp.partition].append(
                        Rec(tp.partition, msg.key, msg.value, norm_headers(msg.headers))
                    )
                    offsets[tp.partition].append(msg.offset)
        assert {tp.partition for tp in consumer.assignment()} == set(range(PARTITIONS))
        consumer.commit()
        committed = {p: consumer.committed(KpTopicPartition(topic, p)) for p in range(PARTITIONS)}
    finally:
        consumer.close()
    assert_same(records, got, offsets)
    assert committed == {p: len(want[p]) for p in range(PARTITIONS)}


# aiokafka ---------------------------------------------------------------------------------
async def test_aiokafka_roundtrip_acks_1_assign(broker: RunningBroker) -> None:
    """acks=1; read back with assign() + seek_to_beginning, no group."""
    topic = "roundtrip-aiokafka"
    broker.create_topic(topic, PARTITIONS)
    records = make_records(seed=3)
    producer = AIOKafkaProducer(
        bootstrap_servers=broker.bootstrap(),
        acks=1,
        linger_ms=10,
        max_batch_size=256 * 1024,
        max_request_size=4 * 1024 * 1024,
    )
    await producer.start()
    try:
        futures = [
            await producer.send(
                topic,
                value=rec.value,
                key=rec.key,
                partition=rec.partition,
                headers=list(rec.headers),
            )
            for rec in records
        ]
        await producer.flush()
        results = [await f for f in futures]
    finally:
        await producer.stop()
    produced: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    for metadata in results:
        produced[metadata.partition].append(metadata.offset)
    want = by_partition(records)
    for p in range(PARTITIONS):
        assert produced[p] == list(range(len(want[p]))), f"delivery offsets of partition {p}"

    consumer = AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap(),
        group_id=None,
        enable_auto_commit=False,
        max_poll_records=5_000,
    )
    await consumer.start()
    got: dict[int, list[Rec]] = {p: [] for p in range(PARTITIONS)}
    offsets: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + DEADLINE_S
    try:
        partitions = [AioTopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        while time.monotonic() < deadline and sum(map(len, got.values())) < len(records):
            batch = await consumer.getmany(timeout_ms=1000, max_records=5_000)
            for tp, messages in batch.items():
                for msg in messages:
                    got[tp.partition].append(
                        Rec(tp.partition, msg.key, msg.value, norm_headers(msg.headers))
                    )
                    offsets[tp.partition].append(msg.offset)
    finally:
        await consumer.stop()
    assert_same(records, got, offsets)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_record_set_covers_the_edge_cases(seed: int) -> None:
    """The generated data really holds null and empty keys/values, big values, headers."""
    records = make_records(seed)
    assert any(r.key is None for r in records)
    assert any(r.key == b"" for r in records)
    assert any(r.value is None for r in records)
    assert any(r.value == b"" for r in records)
    assert any(r.value is not None and len(r.value) > 8_000 for r in records)
    assert any(r.headers for r in records)
    assert any(v == b"" for r in records for _, v in r.headers)
    assert {r.partition for r in records} == set(range(PARTITIONS))
