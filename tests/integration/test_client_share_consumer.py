"""kplane's own ShareConsumer (KIP-932) against an in-process broker: two members split a
topic's records exactly once, explicit acknowledgements (RELEASE delivers again, REJECT
never), a member closing without acknowledging gives its records to another, and a kplane
member and confluent-kafka's ShareConsumer in one group. Records are produced with
confluent-kafka; every wait is on a condition with a deadline."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from confluent_kafka import ShareConsumer as CkShareConsumer
from kio.schema.describe_share_group_offsets.v1.request import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequestGroup,
)
from kio.schema.types import GroupId

from kplane.client.consumer import ConsumerRecord
from kplane.client.errors import IllegalStateError
from kplane.client.kafka_client import KafkaClient
from kplane.client.share_consumer import ShareConsumer
from kplane.client.share_session_handler import AcknowledgeType
from kplane.common.network.config import ClientConfig
from kplane.testing.plugin import RunningBroker

from .test_share_groups import describe, produce_values, set_group_config, share_config


def client_for(broker: RunningBroker, group: str, **extra: str) -> KafkaClient:
    props = {
        "bootstrap.servers": broker.bootstrap(),
        "request.timeout.ms": "10000",
        "group.id": group,
        **extra,
    }
    return KafkaClient(ClientConfig.from_properties(props))


@asynccontextmanager
async def share_consumer(
    broker: RunningBroker, group: str, **extra: str
) -> AsyncIterator[ShareConsumer]:
    async with client_for(broker, group, **extra) as client:
        consumer = ShareConsumer.from_config(client)
        try:
            yield consumer
        finally:
            await consumer.close()


async def poll_until(
    consumer: ShareConsumer,
    done: Callable[[list[ConsumerRecord]], bool],
    timeout: float = 60.0,
    on_poll: Callable[[list[ConsumerRecord]], None] | None = None,
) -> list[ConsumerRecord]:
    got: list[ConsumerRecord] = []
    deadline = time.monotonic() + timeout
    while not done(got) and time.monotonic() < deadline:
        records = await consumer.poll(timeout_ms=500)
        got.extend(records)
        if on_poll is not None:
            on_poll(records)
    return got


async def members_assigned(broker: RunningBroker, group: str, count: int) -> None:
    deadline = time.monotonic() + 60
    while True:
        members = (await asyncio.to_thread(describe, broker, group)).members
        if sum(bool(m.assignment.topic_partitions) for m in members) == count:
            return
        assert time.monotonic() < deadline, f"{count} members of {group} assigned"
        await asyncio.sleep(0.2)


def lags(broker: RunningBroker, group: str) -> dict[tuple[str, int], int]:
    """The group's lag per partition (0: every record settled)."""
    with broker.wire() as wire:
        response = wire.request(
            DescribeShareGroupOffsetsRequest(
                groups=(
                    DescribeShareGroupOffsetsRequestGroup(group_id=GroupId(group), topics=None),
                )
            )
        )
    return {
        (t.topic_name, int(p.partition_index)): int(p.lag)
        for t in response.groups[0].topics
        for p in t.partitions
    }


async def test_two_share_consumers_read_every_record_once_between_them(
    broker: RunningBroker,
) -> None:
    topic, group = "kc-share-two", "kc-share-two-group"
    broker.create_topic(topic, 2)
    set_group_config(broker, group, share_auto_offset_reset="earliest")
    values = [f"v{i}".encode() for i in range(2000)]
    seen: dict[int, list[ConsumerRecord]] = {0: [], 1: []}
    stop = asyncio.Event()

    async def run(index: int) -> None:
        async with share_consumer(broker, group, **{"client.id": f"kc{index}"}) as consumer:
            consumer.subscribe([topic])
            while not stop.is_set():
                seen[index].extend(await consumer.poll(timeout_ms=200))

    tasks = [asyncio.create_task(run(i)) for i in range(2)]
    try:
        await members_assigned(broker, group, 2)
        for chunk in range(0, 2000, 200):
            await asyncio.to_thread(produce_values, broker, topic, values[chunk : chunk + 200])
        deadline = time.monotonic() + 90
        while len(seen[0]) + len(seen[1]) < 2000 and time.monotonic() < deadline:
            assert not any(t.done() for t in tasks), [t.exception() for t in tasks if t.done()]
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.5)  # nothing more should come
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    both = seen[0] + seen[1]
    assert sorted(r.value or b"" for r in both) == sorted(values), "every record exactly once"
    assert seen[0] and seen[1], "both consumers received records"
    assert {r.delivery_count for r in both} == {1}
    # implicit mode: each poll accepted the one before, close the last
    assert lags(broker, group) == {(topic, 0): 0, (topic, 1): 0}


async def test_explicit_release_is_delivered_again_and_reject_never(
    broker: RunningBroker,
) -> None:
    topic, group = "kc-share-explicit", "kc-share-explicit-group"
    broker.create_topic(topic, 1)
    set_group_config(broker, group, share_auto_offset_reset="earliest")
    produce_values(broker, topic, [f"r{i}".encode() for i in range(10)])
    async with share_consumer(
        broker, group, **{"share.acknowledgement.mode": "explicit"}
    ) as consumer:
        consumer.subscribe([topic])
        first = await poll_until(consumer, lambda got: len(got) >= 10)
        assert sorted(r.value or b"" for r in first) == sorted(f"r{i}".encode() for i in range(10))
        assert {r.delivery_count for r in first} == {1}
        # as Kafka's: a poll returns the last poll's records not yet acknowledged again
        assert await consumer.poll(timeout_ms=100) == first
        for record in first:
            kind = (
                AcknowledgeType.RELEASE
                if record.value in (b"r1", b"r2")
                else AcknowledgeType.REJECT
                if record.value == b"r3"
                else AcknowledgeType.ACCEPT
            )
            consumer.acknowledge(record, kind)
        with pytest.raises(IllegalStateError):
            consumer.acknowledge(first[0], AcknowledgeType.ACCEPT)  # settled already
        results = await consumer.commit_sync()
        assert results == {(topic, 0): None}

        def accept(records: list[ConsumerRecord]) -> None:
            for record in records:
                consumer.acknowledge(record, AcknowledgeType.ACCEPT)

        again = await poll_until(consumer, lambda got: len(got) >= 2, 30, on_poll=accept)
        assert sorted((r.value, r.delivery_count) for r in again) == [(b"r1", 2), (b"r2", 2)]
        assert await consumer.commit_sync() == {(topic, 0): None}
        assert await poll_until(consumer, bool, 3) == [], "an accepted or rejected record came back"
    assert lags(broker, group) == {(topic, 0): 0}


async def test_records_of_a_consumer_closed_without_acknowledging_go_to_another(
    broker: RunningBroker,
) -> None:
    topic, group = "kc-share-close", "kc-share-close-group"
    broker.create_topic(topic, 1)
    set_group_config(broker, group, share_auto_offset_reset="earliest")
    values = [f"c{i}".encode() for i in range(20)]
    produce_values(broker, topic, values)
    # The first consumer's client (and its connection) stays open: its close alone must
    # give the records back, at once (a lock expiring takes 30 s, past the deadline).
    async with client_for(
        broker, group, **{"share.acknowledgement.mode": "explicit"}
    ) as first_client:
        first = ShareConsumer.from_config(first_client)
        first.subscribe([topic])
        held = await poll_until(first, lambda got: len(got) >= 20)
        assert len(held) == 20
        await first.close()  # nothing acknowledged
        async with share_consumer(broker, group) as second:
            second.subscribe([topic])
            got = await poll_until(second, lambda got: len(got) >= 20, 20)
    assert sorted(r.value or b"" for r in got) == sorted(values)
    assert {r.delivery_count for r in got} == {2}


async def test_implicit_mode_close_accepts_the_last_poll(broker: RunningBroker) -> None:
    topic, group = "kc-share-implicit", "kc-share-implicit-group"
    broker.create_topic(topic, 1)
    set_group_config(broker, group, share_auto_offset_reset="earliest")
    produce_values(broker, topic, [f"a{i}".encode() for i in range(10)])
    async with share_consumer(broker, group) as consumer:
        with pytest.raises(IllegalStateError):
            await consumer.poll(timeout_ms=0)  # not subscribed
        consumer.subscribe([topic])
        assert len(await poll_until(consumer, lambda got: len(got) >= 10)) == 10
    assert lags(broker, group) == {(topic, 0): 0}
    async with share_consumer(broker, group) as again:
        again.subscribe([topic])
        assert await poll_until(again, bool, 3) == [], "an accepted record came back"


async def test_a_kplane_and_a_confluent_share_consumer_split_the_records(
    broker: RunningBroker,
) -> None:
    topic, group = "kc-share-interop", "kc-share-interop-group"
    broker.create_topic(topic, 2)
    set_group_config(broker, group, share_auto_offset_reset="earliest")
    values = [f"i{i}".encode() for i in range(1000)]
    theirs: list[bytes] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def run_confluent() -> None:
        try:
            with CkShareConsumer(share_config(broker, group, **{"client.id": "ck"})) as c:
                c.subscribe([topic])
                while not stop.is_set():
                    for msg in c.poll(0.2) or []:
                        assert msg.error() is None, msg.error()
                        theirs.append(msg.value() or b"")
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run_confluent, daemon=True)
    thread.start()
    ours: list[ConsumerRecord] = []
    try:
        async with share_consumer(broker, group, **{"client.id": "kc"}) as consumer:
            consumer.subscribe([topic])

            async def consume() -> None:
                while not stop.is_set():
                    ours.extend(await consumer.poll(timeout_ms=200))

            task = asyncio.create_task(consume())
            try:
                await members_assigned(broker, group, 2)
                for chunk in range(0, 1000, 200):
                    await asyncio.to_thread(
                        produce_values, broker, topic, values[chunk : chunk + 200]
                    )
                deadline = time.monotonic() + 90
                while len(ours) + len(theirs) < 1000 and time.monotonic() < deadline:
                    assert not errors, errors
                    assert not task.done(), task.exception()
                    await asyncio.sleep(0.1)
                await asyncio.sleep(1.5)
            finally:
                stop.set()
                await task
    finally:
        stop.set()
        await asyncio.to_thread(thread.join, 30)
    assert not errors, errors
    everything: list[Any] = [r.value or b"" for r in ours] + theirs
    assert sorted(everything) == sorted(values), "every record exactly once"
    assert ours and theirs, "both consumers received records"
    assert lags(broker, group) == {(topic, 0): 0, (topic, 1): 0}


async def test_a_lost_share_session_is_opened_again_and_every_record_is_read(
    broker: RunningBroker,
) -> None:
    topic, group = "kc-share-lost", "kc-share-lost-group"
    broker.create_topic(topic, 1)
    set_group_config(broker, group, share_auto_offset_reset="earliest")
    values = [f"l{i}".encode() for i in range(300)]
    seen: set[bytes | None] = set()

    def read(count: int) -> Callable[[list[ConsumerRecord]], bool]:
        return lambda got: len(seen | {r.value for r in got}) >= count

    async with share_consumer(broker, group, **{"max.poll.records": "50"}) as consumer:
        consumer.subscribe([topic])
        await asyncio.to_thread(produce_values, broker, topic, values[:100])
        seen.update(r.value for r in await poll_until(consumer, read(100)))
        # the broker forgets the session: the next ShareFetch is refused, the consumer opens
        # a new one at epoch 0
        broker.push_request_errors("SHARE_FETCH", "SHARE_SESSION_NOT_FOUND")
        await asyncio.to_thread(produce_values, broker, topic, values[100:200])
        seen.update(r.value for r in await poll_until(consumer, read(200)))
        assert broker.injected_error_count("SHARE_FETCH") == 0
        # the connection goes, and the session and the records it held with it
        await asyncio.to_thread(broker.drop_connections)
        await asyncio.to_thread(produce_values, broker, topic, values[200:])
        seen.update(r.value for r in await poll_until(consumer, read(300)))
    assert seen == set(values)
    assert lags(broker, group) == {(topic, 0): 0}, "every record accepted in the end"
