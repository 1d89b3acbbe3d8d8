"""KIP-848 consumer groups with confluent-kafka (librdkafka 2.16, ``group.protocol=consumer``):
the broker computes the assignment and members reconcile towards it through
ConsumerGroupHeartbeat. Each member is polled in its own thread, as applications do; every
wait is on a condition with a deadline. librdkafka's warnings and errors are collected:
a protocol error from the broker would show there.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    KafkaError,
    KafkaException,
    Producer,
)
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.types import GroupId
from kio.static.primitive import i8

from kplane.client.consumer import Consumer as KplaneConsumer
from kplane.client.kafka_client import KafkaClient
from kplane.common.network.config import ClientConfig
from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode
from kplane.testing.plugin import KafkaCluster, RunningBroker, free_port

from .helpers import wait_until
from .test_kafka_cli import ok

PARTITIONS = 6
HEARTBEAT_MS = 500

# Short intervals so a rebalance takes a few hundred milliseconds, not Kafka's seconds.
CONSUMER_PROTOCOL = {
    "group.consumer.heartbeat.interval.ms": str(HEARTBEAT_MS),
    "group.consumer.min.heartbeat.interval.ms": str(HEARTBEAT_MS),
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.min.session.timeout.ms": "6000",
}


class LibrdkafkaLog(logging.Handler):
    """librdkafka's log lines at warning and above (its own and the broker's errors), but
    for a connection refused while a broker restarts, and, while ``restarting``, the
    connections the stopping broker closed."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []
        self.restarting = False

    def emit(self, record: logging.LogRecord) -> None:
        line = record.getMessage()
        if "Connection refused" in line:
            return
        if self.restarting and "Disconnected" in line:
            return
        self.lines.append(line)


@pytest.fixture
def rdkafka_log() -> Iterator[LibrdkafkaLog]:
    handler = LibrdkafkaLog()
    logger = logging.getLogger("test-librdkafka")
    logger.addHandler(handler)
    logger.propagate = False
    yield handler
    logger.removeHandler(handler)
    assert handler.lines == [], f"librdkafka complained: {handler.lines}"


@pytest.fixture
def kip848_broker(broker_factory: Callable[..., RunningBroker]) -> RunningBroker:
    return broker_factory(CONSUMER_PROTOCOL)


def produce(broker: RunningBroker, topic: str, per_partition: int, start: int = 0) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap(), "linger.ms": 5})
    for i in range(start, start + per_partition):
        for p in range(PARTITIONS):
            producer.produce(topic, value=f"{p}:{i}".encode(), partition=p)
    assert producer.flush(30) == 0


def consumer_config(broker: RunningBroker, group: str, name: str, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": broker.bootstrap(),
        "group.id": group,
        "group.protocol": "consumer",
        "client.id": name,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "logger": logging.getLogger("test-librdkafka"),
        **extra,
    }


def commit(consumer: Consumer, attempts: int = 50) -> None:
    """Commit the consumer's positions, as an application does: again after
    STALE_MEMBER_EPOCH, which a heartbeat that moved the member's epoch while the commit was
    on its way brings (librdkafka hands it to the caller and heartbeats at once)."""
    for attempt in range(attempts):
        try:
            consumer.commit(asynchronous=False)
            return
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.STALE_MEMBER_EPOCH or attempt == attempts - 1:
                raise
            time.sleep(0.02)


class Member:
    """A consumer-protocol member polled in its own thread. It records every record it
    reads as (topic, partition, offset), commits after each batch and, on revocation, before
    the partitions go (so the next owner starts where it stopped)."""

    def __init__(self, config: dict[str, Any], topics: list[str], seen: list[Any]) -> None:
        self.config = config
        self.topics = topics
        self.seen = seen
        self.stop = threading.Event()
        self.assignment: frozenset[tuple[str, int]] = frozenset()
        self.history: list[frozenset[tuple[str, int]]] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        consumer = None
        try:
            consumer = Consumer(self.config)

            def on_revoke(c: Consumer, partitions: list[CkTopicPartition]) -> None:
                try:
                    commit(c)
                except KafkaException as exc:
                    if exc.args[0].code() != KafkaError._NO_OFFSET:  # nothing read yet
                        raise

            consumer.subscribe(self.topics, on_revoke=on_revoke)
            while not self.stop.is_set():
                batch = consumer.consume(100, 0.1)
                for msg in batch:
                    assert msg.error() is None, msg.error()
                    self.seen.append((msg.topic(), msg.partition(), msg.offset()))
                if batch:
                    commit(consumer)
                now = frozenset((tp.topic, tp.partition) for tp in consumer.assignment())
                if now != self.assignment:
                    self.history.append(now)
                self.assignment = now
        except BaseException as exc:
            self.error = exc
        finally:
            if consumer is not None:
                consumer.close()
            self.assignment = frozenset()

    def start(self) -> Member:
        self.thread.start()
        return self

    def leave(self) -> None:
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive()
        assert self.error is None, repr(self.error)


def partitions_of(members: list[Member]) -> list[int]:
    for m in members:
        assert m.error is None, repr(m.error)
    return sorted(len(m.assignment) for m in members)


def describe(broker: RunningBroker, group: str) -> Any:
    """ConsumerGroupDescribe on the wire: the coordinator's own view (epochs included)."""
    with broker.wire() as wire:
        response = wire.request(
            ConsumerGroupDescribeRequest(
                group_ids=(GroupId(group),), include_authorized_operations=False
            )
        )
    return response.groups[0]


def test_three_members_share_then_two_take_over_without_rereading(
    kip848_broker: RunningBroker, rdkafka_log: LibrdkafkaLog
) -> None:
    broker, topic, group = kip848_broker, "kip848-share", "g-share"
    broker.create_topic(topic, PARTITIONS)
    produce(broker, topic, 1000)
    seen: list[Any] = []
    members = [
        Member(consumer_config(broker, group, f"m{i}"), [topic], seen).start() for i in range(3)
    ]
    try:
        wait_until(lambda: partitions_of(members) == [2, 2, 2], 60, "a 2/2/2 split")
        wait_until(lambda: len(seen) >= 6000, 60, "6000 records read")
        owned = [m.assignment for m in members]
        assert frozenset().union(*owned) == {(topic, p) for p in range(PARTITIONS)}
        assert len(set(seen)) == len(seen) == 6000, "a record was read twice"
        described = describe(broker, group)
        assert described.group_state == "Stable"
        assert len(described.members) == 3
        assert {m.member_epoch for m in described.members} == {described.assignment_epoch}

        members[0].leave()
        produce(broker, topic, 500, start=1000)
        wait_until(lambda: partitions_of(members[1:]) == [3, 3], 60, "a 3/3 split")
        wait_until(lambda: len(seen) >= 9000, 60, "9000 records read")
        assert len(set(seen)) == len(seen) == 9000, "a committed record was read again"
        assert len(describe(broker, group).members) == 2
    finally:
        for m in members:
            m.stop.set()
        for m in members:
            m.thread.join(30)


def test_regex_subscription_picks_up_a_topic_created_later(
    kip848_broker: RunningBroker, rdkafka_log: LibrdkafkaLog
) -> None:
    broker = kip848_broker
    broker.create_topic("rx-first", PARTITIONS)
    seen: list[Any] = []
    member = Member(consumer_config(broker, "g-regex", "rx"), ["^rx-.*"], seen).start()
    try:
        produce(broker, "rx-first", 10)
        wait_until(lambda: len(seen) >= 60, 60, "rx-first's records")
        broker.create_topic("rx-later", PARTITIONS)
        broker.create_topic("other", PARTITIONS)
        produce(broker, "rx-later", 10)
        wait_until(lambda: len(seen) >= 120, 60, "rx-later's records")
        assert {t for t, _p, _o in seen} == {"rx-first", "rx-later"}
        assert {t for t, _p in member.assignment} == {"rx-first", "rx-later"}
        described = describe(broker, "g-regex")
        # librdkafka sends its regular expressions as one alternation: (^rx-.*)
        assert "^rx-.*" in described.members[0].subscribed_topic_regex
    finally:
        member.leave()


def test_static_member_rejoins_without_a_rebalance(
    kip848_broker: RunningBroker, rdkafka_log: LibrdkafkaLog
) -> None:
    broker, topic, group = kip848_broker, "kip848-static", "g-static"
    broker.create_topic(topic, PARTITIONS)
    seen: list[Any] = []

    def member(name: str) -> Member:
        config = consumer_config(broker, group, name, **{"group.instance.id": name})
        return Member(config, [topic], seen).start()

    first, other = member("static-a"), member("static-b")
    try:
        wait_until(lambda: partitions_of([first, other]) == [3, 3], 60, "a 3/3 split")
        wait_until(lambda: describe(broker, group).group_state == "Stable", 30, "Stable")
        before = describe(broker, group)
        kept, others = first.assignment, other.assignment
        # The member that joined first held all six partitions for a moment: its history
        # counts from the split on.
        split_at = len(other.history)
        first.leave()  # a static member's close leaves with epoch -2: its place is kept
        away = describe(broker, group)
        assert away.group_epoch == before.group_epoch
        assert sorted(m.member_epoch for m in away.members)[0] == -2
        again = member("static-a")
        wait_until(lambda: again.assignment == kept, 60, "the same partitions again")
        wait_until(lambda: describe(broker, group).group_state == "Stable", 30, "Stable")
        after = describe(broker, group)
        assert after.group_epoch == before.group_epoch, "the rejoin rebalanced the group"
        assert other.history[split_at - 1 :] == [others], "the other member's partitions moved"
        again.leave()
    finally:
        for m in (first, other):
            m.stop.set()
            m.thread.join(30)


def test_admin_describes_a_consumer_group_beside_a_classic_one(
    kip848_broker: RunningBroker, rdkafka_log: LibrdkafkaLog
) -> None:
    broker, topic = kip848_broker, "kip848-both"
    broker.create_topic(topic, PARTITIONS)
    produce(broker, topic, 10)
    new_seen: list[Any] = []
    classic_seen: list[Any] = []
    new = Member(consumer_config(broker, "g-new", "new"), [topic], new_seen).start()
    classic_config = consumer_config(broker, "g-classic", "classic")
    classic_config.update({"group.protocol": "classic", "session.timeout.ms": 6000})
    classic = Member(classic_config, [topic], classic_seen).start()
    try:
        wait_until(lambda: len(new_seen) >= 60 and len(classic_seen) >= 60, 60, "both read all")
        admin = AdminClient({"bootstrap.servers": broker.bootstrap()})
        described = admin.describe_consumer_groups(["g-new", "g-classic"], request_timeout=10)
        new_group = described["g-new"].result()
        classic_group = described["g-classic"].result()
        assert new_group.type == ConsumerGroupType.CONSUMER
        assert classic_group.type == ConsumerGroupType.CLASSIC
        (member,) = new_group.members
        assert member.client_id == "new"
        assert sorted(tp.partition for tp in member.assignment.topic_partitions) == list(
            range(PARTITIONS)
        )
        listed = admin.list_consumer_groups(
            types={ConsumerGroupType.CONSUMER}, request_timeout=10
        ).result()
        assert [g.group_id for g in listed.valid] == ["g-new"]
        with broker.wire() as wire:
            (as_classic,) = wire.request(
                DescribeGroupsRequest(
                    groups=(GroupId("g-new"),), include_authorized_operations=False
                )
            ).groups
        assert as_classic.error_code == ErrorCode.group_id_not_found
        assert as_classic.group_state == "Dead"
    finally:
        new.leave()
        classic.leave()


def test_a_classic_group_upgrades_to_the_consumer_protocol_keeping_its_offsets(
    kip848_broker: RunningBroker, rdkafka_log: LibrdkafkaLog
) -> None:
    broker, topic, group = kip848_broker, "kip848-upgrade", "g-upgrade"
    broker.create_topic(topic, PARTITIONS)
    produce(broker, topic, 10)
    classic_seen: list[Any] = []
    config = consumer_config(broker, group, "old")
    config.update({"group.protocol": "classic", "session.timeout.ms": 6000})
    classic = Member(config, [topic], classic_seen).start()
    wait_until(lambda: len(classic_seen) >= 60, 60, "the classic member's reads")
    classic.leave()  # commits, leaves: the classic group is Empty with its offsets
    produce(broker, topic, 5, start=10)
    seen: list[Any] = []
    new = Member(consumer_config(broker, group, "new"), [topic], seen).start()
    try:
        wait_until(lambda: len(seen) >= 30, 60, "the new member's reads")
        assert sorted(o for _t, _p, o in seen) == sorted(list(range(10, 15)) * PARTITIONS)
        assert describe(broker, group).group_state in ("Stable", "Reconciling")
    finally:
        new.leave()


def test_a_live_classic_group_upgrades_and_downgrades_with_its_members_reading(
    kip848_broker: RunningBroker, rdkafka_log: LibrdkafkaLog
) -> None:
    """KIP-848's online migration (group.consumer.migration.policy, bidirectional as in
    Kafka 4): a consumer-protocol member joins a classic group whose member is reading;
    the group becomes a consumer group, the classic member gives up half its partitions
    through JoinGroup/SyncGroup and both read on. When the consumer-protocol member leaves
    the group is classic again and its classic member takes every partition. Every record
    is read once."""
    broker, topic, group = kip848_broker, "kip848-migrate", "g-migrate"
    broker.create_topic(topic, PARTITIONS)
    produce(broker, topic, 10)
    seen: list[Any] = []
    classic_config = consumer_config(broker, group, "old")
    classic_config.update({"group.protocol": "classic", "session.timeout.ms": 6000})
    classic = Member(classic_config, [topic], seen).start()
    new = None
    try:
        wait_until(lambda: len(seen) >= 60, 60, "the classic member's reads")
        new = Member(consumer_config(broker, group, "new"), [topic], seen).start()
        wait_until(lambda: partitions_of([classic, new]) == [3, 3], 60, "a 3/3 split")
        described = describe(broker, group)
        assert described.error_code == ErrorCode.none
        assert sorted(m.member_type for m in described.members) == [0, 1]  # classic, consumer
        produce(broker, topic, 10, start=10)
        wait_until(lambda: len(seen) >= 120, 60, "the records after the upgrade")
        assert {p for _t, p, _o in seen[60:]} == set(range(PARTITIONS))
        new.leave()
        wait_until(lambda: partitions_of([classic]) == [PARTITIONS], 60, "all to the classic one")
        with broker.wire() as wire:
            (as_classic,) = wire.request(
                DescribeGroupsRequest(groups=(GroupId(group),), include_authorized_operations=False)
            ).groups
        assert as_classic.error_code == ErrorCode.none
        assert as_classic.protocol_type == "consumer" and len(as_classic.members) == 1
        produce(broker, topic, 10, start=20)
        wait_until(lambda: len(seen) >= 180, 60, "the records after the downgrade")
        assert len(set(seen)) == len(seen) == 180, "a record was read twice"
    finally:
        for m in (classic, new):
            if m is not None:
                m.stop.set()
                m.thread.join(30)


def test_a_classic_member_joins_a_live_consumer_group(
    kip848_broker: RunningBroker, rdkafka_log: LibrdkafkaLog
) -> None:
    """The other way round: a classic member joins a consumer group whose consumer-protocol
    member is reading; it is given half the partitions through JoinGroup/SyncGroup (the
    group stays a consumer group), and when it leaves the other takes them back. Every
    record is read once."""
    broker, topic, group = kip848_broker, "kip848-mixed", "g-mixed"
    broker.create_topic(topic, PARTITIONS)
    produce(broker, topic, 10)
    seen: list[Any] = []
    new = Member(consumer_config(broker, group, "new"), [topic], seen).start()
    classic = None
    try:
        wait_until(lambda: len(seen) >= 60, 60, "the consumer-protocol member's reads")
        classic_config = consumer_config(broker, group, "old")
        classic_config.update({"group.protocol": "classic", "session.timeout.ms": 6000})
        classic = Member(classic_config, [topic], seen).start()
        wait_until(lambda: partitions_of([classic, new]) == [3, 3], 60, "a 3/3 split")
        assert sorted(m.member_type for m in describe(broker, group).members) == [0, 1]
        produce(broker, topic, 10, start=10)
        wait_until(lambda: len(seen) >= 120, 60, "the records read by both")
        classic.leave()
        wait_until(lambda: partitions_of([new]) == [PARTITIONS], 60, "all back to one member")
        assert [m.member_type for m in describe(broker, group).members] == [1]
        produce(broker, topic, 10, start=20)
        wait_until(lambda: len(seen) >= 180, 60, "the records after the classic member left")
        assert len(set(seen)) == len(seen) == 180, "a record was read twice"
    finally:
        for m in (classic, new):
            if m is not None:
                m.stop.set()
                m.thread.join(30)


def test_no_upgrade_of_a_live_classic_group_when_the_policy_disables_it(
    broker_factory: Callable[..., RunningBroker], rdkafka_log: LibrdkafkaLog
) -> None:
    broker = broker_factory({**CONSUMER_PROTOCOL, "group.consumer.migration.policy": "downgrade"})
    topic, group = "kip848-no-upgrade", "g-no-upgrade"
    broker.create_topic(topic, PARTITIONS)
    produce(broker, topic, 10)
    seen: list[Any] = []
    config = consumer_config(broker, group, "old")
    config.update({"group.protocol": "classic", "session.timeout.ms": 6000})
    classic = Member(config, [topic], seen).start()
    try:
        wait_until(lambda: len(seen) >= 60, 60, "the classic member's reads")
        with broker.wire() as wire:
            joined = wire.request(
                api.make(
                    api.request_class(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0),
                    group_id=group,
                    member_id="m-new",
                    member_epoch=0,
                    rebalance_timeout=datetime.timedelta(seconds=30),
                    subscribed_topic_names=(topic,),
                    topic_partitions=(),
                )
            )
            (as_classic,) = wire.request(
                DescribeGroupsRequest(groups=(GroupId(group),), include_authorized_operations=False)
            ).groups
        assert joined.error_code == ErrorCode.group_id_not_found
        assert as_classic.group_state == "Stable" and len(as_classic.members) == 1
    finally:
        classic.leave()


def test_group_state_survives_a_broker_restart(
    broker_factory: Callable[..., RunningBroker], tmp_path: Any, rdkafka_log: LibrdkafkaLog
) -> None:
    """The member keeps heartbeating through the restart: the restarted broker knows it (same
    member id, epoch and assignment from the stored state) and it goes on from its commits."""
    settings = {
        **CONSUMER_PROTOCOL,
        "listeners": f"PLAINTEXT://127.0.0.1:{free_port()}",
        "log.dirs": str(tmp_path / "restarted"),
        "kplane.log.storage": "file",
    }
    broker = broker_factory(settings)
    topic, group = "kip848-restart", "g-restart"
    broker.create_topic(topic, PARTITIONS)
    produce(broker, topic, 10)
    seen: list[Any] = []
    member = Member(consumer_config(broker, group, "survivor"), [topic], seen).start()
    try:
        wait_until(lambda: len(seen) >= 60, 60, "the first records")
        wait_until(lambda: describe(broker, group).group_state == "Stable", 30, "Stable")
        before = describe(broker, group)
        rdkafka_log.restarting = True
        broker.stop()
        broker = broker_factory(settings)
        after = describe(broker, group)
        assert after.group_epoch == before.group_epoch
        assert [(m.member_id, m.member_epoch) for m in after.members] == [
            (m.member_id, m.member_epoch) for m in before.members
        ]
        wait_until(
            lambda: describe(broker, group).members[0].assignment.topic_partitions[0].topic_name,
            30,
            "the topic's metadata",
        )
        rdkafka_log.restarting = False
        assert describe(broker, group).members[0].assignment == before.members[0].assignment
        produce(broker, topic, 5, start=10)
        wait_until(lambda: len(seen) >= 90, 60, "the records after the restart")
        assert len(set(seen)) == len(seen), "a committed record was read again"
        assert describe(broker, group).group_epoch == before.group_epoch
    finally:
        member.leave()


def test_apis_are_advertised_only_with_the_consumer_protocol(
    broker_factory: Callable[..., RunningBroker],
) -> None:
    def advertised(broker: RunningBroker) -> set[int]:
        with broker.wire() as wire:
            return {
                k.api_key
                for k in wire.request(
                    ApiVersionsRequest(client_software_name="t", client_software_version="1")
                ).api_keys
            }

    assert {68, 69} <= advertised(broker_factory())
    classic_only = broker_factory({"group.coordinator.rebalance.protocols": "classic"})
    assert not {68, 69} & advertised(classic_only)


def test_the_group_goes_on_at_another_broker_when_its_coordinator_stops(
    kafka_cluster: Callable[..., KafkaCluster], rdkafka_log: LibrdkafkaLog
) -> None:
    """On a ZooKeeper cluster: the coordinator's broker stops, the group's state is read from
    ZooKeeper by the broker that takes it over, and the member goes on at its epoch."""
    cluster = kafka_cluster(2, CONSUMER_PROTOCOL)
    first = cluster.brokers[0]
    topic, group = "kip848-moved", "g-moved"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, PARTITIONS, 2)])[topic].result(30)
    for broker in cluster.brokers:
        broker.wait_for_partitions(topic, PARTITIONS)
    produce(first, topic, 10)
    seen: list[Any] = []
    config = consumer_config(first, group, "mover")
    config["bootstrap.servers"] = cluster.bootstrap_servers
    member = Member(config, [topic], seen).start()
    try:
        wait_until(lambda: len(seen) >= 60, 60, "the first records")
        with first.wire() as wire:
            found = wire.request(FindCoordinatorRequest(key_type=i8(0), coordinator_keys=(group,)))
        coordinator = cluster.broker(int(found.coordinators[0].node_id))
        survivor = next(b for b in cluster.brokers if b is not coordinator)
        wait_until(lambda: describe(coordinator, group).group_state == "Stable", 30, "Stable")
        before = describe(coordinator, group)
        rdkafka_log.restarting = True  # the stopping coordinator closes its connections
        coordinator.stop()
        wait_until(
            lambda: {p.leader for p in survivor.partitions(topic).values()} == {survivor.broker_id},
            60,
            "the survivor leading every partition",
        )
        produce(survivor, topic, 5, start=10)
        wait_until(lambda: len(seen) >= 90, 90, "the records after the move")
        after = describe(survivor, group)
        assert after.group_epoch == before.group_epoch
        assert [(m.member_id, m.member_epoch) for m in after.members] == [
            (m.member_id, m.member_epoch) for m in before.members
        ]
        assert len(set(seen)) == len(seen), "a committed record was read again"
    finally:
        member.leave()


def test_consumer_groups_cli_describes_a_consumer_protocol_group(
    kip848_broker: RunningBroker, rdkafka_log: LibrdkafkaLog
) -> None:
    broker, topic, group = kip848_broker, "kip848-cli", "g-cli"
    broker.create_topic(topic, 2)
    seen: list[Any] = []
    config = consumer_config(broker, group, "cli-member", **{"group.instance.id": "cli-1"})
    member = Member(config, [topic], seen).start()
    try:
        wait_until(lambda: len(member.assignment) == 2, 60, "both partitions")
        wait_until(lambda: describe(broker, group).group_state == "Stable", 30, "Stable")
        epoch = describe(broker, group).group_epoch
        b = ("consumer-groups", "--bootstrap-server", broker.bootstrap_servers, "--group", group)
        state = ok(*b, "--describe", "--state", "--verbose").split("\n")
        assert state[1].split() == [
            "GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "GROUP-EPOCH",
            "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS",
        ]  # fmt: skip
        assert state[2].split()[-5:] == ["uniform", "Stable", str(epoch), str(epoch), "1"]
        members = ok(*b, "--describe", "--members", "--verbose").split("\n")
        assert members[1].split() == [
            "GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
            "CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT",
        ]  # fmt: skip
        row = members[2].split()
        assert row[0] == group and row[2] == "cli-1" and row[4] == "cli-member"
        assert row[5:] == ["2", str(epoch), f"{topic}:0,1", str(epoch), f"{topic}:0,1"]
        offsets = ok(*b, "--describe").split("\n")
        assert offsets[1].split()[:3] == ["GROUP", "TOPIC", "PARTITION"]
        assert {line.split()[-1] for line in offsets[2:] if line} == {"cli-member"}
    finally:
        member.leave()


def test_offset_commit_and_fetch_check_the_member_epoch(kip848_broker: RunningBroker) -> None:
    broker, topic, group = kip848_broker, "kip848-epochs", "g-epochs"
    broker.create_topic(topic, 1)
    with broker.wire() as wire:
        joined = wire.request(
            api.make(
                api.request_class(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1),
                group_id=group,
                member_id="m-1",
                member_epoch=0,
                rebalance_timeout=datetime.timedelta(seconds=30),
                subscribed_topic_names=(topic,),
                topic_partitions=(),
            )
        )
        assert joined.error_code == ErrorCode.none
        epoch = int(joined.member_epoch)

        def commit(version: int, member_epoch: int) -> ErrorCode:
            module = api.request_module(ApiKey.OFFSET_COMMIT, version)
            request = api.make(
                api.request_class(ApiKey.OFFSET_COMMIT, version),
                group_id=group,
                generation_id_or_member_epoch=member_epoch,
                member_id="m-1",
                topics=(
                    api.make(
                        module.OffsetCommitRequestTopic,
                        name=topic,
                        partitions=(
                            api.make(
                                module.OffsetCommitRequestPartition,
                                partition_index=0,
                                committed_offset=5,
                            ),
                        ),
                    ),
                ),
            )
            wire.send(request, version)
            _, response = wire.receive(ApiKey.OFFSET_COMMIT, version)
            return ErrorCode(response.topics[0].partitions[0].error_code)

        def fetch(member_epoch: int) -> ErrorCode:
            module = api.request_module(ApiKey.OFFSET_FETCH, 9)
            request = api.make(
                api.request_class(ApiKey.OFFSET_FETCH, 9),
                groups=(
                    api.make(
                        module.OffsetFetchRequestGroup,
                        group_id=group,
                        member_id="m-1",
                        member_epoch=member_epoch,
                        topics=None,
                    ),
                ),
            )
            wire.send(request, 9)
            _, response = wire.receive(ApiKey.OFFSET_FETCH, 9)
            return ErrorCode(response.groups[0].error_code)

        assert commit(9, epoch - 1) == ErrorCode.stale_member_epoch
        assert commit(8, epoch) == ErrorCode.unsupported_version
        assert commit(9, epoch) == ErrorCode.none
        assert fetch(epoch + 1) == ErrorCode.stale_member_epoch
        assert fetch(epoch) == ErrorCode.none


async def test_kplane_consumer_shares_a_group_with_confluent_kafka(
    kip848_broker: RunningBroker,
) -> None:
    """kplane's own consumer with group.id speaks KIP-848: alone it reads every partition;
    when a confluent-kafka member joins it gives up half (committing first) and nothing is
    read twice; on close it leaves and the other takes the rest."""
    broker, topic, group = kip848_broker, "kip848-kplane", "g-kplane"
    broker.create_topic(topic, PARTITIONS)
    produce(broker, topic, 100)
    props = {"bootstrap.servers": broker.bootstrap(), "group.id": group, "client.id": "kp"}
    client = KafkaClient(ClientConfig.from_properties(props))
    await client.start()
    consumer = KplaneConsumer.from_config(client)
    seen: list[Any] = []
    other: Member | None = None
    try:
        consumer.subscribe([topic])

        async def read_until(done: Callable[[], bool]) -> None:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 60
            while not done():
                assert loop.time() < deadline, f"timed out: {len(seen)} read"
                for r in await consumer.poll(timeout_ms=200):
                    seen.append((r.topic, r.partition, r.offset))
                await consumer.commit()

        await read_until(lambda: len(seen) >= 300)
        assert len(consumer.assignment()) == PARTITIONS
        other = Member(consumer_config(broker, group, "ck"), [topic], seen).start()
        await read_until(lambda: len(consumer.assignment()) == 3 and len(other.assignment) == 3)
        produce(broker, topic, 100, start=100)
        await read_until(lambda: len(seen) >= 1200)
        assert len(set(seen)) == len(seen), "a record was read twice"
        await consumer.close()
        await asyncio.to_thread(
            wait_until, lambda: len(other.assignment) == PARTITIONS, 60, "the rest taken over"
        )
        assert [m.client_id for m in describe(broker, group).members] == ["ck"]
    finally:
        if other is not None:
            other.leave()
        await consumer.close()
        await client.close()


async def test_kplane_consumer_commits_what_it_consumed_every_auto_commit_interval(
    kip848_broker: RunningBroker,
) -> None:
    """enable.auto.commit (the default): the positions the application polled are
    committed every auto.commit.interval.ms, without a commit() or a rebalance."""
    broker, topic, group = kip848_broker, "kip848-autocommit", "g-autocommit"
    broker.create_topic(topic, PARTITIONS)
    produce(broker, topic, 10)
    props = {
        "bootstrap.servers": broker.bootstrap(),
        "group.id": group,
        "auto.commit.interval.ms": "300",
    }
    client = KafkaClient(ClientConfig.from_properties(props))
    await client.start()
    consumer = KplaneConsumer.from_config(client)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap()})

    def committed() -> dict[int, int]:
        future = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
        listed = future[group].result(10).topic_partitions
        return {tp.partition: tp.offset for tp in listed if tp.offset >= 0}

    try:
        consumer.subscribe([topic])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        read = 0
        while read < 60:
            assert loop.time() < deadline, f"timed out: {read} read"
            read += len(await consumer.poll(timeout_ms=200))
        await asyncio.to_thread(
            wait_until,
            lambda: committed() == dict.fromkeys(range(PARTITIONS), 10),
            30,
            "the consumed positions committed",
        )
    finally:
        await consumer.close()
        await client.close()


def join(broker: RunningBroker, group: str, member: str, topics: tuple[str, ...]) -> Any:
    """One ConsumerGroupHeartbeat at epoch 0 (a member that then never heartbeats again)."""
    with broker.wire() as wire:
        return wire.request(
            api.make(
                api.request_class(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1),
                group_id=group,
                member_id=member,
                member_epoch=0,
                rebalance_timeout=datetime.timedelta(seconds=30),
                subscribed_topic_names=topics,
                topic_partitions=(),
            )
        )


def test_group_size_limit_and_session_expiry(broker_factory: Callable[..., RunningBroker]) -> None:
    broker = broker_factory({**CONSUMER_PROTOCOL, "group.consumer.max.size": "1"})
    topic, group = "kip848-limits", "g-limits"
    broker.create_topic(topic, 2)
    first = join(broker, group, "silent", (topic,))
    assert first.error_code == ErrorCode.none
    assert {int(p) for t in first.assignment.topic_partitions for p in t.partitions} == {0, 1}
    refused = join(broker, group, "second", (topic,))
    assert refused.error_code == ErrorCode.group_max_size_reached
    # The first member never heartbeats again: group.consumer.session.timeout.ms fences it.
    wait_until(lambda: describe(broker, group).group_state == "Empty", 30, "the session expiry")
    assert join(broker, group, "second", (topic,)).error_code == ErrorCode.none


def test_bad_heartbeats_get_kafkas_errors(kip848_broker: RunningBroker) -> None:
    def heartbeat(**fields: Any) -> ErrorCode:
        values: dict[str, Any] = {
            "group_id": "g-bad",
            "member_id": "m-bad",
            "member_epoch": 0,
            "rebalance_timeout": datetime.timedelta(seconds=30),
            "subscribed_topic_names": (),
            "topic_partitions": (),
            **fields,
        }
        with kip848_broker.wire() as wire:
            request = api.make(api.request_class(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1), **values)
            return ErrorCode(wire.request(request).error_code)

    assert heartbeat(subscribed_topic_regex="(a") == ErrorCode.invalid_regular_expression
    assert heartbeat(subscribed_topic_regex="(a+)+") == ErrorCode.invalid_regular_expression
    assert heartbeat(server_assignor="sticky") == ErrorCode.unsupported_assignor
    assert heartbeat(rebalance_timeout=datetime.timedelta(milliseconds=-1)) == (
        ErrorCode.invalid_request
    )
    assert heartbeat(member_epoch=-3) == ErrorCode.invalid_request
    assert heartbeat(member_id="") == ErrorCode.invalid_request
    assert heartbeat(member_epoch=5) == ErrorCode.group_id_not_found
    assert heartbeat(server_assignor="range") == ErrorCode.none
    assert heartbeat(member_epoch=7) == ErrorCode.fenced_member_epoch
