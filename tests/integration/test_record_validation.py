"""Record batch validation over real sockets (issue 12).

Raw-wire Produce v9 of each bad batch kind the fuzzing found, and a few more, must be
answered with Kafka's error code while the log end offset stays where it was; then
confluent-kafka (librdkafka), kafka-python and aiokafka produce with every compression codec
they support and read everything back.
"""

from __future__ import annotations

import random
import struct
import time
from collections.abc import Callable

import crc32c
import kafka.codec
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import Producer
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from structlog.testing import capture_logs

from kplane.protocol.compression import compress
from kplane.protocol.errors import ErrorCode
from kplane.protocol.records import BATCH_HEADER_SIZE, Record, build_batch
from kplane.testing.plugin import RunningBroker
from tests.integration.helpers import produce, read_from_beginning

CODECS = ("gzip", "snappy", "lz4", "zstd")
CODEC_IDS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
COUNT = 3000


def good_records(n: int = 3) -> list[Record]:
    return [Record(key=b"k%d" % i, value=b"value-%d" % i) for i in range(n)]


def with_crc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


def edited(fmt: str, offset: int, value: int) -> Callable[[], bytes]:
    def make() -> bytes:
        batch = bytearray(build_batch(good_records()))
        struct.pack_into(fmt, batch, offset, value)
        return with_crc(batch)

    return make


def records_replaced(codec: int, payload: bytes) -> Callable[[], bytes]:
    """A batch of three records whose record area is ``payload`` under codec ``codec``."""

    def make() -> bytes:
        batch = bytearray(build_batch(good_records()))[:BATCH_HEADER_SIZE] + payload
        struct.pack_into(">i", batch, 8, len(batch) - 12)
        struct.pack_into(">h", batch, 21, codec)
        return with_crc(batch)

    return make


def random_records() -> bytes:
    size = len(build_batch(good_records())) - BATCH_HEADER_SIZE
    return records_replaced(0, random.Random(7).randbytes(size))()


def wrong_offset_delta() -> bytes:
    """The third record says offsetDelta 0."""
    batch = bytearray(build_batch([Record(key=None, value=b"v" * 10) for _ in range(3)]))
    record = (len(batch) - BATCH_HEADER_SIZE) // 3
    batch[BATCH_HEADER_SIZE + 2 * record + 3] = 0
    return with_crc(batch)


def bomb(codec: str) -> Callable[[], bytes]:
    """Three valid records followed by 80 MiB of zeros, over the 64 MiB bound."""

    def make() -> bytes:
        records = build_batch(good_records())[BATCH_HEADER_SIZE:]
        return records_replaced(
            CODEC_IDS[codec], compress(CODEC_IDS[codec], records + bytes(80 << 20))
        )()

    return make


BAD_BATCHES: dict[str, tuple[Callable[[], bytes], ErrorCode]] = {
    "last offset delta 10**9": (edited(">i", 23, 10**9), ErrorCode.invalid_record),
    "record count 4 for 3 records": (edited(">i", 57, 4), ErrorCode.invalid_record),
    "base offset 9": (edited(">q", 0, 9), ErrorCode.invalid_record),
    "random records under a valid crc": (random_records, ErrorCode.invalid_record),
    "offset delta out of order": (wrong_offset_delta, ErrorCode.invalid_record),
    "gzip flag on plain records": (
        records_replaced(1, build_batch(good_records())[BATCH_HEADER_SIZE:]),
        ErrorCode.corrupt_message,
    ),
    "snappy garbage": (records_replaced(2, b"\x10garbage-garbage"), ErrorCode.corrupt_message),
    "lz4 garbage": (records_replaced(3, b"\x04\x22\x4d\x18garbage"), ErrorCode.corrupt_message),
    "zstd garbage": (records_replaced(4, b"\x28\xb5\x2f\xfdgarbage"), ErrorCode.corrupt_message),
    "unknown codec 5": (edited(">h", 21, 5), ErrorCode.invalid_record),
    "gzip bomb": (bomb("gzip"), ErrorCode.message_too_large),
    "lz4 bomb": (bomb("lz4"), ErrorCode.message_too_large),
    "zstd bomb": (bomb("zstd"), ErrorCode.message_too_large),
}


def log_end_offset(broker: RunningBroker, topic: str) -> int:
    replica = broker.replica(topic, 0)
    assert replica is not None
    return replica.log_end_offset


@pytest.mark.parametrize("kind", list(BAD_BATCHES))
def test_bad_batch_is_refused_and_the_log_end_stays(broker: RunningBroker, kind: str) -> None:
    make, expected = BAD_BATCHES[kind]
    topic = "bad-" + "".join(c if c.isalnum() else "-" for c in kind)
    broker.create_topic(topic)
    bad = make()
    with broker.wire() as client:
        assert produce(client, topic, build_batch(good_records())).error_code == ErrorCode.none
        with capture_logs() as logs:
            answer = produce(client, topic, bad)
            # A good batch first: two batches for one partition are refused whole, as
            # Kafka allows exactly one per partition; nothing of the request is appended.
            both = produce(client, topic, build_batch(good_records()) + bad)
        assert answer.error_code == expected, answer
        assert answer.base_offset == -1
        assert answer.error_message
        assert both.error_code == ErrorCode.invalid_record, both
        assert log_end_offset(broker, topic) == 3
        good = produce(client, topic, build_batch(good_records(2)))
        assert (good.error_code, good.base_offset) == (ErrorCode.none, 3)
    refusals = [e for e in logs if e["event"] == "record batch refused"]
    assert len(refusals) == 2
    assert all(e["log_level"] == "warning" for e in refusals)
    assert {(e["topic"], e["partition"]) for e in refusals} == {(topic, 0)}
    assert all(e["reason"] and "exc_info" not in e for e in refusals)


def test_bad_record_is_named_in_record_errors(broker: RunningBroker) -> None:
    broker.create_topic("record-errors")
    with broker.wire() as client:
        answer = produce(client, "record-errors", wrong_offset_delta())
    assert answer.error_code == ErrorCode.invalid_record
    assert [e.batch_index for e in answer.record_errors] == [2]
    assert "offset delta 0, expected 2" in answer.record_errors[0].batch_index_error_message


def test_timestamp_outside_the_topics_difference_is_refused(broker: RunningBroker) -> None:
    topic = "timestamps"
    broker.create_topic(topic, config={"message.timestamp.difference.max.ms": "60000"})
    now = int(time.time() * 1000)
    stale = [Record(key=None, value=b"a", timestamp=now), Record(key=None, value=b"b", timestamp=0)]
    with broker.wire() as client:
        answer = produce(client, topic, build_batch(stale))
        assert answer.error_code == ErrorCode.invalid_timestamp, answer
        assert [e.batch_index for e in answer.record_errors] == [1]
        fresh = produce(client, topic, build_batch([Record(key=None, value=b"c")]))
        assert (fresh.error_code, fresh.base_offset) == (ErrorCode.none, 0)


# clients: every codec, produced and read back ----------------------------------------------
def values(count: int) -> list[bytes]:
    """Mixed sizes, compressible and not: runs of equal sizes and changes between them."""
    rng = random.Random(count)
    return [
        (b"%06d:" % i) + (rng.randbytes(40) if i % 500 < 250 else b"z" * (i % 300))
        for i in range(count)
    ]


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka_produces_every_codec(broker: RunningBroker, codec: str) -> None:
    topic = f"confluent-{codec}"
    broker.create_topic(topic)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap(), "compression.type": codec, "linger.ms": 20}
    )
    want = values(COUNT)
    for i, value in enumerate(want):
        producer.produce(topic, value, key=b"k%d" % i if i % 2 else None, headers={"h": b"%d" % i})
    assert producer.flush(30) == 0
    read = read_from_beginning(broker.bootstrap(), "v", topic, {0: COUNT}, batch=1000, timeout=30)
    assert [m.value() for m in read[0]] == want
    assert [m.offset() for m in read[0]] == list(range(COUNT))


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_produces_every_codec_it_supports(broker: RunningBroker, codec: str) -> None:
    if not getattr(kafka.codec, f"has_{codec}")():
        pytest.skip(f"kafka-python has no {codec} library here")
    topic = f"kafka-python-{codec}"
    broker.create_topic(topic)
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap(), compression_type=codec, linger_ms=20
    )
    want = values(COUNT)
    for value in want:
        producer.send(topic, value, partition=0, headers=[("h", b"x")])
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap(), consumer_timeout_ms=5000)
    consumer.assign([KpTopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    got = [(m.offset, m.value) for m in consumer]
    consumer.close()
    assert got == list(enumerate(want))


@pytest.mark.parametrize("codec", CODECS)
async def test_aiokafka_produces_every_codec(broker: RunningBroker, codec: str) -> None:
    topic = f"aiokafka-{codec}"
    broker.create_topic(topic)
    producer = AIOKafkaProducer(
        bootstrap_servers=broker.bootstrap(), compression_type=codec, linger_ms=20
    )
    want = values(COUNT)
    await producer.start()
    try:
        for value in want:
            await producer.send(topic, value, partition=0, headers=[("h", b"x")])
        await producer.flush()
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap(), group_id=None)
    await consumer.start()
    got: list[tuple[int, bytes | None]] = []
    try:
        tp = AioTopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        deadline = time.monotonic() + 30
        while len(got) < COUNT and time.monotonic() < deadline:
            for messages in (await consumer.getmany(timeout_ms=500)).values():
                got += [(m.offset, m.value) for m in messages]
    finally:
        await consumer.stop()
    assert got == list(enumerate(want))
