"""Consumer groups with real client libraries: sharing partitions, rebalancing, committed offsets,
and the group admin APIs.

Each library runs its members the way applications do: confluent-kafka and kafka-python members
in their own threads (neither consumer is thread-safe, so each is created, polled and closed in its
thread), aiokafka members as asyncio tasks. Every wait is on a condition with a deadline.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as AioTopicPartition
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
)
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, KafkaConsumer
from kafka import TopicPartition as KpTopicPartition

from kplane.testing.plugin import RunningBroker

PARTITIONS = 6
PER_PARTITION = 10
DEADLINE_S = 60.0
SESSION_TIMEOUT_MS = 6000  # the broker's group.min.session.timeout.ms
HEARTBEAT_MS = 500
MAX_POLL_MS = 30_000  # the rebalance timeout of these clients


# helpers ------------------------------------------------------------------------------------
def wait_until(condition: Callable[[], bool], what: Callable[[], str], timeout: float = DEADLINE_S):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting: {what()}"
        time.sleep(0.05)


def produce_values(broker: RunningBroker, topic: str) -> dict[int, list[bytes]]:
    """PER_PARTITION records to each partition; values name their partition and index."""
    producer = Producer({"bootstrap.servers": broker.bootstrap(), "linger.ms": 5})
    produced: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for i in range(PER_PARTITION):
        for p in range(PARTITIONS):
            value = f"{p}:{i}".encode()
            producer.produce(topic, value=value, partition=p)
            produced[p].append(value)
    assert producer.flush(30) == 0
    return produced


def is_split(assignments: Mapping[Any, Iterable[int]], members: int) -> bool:
    """True when ``members`` members share all partitions evenly with no overlap."""
    if len(assignments) != members:
        return False
    sets = [set(a) for a in assignments.values()]
    share = PARTITIONS // members
    return (
        all(len(s) == share for s in sets)
        and set().union(*sets) == set(range(PARTITIONS))
        and sum(len(s) for s in sets) == PARTITIONS
    )


class ThreadMember:
    """One group member polled in its own thread; publishes its current assignment."""

    def __init__(self, name: str, poll: Callable[[Any], None], make: Callable[[], Any]) -> None:
        self.name = name
        self._make = make
        self._poll = poll
        self.stop = threading.Event()
        self.assignment: frozenset[int] = frozenset()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=f"member-{name}", daemon=True)

    def _run(self) -> None:
        consumer = None
        try:
            consumer = self._make()
            while not self.stop.is_set():
                self._poll(consumer)
                self.assignment = frozenset(tp.partition for tp in consumer.assignment())
        except BaseException as exc:
            self.error = exc
        finally:
            if consumer is not None:
                consumer.close()  # leaves the group (LeaveGroup)
            self.assignment = frozenset()

    def start(self) -> ThreadMember:
        self.thread.start()
        return self

    def leave(self, timeout: float = 30.0) -> None:
        self.stop.set()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"member {self.name} did not close"
        assert self.error is None, f"member {self.name} failed: {self.error!r}"


def _assignments(members: Iterable[ThreadMember]) -> dict[str, frozenset[int]]:
    out = {}
    for m in members:
        assert m.error is None, f"member {m.name} failed: {m.error!r}"
        out[m.name] = m.assignment
    return out


def member_client_ids(broker: RunningBroker, group: str) -> list[str]:
    """client.id of each member the coordinator lists (DescribeGroups)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap()})
    described = admin.describe_consumer_groups([group], request_timeout=10)[group].result()
    return sorted(m.client_id for m in described.members)


def stop_members(members: list[ThreadMember]) -> None:
    """Ask every member to stop, then wait for each thread to close its consumer."""
    for m in members:
        m.stop.set()
    for m in members:
        m.thread.join(30)


def check_three_then_two(
    broker: RunningBroker,
    topic: str,
    group: str,
    member: Callable[[RunningBroker, str, str, str], ThreadMember],
    prefix: str,
) -> None:
    """Three members made by ``member`` share the six partitions of a new ``topic`` 2/2/2;
    after one leaves, two share them 3/3."""
    broker.create_topic(topic, PARTITIONS)
    members = [member(broker, topic, group, f"{prefix}-{i}").start() for i in range(3)]
    try:
        wait_until(
            lambda: is_split(_assignments(members), 3),
            lambda: f"3-way split, have {_assignments(members)}",
        )
        first = _assignments(members)
        assert all(len(a) == 2 for a in first.values())
        assert member_client_ids(broker, group) == sorted(m.name for m in members)
        members[0].leave()
        # close() returns once LeaveGroup was answered: the member is gone at once, long before
        # its session could have expired.
        assert member_client_ids(broker, group) == sorted(m.name for m in members[1:])
        remaining = members[1:]
        wait_until(
            lambda: is_split(_assignments(remaining), 2),
            lambda: f"2-way split, have {_assignments(remaining)}",
        )
        assert set().union(*_assignments(remaining).values()) == set(range(PARTITIONS))
    finally:
        stop_members(members)


# confluent-kafka ----------------------------------------------------------------------------
def confluent_config(broker: RunningBroker, group: str, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": broker.bootstrap(),
        "group.id": group,
        "session.timeout.ms": SESSION_TIMEOUT_MS,
        "heartbeat.interval.ms": HEARTBEAT_MS,
        "max.poll.interval.ms": MAX_POLL_MS,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        **extra,
    }


def confluent_member(
    broker: RunningBroker,
    topic: str,
    group: str,
    name: str,
    *,
    static: bool = False,
    on_revoke: Callable[[Consumer, list[Any]], None] | None = None,
) -> ThreadMember:
    """A confluent-kafka member with client.id ``name``; ``static`` also makes ``name`` its
    group.instance.id (KIP-345)."""
    extra = {"client.id": name, **({"group.instance.id": name} if static else {})}
    callbacks = {} if on_revoke is None else {"on_revoke": on_revoke}

    def make() -> Consumer:
        consumer = Consumer(confluent_config(broker, group, **extra))
        consumer.subscribe([topic], **callbacks)
        return consumer

    def poll(consumer: Consumer) -> None:
        msg = consumer.poll(0.1)
        if msg is not None and msg.error() is not None:
            raise KafkaException(msg.error())

    return ThreadMember(name, poll, make)


def test_confluent_three_members_share_six_partitions_and_rebalance(broker: RunningBroker):
    check_three_then_two(broker, "cg-confluent", "group-confluent", confluent_member, "ck")


def consume_confluent(consumer: Consumer, count: int | None, expected_total: int) -> list[Any]:
    """Messages as (partition, offset, value): ``count`` of them, or all remaining ones."""
    got: list[tuple[int, int, bytes]] = []
    deadline = time.monotonic() + DEADLINE_S
    while (count is None or len(got) < count) and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        if msg.error() is not None:
            raise KafkaException(msg.error())
        got.append((msg.partition(), msg.offset(), msg.value()))
        if count is None and len(got) >= expected_total:
            # Everything expected arrived; one more quiet poll shows nothing extra follows.
            extra = consumer.poll(1.0)
            if extra is not None and extra.error() is None:
                got.append((extra.partition(), extra.offset(), extra.value()))
            break
    return got


def test_confluent_committed_offsets_survive_member_restart(broker: RunningBroker) -> None:
    topic, group = "cg-confluent-commit", "group-confluent-commit"
    broker.create_topic(topic, PARTITIONS)
    produced = produce_values(broker, topic)
    total = PARTITIONS * PER_PARTITION
    half = total // 2

    first = Consumer(confluent_config(broker, group))
    first.subscribe([topic])
    try:
        before = consume_confluent(first, half, total)
        assert len(before) == half
        first.commit(asynchronous=False)
        committed = {
            tp.partition: tp.offset
            for tp in first.committed(
                [CkTopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10
            )
        }
    finally:
        first.close()
    # The commit is what was consumed: the next offset of each partition's last record.
    for p in range(PARTITIONS):
        consumed = [o for q, o, _ in before if q == p]
        assert committed[p] == (max(consumed) + 1 if consumed else -1001), (p, committed)
    # The admin API (OffsetFetch for the whole group) reads the same commits.
    admin = AdminClient({"bootstrap.servers": broker.bootstrap()})
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    by_admin = {tp.partition: tp.offset for tp in listed.result().topic_partitions}
    assert by_admin == {p: o for p, o in committed.items() if o >= 0}

    second = Consumer(confluent_config(broker, group))
    second.subscribe([topic])
    try:
        after = consume_confluent(second, None, total - half)
    finally:
        second.close()
    # The new member resumed right after the commit: nothing twice, nothing lost.
    for p in range(PARTITIONS):
        offsets = [o for q, o, _ in after if q == p]
        if offsets:
            assert offsets[0] == max(committed[p], 0), (p, offsets, committed[p])
    seen = [v for _, _, v in before] + [v for _, _, v in after]
    assert len(seen) == len(set(seen)) == total, "records consumed twice or lost"
    assert sorted(seen) == sorted(v for vs in produced.values() for v in vs)


def test_confluent_static_member_restart_keeps_its_partitions_without_rebalance(
    broker: RunningBroker,
) -> None:
    """KIP-345: a member with group.instance.id that closes and comes back gets its old
    partitions, and the other members never have theirs revoked."""
    topic, group = "cg-static", "group-static"
    broker.create_topic(topic, PARTITIONS)
    revokes: dict[str, int] = {}
    lock = threading.Lock()

    def static_member(name: str) -> ThreadMember:
        def on_revoke(_consumer: Consumer, _partitions: list[Any]) -> None:
            with lock:
                revokes[name] = revokes.get(name, 0) + 1

        return confluent_member(broker, topic, group, name, static=True, on_revoke=on_revoke)

    members = [static_member(f"static-{i}").start() for i in range(3)]
    try:
        wait_until(
            lambda: is_split(_assignments(members), 3),
            lambda: f"3-way split, have {_assignments(members)}",
        )
        before = _assignments(members)
        with lock:
            others_revoked = {n: revokes.get(n, 0) for n in ("static-1", "static-2")}
        members[0].leave()  # a static member's close sends no LeaveGroup
        members[0] = static_member("static-0").start()
        wait_until(
            lambda: _assignments(members) == before,
            lambda: f"the old assignment {before}, have {_assignments(members)}",
        )
        with lock:
            assert {n: revokes.get(n, 0) for n in others_revoked} == others_revoked
    finally:
        stop_members(members)


_KILLABLE_MEMBER = """
import json, sys
from confluent_kafka import Consumer
bootstrap, topic, group, session_ms, heartbeat_ms = sys.argv[1:6]
consumer = Consumer({
    "bootstrap.servers": bootstrap, "group.id": group, "client.id": "doomed",
    "session.timeout.ms": int(session_ms), "heartbeat.interval.ms": int(heartbeat_ms),
    "enable.auto.commit": False,
})
consumer.subscribe([topic])
last = None
while True:
    consumer.poll(0.1)
    now = sorted(tp.partition for tp in consumer.assignment())
    if now != last:
        print(json.dumps(now), flush=True)
        last = now
"""


class ProcessMember:
    """A confluent-kafka member in a child process, so that it can be killed (SIGKILL)."""

    def __init__(self, broker: RunningBroker, topic: str, group: str) -> None:
        self.name = "doomed"
        self.error: BaseException | None = None
        self.assignment: frozenset[int] = frozenset()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _KILLABLE_MEMBER,
                broker.bootstrap(),
                topic,
                group,
                str(SESSION_TIMEOUT_MS),
                str(HEARTBEAT_MS),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.assignment = frozenset(json.loads(line))

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)
        self.reader.join(timeout=10)


def test_member_killed_without_leaving_is_expired_and_its_partitions_reassigned(
    broker: RunningBroker,
) -> None:
    """SIGKILL sends no LeaveGroup: the coordinator must notice the missing heartbeats after
    the session timeout and hand the dead member's partitions to the others."""
    topic, group = "cg-killed", "group-killed"
    broker.create_topic(topic, PARTITIONS)
    doomed = ProcessMember(broker, topic, group)
    members = [confluent_member(broker, topic, group, f"ck-live-{i}").start() for i in range(2)]
    everyone: list[Any] = [doomed, *members]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap()})
    try:
        wait_until(
            lambda: is_split(_assignments(everyone), 3),
            lambda: f"3-way split, have {_assignments(everyone)}",
        )
        doomed.kill()
        wait_until(
            lambda: is_split(_assignments(members), 2),
            lambda: f"2-way split, have {_assignments(members)}",
        )
        described = admin.describe_consumer_groups([group])[group].result()
        assert described.state == ConsumerGroupState.STABLE
        assert sorted(m.client_id for m in described.members) == ["ck-live-0", "ck-live-1"]
    finally:
        doomed.kill()
        stop_members(members)


# kafka-python -------------------------------------------------------------------------------
def kafka_python_consumer(
    broker: RunningBroker, topic: str, group: str, name: str = "kafka-python"
) -> KafkaConsumer:
    """A subscribed kafka-python consumer that knew the topic's partitions before joining.

    kafka-python 3.0.12 has a client-side bug: when a rejoin is triggered by a metadata change
    (the leader first joined before it knew the topic's partitions) and poll() returns before the
    held JoinGroup completes, the leader's own assignment clears need_rejoin(), the finished join
    is never consumed, heartbeats stay disabled and the broker rightly expires the member after
    session.timeout.ms. Learning the partitions first removes that trigger; polls also use a
    timeout longer than a rebalance round trip.
    """
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap(),
        group_id=group,
        client_id=name,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
        max_poll_interval_ms=MAX_POLL_MS,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    assert consumer.partitions_for_topic(topic) == set(range(PARTITIONS))
    consumer.subscribe([topic])
    return consumer


def kafka_python_member(broker: RunningBroker, topic: str, group: str, name: str) -> ThreadMember:
    def poll(consumer: KafkaConsumer) -> None:
        consumer.poll(timeout_ms=1000)

    return ThreadMember(name, poll, lambda: kafka_python_consumer(broker, topic, group, name))


def test_kafka_python_three_members_share_six_partitions_and_rebalance(broker: RunningBroker):
    check_three_then_two(broker, "cg-kafka-python", "group-kafka-python", kafka_python_member, "kp")


def test_kafka_python_committed_offsets_survive_member_restart(broker: RunningBroker) -> None:
    topic, group = "cg-kafka-python-commit", "group-kafka-python-commit"
    broker.create_topic(topic, PARTITIONS)
    produce_values(broker, topic)
    total = PARTITIONS * PER_PARTITION
    half = total // 2

    def take(c: KafkaConsumer, count: int) -> list[tuple[int, int, bytes]]:
        got: list[tuple[int, int, bytes]] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < count and time.monotonic() < deadline:
            for tp_records in c.poll(timeout_ms=1000, max_records=count - len(got)).values():
                got += [(r.partition, r.offset, r.value) for r in tp_records]
        return got

    first = kafka_python_consumer(broker, topic, group)
    try:
        before = take(first, half)
        assert len(before) == half
        first.commit()
        committed = {p: first.committed(KpTopicPartition(topic, p)) for p in range(PARTITIONS)}
    finally:
        first.close()
    for p in range(PARTITIONS):
        consumed = [o for q, o, _ in before if q == p]
        # kafka-python commits the position of every partition it has one for: 0 if untouched.
        expected = (max(consumed) + 1,) if consumed else (None, 0)
        assert committed[p] in expected, (p, committed)
    second = kafka_python_consumer(broker, topic, group)
    try:
        after = take(second, total - half)
        extra = second.poll(timeout_ms=1000)
    finally:
        second.close()
    assert not any(extra.values()), f"records after the end: {extra}"
    for p in range(PARTITIONS):
        offsets = [o for q, o, _ in after if q == p]
        if offsets:
            assert offsets[0] == (committed[p] or 0), (p, offsets, committed[p])
    seen = [v for _, _, v in before + after]
    assert len(seen) == len(set(seen)) == total, "records consumed twice or lost"


# aiokafka -----------------------------------------------------------------------------------
def aio_consumer(broker: RunningBroker, topic: str, group: str, name: str) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        topic,
        bootstrap_servers=broker.bootstrap(),
        group_id=group,
        client_id=name,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
        max_poll_interval_ms=MAX_POLL_MS,
        rebalance_timeout_ms=MAX_POLL_MS,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )


async def wait_until_async(
    condition: Callable[[], bool], what: Callable[[], str], timeout: float = DEADLINE_S
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting: {what()}"
        await asyncio.sleep(0.05)


async def test_aiokafka_three_members_share_six_partitions_and_rebalance(
    broker: RunningBroker,
) -> None:
    topic, group = "cg-aiokafka", "group-aiokafka"
    broker.create_topic(topic, PARTITIONS)
    consumers = [aio_consumer(broker, topic, group, f"aio-{i}") for i in range(3)]
    stopped: set[int] = set()

    async def fetch_loop(c: AIOKafkaConsumer) -> None:
        while True:
            await c.getmany(timeout_ms=100)

    tasks: list[asyncio.Task[None]] = []
    try:
        for c in consumers:
            await c.start()
            tasks.append(asyncio.create_task(fetch_loop(c)))

        def split(indexes: list[int]) -> dict[int, set[int]]:
            for t in tasks:
                if t.done() and not t.cancelled() and t.exception() is not None:
                    raise t.exception()  # type: ignore[misc]
            return {i: {tp.partition for tp in consumers[i].assignment()} for i in indexes}

        await wait_until_async(
            lambda: is_split(split([0, 1, 2]), 3), lambda: f"3-way split, have {split([0, 1, 2])}"
        )
        ids = await asyncio.to_thread(member_client_ids, broker, group)
        assert ids == ["aio-0", "aio-1", "aio-2"]
        tasks[0].cancel()
        await consumers[0].stop()  # leaves the group: LeaveGroup answered before stop returns
        stopped.add(0)
        assert await asyncio.to_thread(member_client_ids, broker, group) == ["aio-1", "aio-2"]
        await wait_until_async(
            lambda: is_split(split([1, 2]), 2), lambda: f"2-way split, have {split([1, 2])}"
        )
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for i, c in enumerate(consumers):
            if i not in stopped:
                await c.stop()


async def test_aiokafka_committed_offsets_survive_member_restart(broker: RunningBroker) -> None:
    topic, group = "cg-aiokafka-commit", "group-aiokafka-commit"
    broker.create_topic(topic, PARTITIONS)
    produce_values(broker, topic)
    total = PARTITIONS * PER_PARTITION
    half = total // 2

    async def take(c: AIOKafkaConsumer, count: int) -> list[tuple[int, int, bytes]]:
        got: list[tuple[int, int, bytes]] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < count and time.monotonic() < deadline:
            batches = await c.getmany(timeout_ms=200, max_records=count - len(got))
            for records in batches.values():
                got += [(r.partition, r.offset, r.value) for r in records]
        return got

    first = aio_consumer(broker, topic, group, "aio-first")
    await first.start()
    try:
        before = await take(first, half)
        assert len(before) == half
        await first.commit()
        committed = {
            p: await first.committed(AioTopicPartition(topic, p)) for p in range(PARTITIONS)
        }
    finally:
        await first.stop()
    for p in range(PARTITIONS):
        consumed = [o for q, o, _ in before if q == p]
        # aiokafka commits every assigned partition's position: 0 for an untouched one.
        assert committed[p] == (max(consumed) + 1 if consumed else 0), (p, committed)

    second = aio_consumer(broker, topic, group, "aio-second")
    await second.start()
    try:
        after = await take(second, total - half)
        extra = await second.getmany(timeout_ms=1000)
    finally:
        await second.stop()
    assert not any(extra.values()), f"records after the end: {extra}"
    for p in range(PARTITIONS):
        offsets = [o for q, o, _ in after if q == p]
        if offsets:
            assert offsets[0] == (committed[p] or 0), (p, offsets, committed[p])
    seen = [v for _, _, v in before + after]
    assert len(seen) == len(set(seen)) == total, "records consumed twice or lost"


# group administration -----------------------------------------------------------------------
def test_list_describe_and_delete_groups(broker: RunningBroker) -> None:
    topic, group = "cg-admin", "group-admin"
    broker.create_topic(topic, PARTITIONS)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap()})
    members = [confluent_member(broker, topic, group, f"adm-{i}").start() for i in range(3)]
    try:
        wait_until(
            lambda: is_split(_assignments(members), 3),
            lambda: f"3-way split, have {_assignments(members)}",
        )

        listed = admin.list_consumer_groups(request_timeout=10).result()
        assert not listed.errors, listed.errors
        by_id = {g.group_id: g for g in listed.valid}
        assert group in by_id, by_id
        assert by_id[group].state == ConsumerGroupState.STABLE
        assert not by_id[group].is_simple_consumer_group

        def describe() -> Any:
            return admin.describe_consumer_groups([group], request_timeout=10)[group].result()

        wait_until(
            lambda: describe().state == ConsumerGroupState.STABLE and len(describe().members) == 3,
            lambda: f"stable group of 3, have {describe()}",
        )
        described = describe()
        assert described.group_id == group
        assert described.partition_assignor in ("range", "roundrobin")
        assert {m.client_id for m in described.members} == {"adm-0", "adm-1", "adm-2"}
        assert all(m.host for m in described.members)
        owned = [tp.partition for m in described.members for tp in m.assignment.topic_partitions]
        assert sorted(owned) == list(range(PARTITIONS))
        assert all(
            tp.topic == topic for m in described.members for tp in m.assignment.topic_partitions
        )
        assert described.coordinator.id == 0

        # The states filter of ListGroups v4+.
        stable = admin.list_consumer_groups(states={ConsumerGroupState.STABLE}).result()
        assert group in {g.group_id for g in stable.valid}
        empty = admin.list_consumer_groups(states={ConsumerGroupState.EMPTY}).result()
        assert group not in {g.group_id for g in empty.valid}

        # kafka-python's admin client sees the same group through its own API versions.
        kp_admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap())
        try:
            kp_listed = {g["group_id"]: g for g in kp_admin.list_groups()}
            kp_described = kp_admin.describe_groups([group])[group]
        finally:
            kp_admin.close()
        assert kp_listed[group]["protocol_type"] == "consumer"
        assert kp_listed[group]["group_state"] == "Stable"
        assert kp_described["group_state"] == "Stable"
        assert len(kp_described["members"]) == 3
        kp_owned = sorted(
            p
            for m in kp_described["members"]
            for a in m["member_assignment"]["assigned_partitions"]
            for p in a["partitions"]
        )
        assert kp_owned == list(range(PARTITIONS))

        # A group with members cannot be deleted.
        future = admin.delete_consumer_groups([group], request_timeout=10)[group]
        with pytest.raises(KafkaException) as refused:
            future.result()
        assert refused.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
        assert group in {g.group_id for g in admin.list_consumer_groups().result().valid}
    finally:
        stop_members(members)
    for m in members:
        assert m.error is None, m.error

    wait_until(
        lambda: describe().state == ConsumerGroupState.EMPTY,
        lambda: f"empty group, have {describe()}",
    )
    assert describe().members == []
    future = admin.delete_consumer_groups([group], request_timeout=10)[group]
    assert future.result() is None
    assert group not in {g.group_id for g in admin.list_consumer_groups().result().valid}
    # Deleting it again: the group is gone.
    future = admin.delete_consumer_groups([group], request_timeout=10)[group]
    with pytest.raises(KafkaException) as gone:
        future.result()
    assert gone.value.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND


def test_delete_group_removes_its_committed_offsets(broker: RunningBroker) -> None:
    """After DeleteGroups a new member of the same group id starts from auto.offset.reset."""
    topic, group = "cg-delete-offsets", "group-delete-offsets"
    broker.create_topic(topic, PARTITIONS)
    produce_values(broker, topic)
    total = PARTITIONS * PER_PARTITION
    first = Consumer(confluent_config(broker, group))
    first.subscribe([topic])
    try:
        assert len(consume_confluent(first, total, total)) == total
        first.commit(asynchronous=False)
    finally:
        first.close()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap()})
    wait_until(
        lambda: (
            admin.describe_consumer_groups([group])[group].result().state
            == ConsumerGroupState.EMPTY
        ),
        lambda: "group not empty",
    )
    assert admin.delete_consumer_groups([group], request_timeout=10)[group].result() is None
    second = Consumer(confluent_config(broker, group))
    second.subscribe([topic])
    try:
        again = consume_confluent(second, total, total)
    finally:
        second.close()
    assert len(again) == total, "a new member should read everything again"
