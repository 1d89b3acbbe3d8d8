"""Transactions (KIP-98, KIP-447) with unmodified confluent-kafka (librdkafka) clients.

Commit and abort, read_committed against read_uncommitted, consume-transform-produce with
``send_offsets_to_transaction``, fencing by a second producer of the same transactional id,
the abort of a transaction left open past its timeout, and a restart between commit and read.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from kplane.testing.plugin import BrokerProcess, RunningBroker, wait_for_port


def producer(bootstrap: str, transactional_id: str, **extra: object) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "linger.ms": 5,
            **extra,
        }
    )


def consume_all(
    bootstrap: str,
    topic: str,
    isolation: str,
    expected: int,
    partitions: int = 1,
    timeout: float = 15.0,
) -> list[bytes]:
    """Values of every record the isolation level lets through, reading until ``expected``
    arrived and then a little longer (so a record too many shows)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4()}",
            "isolation.level": isolation,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    settle: float | None = None
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
            if len(values) >= expected:
                settle = settle or time.monotonic() + 1.0
                if time.monotonic() > settle:
                    break
    finally:
        consumer.close()
    return values


def wait_for(check: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def test_commit_and_abort_seen_by_isolation_level(broker: RunningBroker) -> None:
    topic = "txn-basic"
    broker.create_topic(topic, partitions=2)
    p = producer(broker.bootstrap(), "txn-basic")
    p.init_transactions(15)
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, f"committed-{i}".encode(), partition=i % 2)
    p.commit_transaction(15)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, f"aborted-{i}".encode(), partition=i % 2)
    p.flush(10)
    p.abort_transaction(15)
    p.begin_transaction()
    p.produce(topic, b"last", partition=0)
    p.commit_transaction(15)

    committed = consume_all(broker.bootstrap(), topic, "read_committed", 11, partitions=2)
    assert sorted(committed) == sorted([f"committed-{i}".encode() for i in range(10)] + [b"last"])
    everything = consume_all(broker.bootstrap(), topic, "read_uncommitted", 16, partitions=2)
    assert len(everything) == 16
    assert {v for v in everything if v.startswith(b"aborted")} == {
        f"aborted-{i}".encode() for i in range(5)
    }


def test_open_transaction_holds_back_read_committed(broker: RunningBroker) -> None:
    topic = "txn-open"
    broker.create_topic(topic)
    p = producer(broker.bootstrap(), "txn-open")
    p.init_transactions(15)
    p.begin_transaction()
    p.produce(topic, b"pending")
    p.flush(10)
    assert consume_all(broker.bootstrap(), topic, "read_committed", 1, timeout=2) == []
    assert consume_all(broker.bootstrap(), topic, "read_uncommitted", 1) == [b"pending"]
    p.commit_transaction(15)
    assert consume_all(broker.bootstrap(), topic, "read_committed", 1) == [b"pending"]


def test_consume_transform_produce_commits_offsets_with_the_transaction(
    broker: RunningBroker,
) -> None:
    source, sink, group = "ctp-in", "ctp-out", "ctp-group"
    broker.create_topic(source)
    broker.create_topic(sink)
    plain = Producer({"bootstrap.servers": broker.bootstrap()})
    for i in range(6):
        plain.produce(source, f"in-{i}".encode())
    plain.flush(10)

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap(),
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([source])
    p = producer(broker.bootstrap(), "ctp")
    p.init_transactions(15)
    try:
        for commit in (True, False):
            size = 3
            seen = []
            deadline = time.monotonic() + 20
            while len(seen) < size and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is not None and msg.error() is None:
                    seen.append(msg)
            assert len(seen) == size
            p.begin_transaction()
            for msg in seen:
                p.produce(sink, msg.value().replace(b"in", b"out"))
            p.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 15
            )
            if commit:
                p.commit_transaction(15)
            else:
                p.abort_transaction(15)
        committed = consumer.committed([TopicPartition(source, 0)], timeout=10)
        assert committed[0].offset == 3  # the aborted transaction's offsets did not count
    finally:
        consumer.close()
    assert sorted(consume_all(broker.bootstrap(), sink, "read_committed", 3)) == [
        b"out-0",
        b"out-1",
        b"out-2",
    ]


def test_second_producer_with_the_same_transactional_id_fences_the_first(
    broker: RunningBroker,
) -> None:
    topic = "txn-fence"
    broker.create_topic(topic)
    first = producer(broker.bootstrap(), "fenced-id")
    first.init_transactions(15)
    first.begin_transaction()
    first.produce(topic, b"zombie")
    first.flush(10)

    second = producer(broker.bootstrap(), "fenced-id")
    second.init_transactions(30)  # aborts the first one's open transaction
    second.begin_transaction()
    second.produce(topic, b"winner")
    second.commit_transaction(15)

    with pytest.raises(KafkaException) as raised:
        first.produce(topic, b"late")
        first.commit_transaction(10)
    error = raised.value.args[0]
    assert error.fatal() or error.code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    ), error
    assert consume_all(broker.bootstrap(), topic, "read_committed", 1) == [b"winner"]


def test_transaction_open_past_its_timeout_is_aborted(
    broker_factory: Callable[..., RunningBroker],
) -> None:
    broker = broker_factory({"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"})
    topic = "txn-timeout"
    broker.create_topic(topic)
    p = producer(broker.bootstrap(), "slow", **{"transaction.timeout.ms": 1000})
    p.init_transactions(15)
    p.begin_transaction()
    p.produce(topic, b"never")
    p.flush(10)
    # The coordinator aborts it: the partition's LSO moves past the aborted records.
    wait_for(
        lambda: (
            consume_all(broker.bootstrap(), topic, "read_committed", 0, timeout=0.5) == []
            and _lso(broker, topic) > 0
        )
    )
    with pytest.raises(KafkaException):
        p.commit_transaction(10)
    assert consume_all(broker.bootstrap(), topic, "read_uncommitted", 1) == [b"never"]


def _lso(broker: RunningBroker, topic: str) -> int:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap(),
            "group.id": "lso",
            "isolation.level": "read_committed",
        }
    )
    try:
        _low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)
        return int(high)
    finally:
        consumer.close()


def test_timeout_above_the_maximum_is_refused(broker_factory: Callable[..., RunningBroker]) -> None:
    broker = broker_factory({"transaction.max.timeout.ms": "5000"})
    p = producer(broker.bootstrap(), "too-long", **{"transaction.timeout.ms": 60000})
    with pytest.raises(KafkaException) as raised:
        p.init_transactions(10)
    assert raised.value.args[0].code() == KafkaError.INVALID_TRANSACTION_TIMEOUT


def test_restart_between_commit_and_read_changes_nothing(
    broker_process: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    log_dir = tmp_path / "txn-logs"
    first = broker_process("configs/server.properties", f"log.dirs={log_dir}")
    assert first.port is not None
    topic = "txn-restart"
    p = producer(first.bootstrap, "restart")
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, f"c-{i}".encode())
    p.commit_transaction(15)
    p.begin_transaction()
    p.produce(topic, b"aborted")
    p.flush(10)
    p.abort_transaction(15)
    p.begin_transaction()
    p.produce(topic, b"open")
    p.flush(10)
    assert first.terminate() == 0
    second = broker_process(
        "configs/server.properties",
        f"log.dirs={log_dir}",
        f"listeners=PLAINTEXT://127.0.0.1:{first.port}",
        plaintext_port=False,
    )
    second.port = first.port
    wait_for_port("127.0.0.1", first.port)
    assert consume_all(second.bootstrap, topic, "read_committed", 5) == [
        f"c-{i}".encode() for i in range(5)
    ]
    # The transaction left open is still open after the restart: its producer commits it.
    p.commit_transaction(30)
    assert consume_all(second.bootstrap, topic, "read_committed", 6)[-1] == b"open"


def test_kafka_python_commit_and_abort(broker: RunningBroker) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition

    topic = "txn-kafka-python"
    broker.create_topic(topic)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap(), transactional_id="kp")
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(3):
            p.send(topic, f"kp-{i}".encode())
        p.commit_transaction()
        p.begin_transaction()
        p.send(topic, b"kp-aborted")
        p.flush()
        p.abort_transaction()
    finally:
        p.close()
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap(),
        isolation_level="read_committed",
        enable_auto_commit=False,
        consumer_timeout_ms=2000,
    )
    consumer.assign([KTopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    try:
        assert [m.value for m in consumer] == [b"kp-0", b"kp-1", b"kp-2"]
    finally:
        consumer.close()
    assert len(consume_all(broker.bootstrap(), topic, "read_uncommitted", 4)) == 4


def test_aiokafka_commit_and_abort(broker: RunningBroker) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as ATopicPartition

    topic = "txn-aiokafka"
    broker.create_topic(topic)

    async def run() -> list[bytes]:
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap(), transactional_id="aio")
        await p.start()
        try:
            async with p.transaction():
                for i in range(3):
                    await p.send_and_wait(topic, f"aio-{i}".encode())
            await p.begin_transaction()
            await p.send_and_wait(topic, b"aio-aborted")
            await p.abort_transaction()
        finally:
            await p.stop()
        c = AIOKafkaConsumer(
            bootstrap_servers=broker.bootstrap(),
            isolation_level="read_committed",
            enable_auto_commit=False,
        )
        await c.start()
        try:
            c.assign([ATopicPartition(topic, 0)])
            await c.seek_to_beginning()
            batch = await c.getmany(timeout_ms=3000)
            return [m.value for msgs in batch.values() for m in msgs]
        finally:
            await c.stop()

    assert asyncio.run(run()) == [b"aio-0", b"aio-1", b"aio-2"]
