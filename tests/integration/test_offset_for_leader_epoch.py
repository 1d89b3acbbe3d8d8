"""OffsetForLeaderEpoch (API 23) on the wire against a real broker: every kio version, the
end offsets of Kafka's LeaderEpochFileCache, KIP-320's current leader epoch checks, the
partitions a broker does not lead, the ACLs (ClusterAction, else Describe per topic), and
librdkafka validating a position with it (KIP-320)."""

from __future__ import annotations

import time
from collections.abc import Callable
from importlib import import_module
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CkTopicPartition
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from kplane.common.acl import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AclResourceType,
    PatternType,
)
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode
from kplane.protocol.records import build_batch
from kplane.testing.broker_view import Replica
from kplane.testing.plugin import RunningBroker
from tests.integration.helpers import produce, recs

VERSIONS = [2, 3, 4]


def request(
    version: int, topics: dict[str, list[tuple[int, int, int]]], replica_id: int = -1
) -> Any:
    """OffsetForLeaderEpoch of ``version``: per topic, (partition, current leader epoch,
    leader epoch) triples."""
    module = import_module(f"kio.schema.offset_for_leader_epoch.v{version}.request")
    body = tuple(
        module.OffsetForLeaderTopic(
            topic=name,
            partitions=tuple(
                module.OffsetForLeaderPartition(
                    partition=p, current_leader_epoch=current, leader_epoch=epoch
                )
                for p, current, epoch in partitions
            ),
        )
        for name, partitions in topics.items()
    )
    if version >= 3:
        return module.OffsetForLeaderEpochRequest(replica_id=replica_id, topics=body)
    return module.OffsetForLeaderEpochRequest(topics=body)


def ask(
    broker: RunningBroker,
    topics: dict[str, list[tuple[int, int, int]]],
    version: int = 4,
    replica_id: int = -1,
) -> dict[tuple[str, int], tuple[ErrorCode, int, int]]:
    """(error, leader epoch, end offset) per (topic, partition)."""
    with broker.wire() as client:
        response = client.request(request(version, topics, replica_id))
    return {
        (t.topic, int(p.partition)): (p.error_code, int(p.leader_epoch), int(p.end_offset))
        for t in response.topics
        for p in t.partitions
    }


def replica_of(broker: RunningBroker, topic: str) -> Replica:
    replica = broker.replica(topic, 0)
    assert replica is not None
    return replica


def produce_some(broker: RunningBroker, topic: str, count: int) -> None:
    with broker.wire() as client:
        for i in range(count):
            response = produce(client, topic, build_batch(recs(f"r{i}-", 1)))
            assert response.error_code == ErrorCode.none


@pytest.fixture
def epochs(broker: RunningBroker) -> tuple[RunningBroker, int]:
    """A topic led here with three records in epoch ``e``, nothing in ``e + 1`` and four
    in ``e + 2`` (from offset 3): the broker and ``e``. The new epoch is what the
    controller's LeaderAndIsr of a leader change would begin, without a second broker."""
    broker.create_topic("epochs")
    produce_some(broker, "epochs", 3)
    first = replica_of(broker, "epochs").leader_epoch
    broker.set_leader("epochs", 0, broker.broker_id, first + 2)
    produce_some(broker, "epochs", 4)
    return broker, first


@pytest.mark.parametrize("version", VERSIONS)
def test_end_offsets_of_each_epoch(epochs: tuple[RunningBroker, int], version: int) -> None:
    broker, e = epochs
    asked = [(0, -1, e), (0, -1, e + 1), (0, -1, e + 2), (0, -1, e + 3)]
    answers = [ask(broker, {"epochs": [one]}, version)[("epochs", 0)] for one in asked]
    assert answers == [
        (ErrorCode.none, e, 3),  # where the next epoch begins
        (ErrorCode.none, e, 3),  # an epoch nobody wrote: the one before it
        (ErrorCode.none, e + 2, 7),  # the latest: the log end
        (ErrorCode.none, -1, -1),  # newer than any: unknown
    ]
    assert ask(broker, {"epochs": [(0, -1, -1)]}, version)[("epochs", 0)] == (
        ErrorCode.none, -1, -1
    )
    if e > 0:  # older than the first entry: that entry's start
        assert ask(broker, {"epochs": [(0, -1, e - 1)]}, version)[("epochs", 0)] == (
            ErrorCode.none, e - 1, 0
        )


@pytest.mark.parametrize("version", VERSIONS)
def test_the_current_leader_epoch_is_checked(
    epochs: tuple[RunningBroker, int], version: int
) -> None:
    broker, e = epochs
    current = e + 2

    def with_current(epoch: int) -> tuple[ErrorCode, int, int]:
        return ask(broker, {"epochs": [(0, epoch, e)]}, version)[("epochs", 0)]

    assert with_current(current) == (ErrorCode.none, e, 3)
    assert with_current(-1) == (ErrorCode.none, e, 3)
    assert with_current(current - 1) == (ErrorCode.fenced_leader_epoch, -1, -1)
    assert with_current(current + 1) == (ErrorCode.unknown_leader_epoch, -1, -1)


def test_partitions_not_led_here(epochs: tuple[RunningBroker, int]) -> None:
    broker, e = epochs
    answers = ask(
        broker,
        {"epochs": [(0, -1, e), (7, -1, e)], "no-such-topic": [(0, -1, 0)]},
        replica_id=1,
    )
    assert answers == {
        ("epochs", 0): (ErrorCode.none, e, 3),
        ("epochs", 7): (ErrorCode.unknown_topic_or_partition, -1, -1),
        ("no-such-topic", 0): (ErrorCode.unknown_topic_or_partition, -1, -1),
    }
    leader, epoch = broker.broker_id, replica_of(broker, "epochs").leader_epoch
    one_by_one = []
    broker.set_leader("epochs", 0, leader + 100, epoch)  # another broker leads it now
    try:
        for current in (-1, e + 2, e + 1, e + 3):
            one_by_one.append(ask(broker, {"epochs": [(0, current, e)]})[("epochs", 0)][0])
    finally:
        broker.set_leader("epochs", 0, leader, epoch)
    # Kafka checks the current leader epoch before the leadership
    assert one_by_one == [
        ErrorCode.not_leader_or_follower,
        ErrorCode.not_leader_or_follower,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
    ]


def test_api_versions_advertises_every_kio_version(broker: RunningBroker) -> None:
    with broker.wire() as client:
        response = client.request(
            ApiVersionsRequest(client_software_name="t", client_software_version="1")
        )
    (entry,) = [k for k in response.api_keys if k.api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH]
    assert list(range(entry.min_version, entry.max_version + 1)) == VERSIONS


# authorization -------------------------------------------------------------------------------
def acl(
    resource_type: AclResourceType, name: str, principal: str, operation: AclOperation
) -> AclBinding:
    return AclBinding(
        resource_type, name, PatternType.LITERAL, principal, "*", operation,
        AclPermissionType.ALLOW,
    )


def wait_for(check: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_cluster_action_or_describe_authorizes(
    broker_factory: Callable[..., RunningBroker],
) -> None:
    broker = broker_factory(
        {
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "allow.everyone.if.no.acl.found": "true",
        }
    )
    for topic in ("open", "secret"):
        broker.create_topic(topic)
        produce_some(broker, topic, 2)
    anonymous = "User:ANONYMOUS"
    broker.create_acls(
        [
            # ACLs on the cluster and on "secret" for someone else: ANONYMOUS has neither
            acl(
                AclResourceType.CLUSTER, "kafka-cluster", "User:broker",
                AclOperation.CLUSTER_ACTION,
            ),
            acl(AclResourceType.TOPIC, "secret", "User:bob", AclOperation.DESCRIBE),
        ]
    )
    epoch = replica_of(broker, "open").leader_epoch
    query = {"open": [(0, -1, epoch)], "secret": [(0, -1, epoch)]}
    wait_for(
        lambda: ask(broker, query)[("secret", 0)][0] == ErrorCode.topic_authorization_failed,
        "Describe on secret denied",
    )
    answers = ask(broker, query, replica_id=-1)
    assert answers == {
        ("open", 0): (ErrorCode.none, epoch, 2),  # no ACL on it: allowed to everyone
        ("secret", 0): (ErrorCode.topic_authorization_failed, -1, -1),
    }
    broker.create_acls(
        [acl(AclResourceType.TOPIC, "secret", anonymous, AclOperation.DESCRIBE)]
    )
    wait_for(lambda: ask(broker, query)[("secret", 0)][0] == ErrorCode.none, "Describe granted")
    broker.create_acls([acl(AclResourceType.TOPIC, "open", "User:bob", AclOperation.READ)])
    wait_for(
        lambda: ask(broker, query)[("open", 0)][0] == ErrorCode.topic_authorization_failed,
        "Describe on open denied",
    )
    # a broker (ClusterAction) may ask about every topic, whatever its topic ACLs say
    broker.create_acls(
        [acl(AclResourceType.CLUSTER, "kafka-cluster", anonymous, AclOperation.CLUSTER_ACTION)]
    )
    wait_for(
        lambda: ask(broker, query, replica_id=0)[("open", 0)][0] == ErrorCode.none,
        "ClusterAction granted",
    )
    assert ask(broker, query, replica_id=0) == {
        ("open", 0): (ErrorCode.none, epoch, 2),
        ("secret", 0): (ErrorCode.none, epoch, 2),
    }


# a client ------------------------------------------------------------------------------------
def test_librdkafka_validates_a_position_with_its_epoch(broker: RunningBroker) -> None:
    """librdkafka checks an assigned offset that carries a leader epoch with
    OffsetForLeaderEpoch (KIP-320) before fetching from it."""
    broker.create_topic("validated")
    produce_some(broker, "validated", 5)
    epoch = replica_of(broker, "validated").leader_epoch
    seen: list[Any] = []
    broker.on_request(ApiKey.OFFSET_FOR_LEADER_EPOCH, lambda request: seen.append(request.body))
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap(),
            "group.id": "ofle",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([CkTopicPartition("validated", 0, 2, leader_epoch=epoch)])
        got: list[tuple[int, int | None]] = []
        deadline = time.monotonic() + 30
        while len(got) < 3 and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=10, timeout=0.5):
                if msg.error() is None:
                    got.append((msg.offset(), msg.leader_epoch()))
        assert got == [(2, epoch), (3, epoch), (4, epoch)]
    finally:
        consumer.close()
    assert seen, "librdkafka sent no OffsetForLeaderEpoch"
    (topic,) = seen[0].topics
    (asked,) = topic.partitions
    assert (topic.topic, int(asked.leader_epoch), int(asked.current_leader_epoch)) == (
        "validated", epoch, epoch
    )
