"""kplane's transactional Producer and read_committed Consumer against a real broker.

What kplane's producer commits and aborts is read back by confluent-kafka (librdkafka)
consumers of both isolation levels, and by kplane's own consumer; offsets sent to the
transaction are read with confluent-kafka's ``committed``; a second producer of the same
transactional id fences the first.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from kafka import KafkaConsumer as KafkaPythonConsumer

from kplane.client.consumer import READ_COMMITTED, READ_UNCOMMITTED, Consumer
from kplane.client.errors import (
    AbortableTransactionError,
    IllegalStateError,
    ProducerFencedError,
    TransactionAbortedError,
)
from kplane.client.kafka_client import KafkaClient
from kplane.client.producer import Producer
from kplane.client.transaction_manager import ConsumerGroupMetadata, TransactionState
from kplane.common.network.config import ClientConfig
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode
from kplane.protocol.records import read_partial_batches
from kplane.testing.plugin import RunningBroker
from tests.integration.helpers import fetch_partition, fetch_request


@asynccontextmanager
async def connected(broker: RunningBroker, **props: str) -> AsyncIterator[KafkaClient]:
    client = KafkaClient(
        ClientConfig.from_properties({"bootstrap.servers": broker.bootstrap(), **props})
    )
    await client.start()
    try:
        yield client
    finally:
        await client.close()


@asynccontextmanager
async def transactional(
    broker: RunningBroker, transactional_id: str, **options: Any
) -> AsyncIterator[Producer]:
    async with connected(broker) as client:
        producer = Producer(
            client, transactional_id=transactional_id, **{"linger_ms": 1, **options}
        )
        try:
            await asyncio.wait_for(producer.init_transactions(), 30)
            yield producer
        finally:
            await asyncio.wait_for(producer.close(), 30)


def confluent_read(
    broker: RunningBroker, topic: str, isolation: str, expected: int, partitions: int = 1
) -> list[bytes]:
    """Values librdkafka lets through at ``isolation``: until ``expected`` arrived, then half
    a second more (so one too many shows)."""
    consumer = ConfluentConsumer(
        {
            "bootstrap.servers": broker.bootstrap(),
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([ConfluentTopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    deadline = time.monotonic() + 20
    settle: float | None = None
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
            if len(values) >= expected:
                settle = settle or time.monotonic() + 0.5
                if time.monotonic() > settle:
                    break
    finally:
        consumer.close()
    return values


async def kplane_read(
    client: KafkaClient,
    topic: str,
    isolation_level: int,
    expected: int,
    partitions: int = 1,
    settle_s: float = 0.5,
    timeout_s: float = 20,
) -> list[bytes | None]:
    """Values kplane's consumer returns at ``isolation_level``, read as ``confluent_read``
    (for at most ``timeout_s``)."""
    consumer = Consumer(client, isolation_level=isolation_level, fetch_max_wait_ms=100)
    consumer.assign([(topic, p) for p in range(partitions)])
    values: list[bytes | None] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    settle: float | None = None
    try:
        while loop.time() < deadline:
            values += [r.value for r in await consumer.poll(100)]
            if len(values) >= expected:
                settle = settle or loop.time() + settle_s
                if loop.time() > settle:
                    break
    finally:
        await consumer.close()
    return values


def committed_offset(broker: RunningBroker, group: str, topic: str, partition: int) -> int:
    consumer = ConfluentConsumer({"bootstrap.servers": broker.bootstrap(), "group.id": group})
    try:
        (tp,) = consumer.committed([ConfluentTopicPartition(topic, partition)], timeout=10)
        return int(tp.offset)
    finally:
        consumer.close()


# commit and abort ----------------------------------------------------------------------------
async def test_commit_and_abort_seen_by_confluent_consumers(broker: RunningBroker) -> None:
    topic = "ktxn-basic"
    broker.create_topic(topic, partitions=2)
    async with transactional(broker, "ktxn-basic") as producer:
        producer.begin_transaction()
        sent = [
            await producer.send(topic, f"committed-{i}".encode(), partition=i % 2)
            for i in range(10)
        ]
        await producer.commit_transaction()
        assert all(f.done() and f.exception() is None for f in sent)
        producer.begin_transaction()
        aborted = [
            await producer.send(topic, f"aborted-{i}".encode(), partition=i % 2) for i in range(6)
        ]
        await producer.flush()  # written to the log, then aborted
        await producer.abort_transaction()
        assert all(f.exception() is None for f in aborted)
        async with producer.transaction():
            await producer.send(topic, b"last", partition=1)

    committed = await asyncio.to_thread(confluent_read, broker, topic, "read_committed", 11, 2)
    assert sorted(committed) == sorted([f"committed-{i}".encode() for i in range(10)] + [b"last"])
    everything = await asyncio.to_thread(confluent_read, broker, topic, "read_uncommitted", 17, 2)
    assert sorted(everything) == sorted(committed + [f"aborted-{i}".encode() for i in range(6)])

    # on the wire: data batches transactional with the producer's id, three markers each
    with broker.wire() as wire:
        part = fetch_partition(wire, fetch_request(topic, 0, partition=1))
    headers = read_partial_batches(part.records or b"")
    data = [h for h in headers if not h.is_control]
    assert data and all(h.is_transactional and h.producer_id >= 0 for h in data)
    assert [h.is_control for h in headers].count(True) == 3


async def test_records_not_sent_before_abort_fail_with_transaction_aborted(
    broker: RunningBroker,
) -> None:
    topic = "ktxn-unsent"
    broker.create_topic(topic)
    async with transactional(broker, "ktxn-unsent", linger_ms=60_000) as producer:
        producer.begin_transaction()
        pending = await producer.send(topic, b"never sent")
        await producer.abort_transaction()
        with pytest.raises(TransactionAbortedError):
            await pending
        async with producer.transaction():
            await producer.send(topic, b"after")
    assert await asyncio.to_thread(confluent_read, broker, topic, "read_uncommitted", 1) == [
        b"after"
    ]


async def test_usage_errors_raise_at_once(broker: RunningBroker) -> None:
    topic = "ktxn-usage"
    broker.create_topic(topic)
    async with connected(broker) as client:
        producer = Producer(client, transactional_id="ktxn-usage")
        with pytest.raises(IllegalStateError, match="init_transactions"):
            producer.begin_transaction()
        with pytest.raises(IllegalStateError, match="init_transactions"):
            await producer.send(topic, b"x")
        await producer.init_transactions()
        with pytest.raises(IllegalStateError, match="init_transactions"):
            await producer.init_transactions()
        with pytest.raises(IllegalStateError, match="begin_transaction"):
            await producer.send(topic, b"outside")
        with pytest.raises(IllegalStateError):
            await producer.commit_transaction()
        producer.begin_transaction()
        with pytest.raises(IllegalStateError, match="open already"):
            producer.begin_transaction()
        await producer.close()  # aborts the open transaction
        with pytest.raises(RuntimeError, match="closed"):
            await producer.send(topic, b"after close")

        plain = Producer(client)
        with pytest.raises(IllegalStateError, match=r"transactional\.id"):
            await plain.init_transactions()
        await plain.close()
    with pytest.raises(ValueError, match="idempotence"):
        Producer(client, transactional_id="t", enable_idempotence=False)


async def test_configured_by_kafka_keys(broker: RunningBroker) -> None:
    topic = "ktxn-config"
    broker.create_topic(topic)
    props = {"transactional.id": "ktxn-config", "transaction.timeout.ms": "10000"}
    async with connected(broker, **props, **{"isolation.level": "read_committed"}) as client:
        producer = Producer.from_config(client)
        await producer.init_transactions()
        producer.begin_transaction()
        await producer.send(topic, b"one")
        await producer.commit_transaction()
        producer.begin_transaction()
        await producer.send_and_wait(topic, b"two")
        consumer = Consumer.from_config(client)
        assert consumer.isolation_level == READ_COMMITTED
        consumer.assign([(topic, 0)])
        got = [r.value for r in await consumer.poll(2000)]
        assert got == [b"one"]
        await producer.abort_transaction()
        await producer.close()
        await consumer.close()


# read_committed in kplane's consumer ---------------------------------------------------------
async def test_kplane_consumer_isolation_levels_with_interleaved_transactions(
    broker: RunningBroker,
) -> None:
    """Two producers' transactions interleave in one partition; one aborts: read_committed
    drops exactly that producer's batches from its first offset to its abort marker."""
    topic = "ktxn-interleaved"
    broker.create_topic(topic)
    async with (
        transactional(broker, "ktxn-a") as a,
        transactional(broker, "ktxn-b") as b,
        connected(broker) as client,
    ):
        a.begin_transaction()
        b.begin_transaction()
        await a.send_and_wait(topic, b"a1")
        await b.send_and_wait(topic, b"b1")
        await a.send_and_wait(topic, b"a2")
        await b.send_and_wait(topic, b"b2")
        # the open transactions hold read_committed back at the first one's first offset
        assert await kplane_read(client, topic, READ_COMMITTED, 1, timeout_s=1) == []
        assert await kplane_read(client, topic, READ_UNCOMMITTED, 4) == [
            b"a1",
            b"b1",
            b"a2",
            b"b2",
        ]
        await b.abort_transaction()
        await a.commit_transaction()
        async with b.transaction():
            await b.send(topic, b"b3")

        committed = await kplane_read(client, topic, READ_COMMITTED, 3)
        assert committed == [b"a1", b"a2", b"b3"]
        assert (
            await asyncio.to_thread(confluent_read, broker, topic, "read_committed", 3) == committed
        )
        assert await kplane_read(client, topic, READ_UNCOMMITTED, 5) == [
            b"a1",
            b"b1",
            b"a2",
            b"b2",
            b"b3",
        ]
        # from an offset inside the aborted range, read_committed goes on past it
        consumer = Consumer(client, isolation_level=READ_COMMITTED, fetch_max_wait_ms=100)
        consumer.assign([(topic, 0)])
        consumer.seek(topic, 0, 1)
        records = []
        for _ in range(50):
            records += await consumer.poll(100)
            if len(records) >= 2:
                break
        assert [r.value for r in records] == [b"a2", b"b3"]
        assert records[0].offset == 2
        await consumer.seek_to_end()
        end = consumer.position(topic, 0)
        assert end is not None and end > records[-1].offset
        await consumer.close()


# send_offsets_to_transaction ------------------------------------------------------------------
async def test_offsets_sent_to_a_transaction_count_only_when_it_commits(
    broker: RunningBroker,
) -> None:
    source, group = "ktxn-offsets-in", "ktxn-offsets-group"
    broker.create_topic(source)
    broker.create_topic("ktxn-offsets-out")
    async with transactional(broker, "ktxn-offsets") as producer:
        producer.begin_transaction()
        await producer.send("ktxn-offsets-out", b"x")
        await producer.send_offsets_to_transaction({(source, 0): 5}, group)
        await producer.abort_transaction()
        assert await asyncio.to_thread(committed_offset, broker, group, source, 0) < 0

        producer.begin_transaction()
        await producer.send("ktxn-offsets-out", b"y")
        await producer.send_offsets_to_transaction({(source, 0): 7}, ConsumerGroupMetadata(group))
        await producer.commit_transaction()
    assert await asyncio.to_thread(committed_offset, broker, group, source, 0) == 7


async def test_offsets_of_a_stale_group_member_abort_the_transaction(
    broker: RunningBroker,
) -> None:
    """KIP-447: the group coordinator checks the member and generation sent with the
    offsets; a wrong generation makes the transaction abortable, the right one commits."""
    source, group = "ktxn-member-in", "ktxn-member-group"
    broker.create_topic(source)
    member = KafkaPythonConsumer(
        source,
        bootstrap_servers=broker.bootstrap(),
        group_id=group,
        enable_auto_commit=False,
    )
    try:
        deadline = time.monotonic() + 20
        while (generation := member._coordinator.generation_if_stable()) is None:
            assert time.monotonic() < deadline, "the member never joined"
            await asyncio.to_thread(member.poll, 100)
        metadata = ConsumerGroupMetadata(group, generation.generation_id, generation.member_id)
        async with transactional(broker, "ktxn-member") as producer:
            producer.begin_transaction()
            stale = ConsumerGroupMetadata(group, metadata.generation_id + 5, metadata.member_id)
            with pytest.raises(AbortableTransactionError) as info:
                await producer.send_offsets_to_transaction({(source, 0): 3}, stale)
            assert info.value.code == ErrorCode.illegal_generation
            with pytest.raises(AbortableTransactionError):
                await producer.commit_transaction()
            await producer.abort_transaction()

            producer.begin_transaction()
            await producer.send_offsets_to_transaction({(source, 0): 4}, metadata)
            await producer.commit_transaction()
    finally:
        await asyncio.to_thread(member.close, autocommit=False)
    assert await asyncio.to_thread(committed_offset, broker, group, source, 0) == 4


# fencing ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("found_by", ["end_txn", "produce", "add_partitions"])
async def test_a_second_producer_fences_the_first(broker: RunningBroker, found_by: str) -> None:
    topic = f"ktxn-fence-{found_by}"
    broker.create_topic(topic, partitions=2)
    async with (
        transactional(broker, topic) as first,
        connected(broker) as other_client,
    ):
        first.begin_transaction()
        await first.send_and_wait(topic, b"from the first", partition=0)
        second = Producer(other_client, transactional_id=topic, linger_ms=1)
        await asyncio.wait_for(second.init_transactions(), 30)  # aborts the first's

        if found_by == "produce":
            with pytest.raises(ProducerFencedError):
                await first.send_and_wait(topic, b"late", partition=0)
        elif found_by == "add_partitions":
            late = await first.send(topic, b"late", partition=1)
            with pytest.raises(ProducerFencedError):
                await late
        with pytest.raises(ProducerFencedError) as fenced:
            await first.commit_transaction()
        assert first._transactions is not None
        assert first._transactions.state is TransactionState.FATAL_ERROR
        # every later call raises the same error
        for call in (first.begin_transaction, first.abort_transaction):
            with pytest.raises(ProducerFencedError) as again:
                result = call()
                if asyncio.iscoroutine(result):
                    await result
            assert again.value is fenced.value
        with pytest.raises(ProducerFencedError):
            await first.send(topic, b"after")

        async with second.transaction():
            await second.send(topic, b"from the second", partition=0)
        await second.close()
    assert await asyncio.to_thread(confluent_read, broker, topic, "read_committed", 1, 2) == [
        b"from the second"
    ]


async def test_requests_go_to_the_coordinators_at_client_versions(broker: RunningBroker) -> None:
    """AddPartitionsToTxn at v3 at most (v4+ is the brokers' form); FindCoordinator asked
    for the transactional id and the group."""
    topic = "ktxn-wire"
    broker.create_topic(topic)
    seen: list[tuple[int, int]] = []
    async with connected(broker) as client:
        original = client.request

        async def request(node_id: Any, api_key: int, build: Any, *args: Any, **kw: Any) -> Any:
            def recording(version: int) -> Any:
                seen.append((api_key, version))
                return build(version)

            return await original(node_id, api_key, recording, *args, **kw)

        client.request = request  # type: ignore[method-assign]
        producer = Producer(client, transactional_id="ktxn-wire", linger_ms=1)
        await producer.init_transactions()
        async with producer.transaction():
            await producer.send(topic, b"v")
            await producer.send_offsets_to_transaction({(topic, 0): 1}, "ktxn-wire-group")
        await producer.close()
    keys = [k for k, _ in seen]
    for key in (
        ApiKey.FIND_COORDINATOR,
        ApiKey.INIT_PRODUCER_ID,
        ApiKey.ADD_PARTITIONS_TO_TXN,
        ApiKey.PRODUCE,
        ApiKey.ADD_OFFSETS_TO_TXN,
        ApiKey.TXN_OFFSET_COMMIT,
        ApiKey.END_TXN,
    ):
        assert key in keys, key
    assert keys.index(ApiKey.ADD_PARTITIONS_TO_TXN) < keys.index(ApiKey.PRODUCE)
    assert keys.count(ApiKey.FIND_COORDINATOR) == 2  # the transaction's, the group's
    assert all(v <= 3 for k, v in seen if k == ApiKey.ADD_PARTITIONS_TO_TXN)
