"""Share groups' membership in the metadata store (issue 29): the document round trip beside
the consumer groups' (one mechanism for both types), and GroupCoordinators over a real
in-process metadata store, as brokers restarted or taking the group over find it."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import pytest

from kplane.broker.group.consumer_group import ConsumerGroup, ConsumerGroupMember
from kplane.broker.group.consumer_group_store import decode_group, encode_group
from kplane.broker.group.coordinator import GroupCoordinator
from kplane.broker.group.group import GroupOverview
from kplane.broker.group.group_config import GroupConfig
from kplane.broker.group.share_config import ShareGroupConfig
from kplane.broker.group.share_group import ShareGroup, ShareGroupMember
from kplane.broker.group.share_protocol import ShareGroupHeartbeat
from kplane.broker.metadata.cache import MetadataSnapshot, PartitionInfo, TopicInfo
from kplane.broker.metadata.kafka_store import BrokerRegistration, KafkaMetadataClient
from kplane.broker.metadata.store import EmbeddedMetadataStore
from kplane.broker.utils.timer import SystemTimer
from kplane.protocol.errors import ErrorCode

WAIT = 10.0
TOPIC_ID = uuid.uuid4()
GROUP = "sg-stored"


@pytest.fixture
def timer() -> Iterator[SystemTimer]:
    t = SystemTimer("test-share-group-store")
    yield t
    t.shutdown()


def test_a_share_group_document_round_trips() -> None:
    other = uuid.uuid4()
    group = ShareGroup(GROUP, group_epoch=7, assignment_epoch=7, assignor_name="simple")
    for member in (
        ShareGroupMember(
            "m-1", 7, 5, "rack-a", "c1", "/10.0.0.1", ("t", "u"), {TOPIC_ID: frozenset({0, 1})}
        ),
        ShareGroupMember("m-2", 6, 4, None, "c2", "/10.0.0.2", ("t",), {other: frozenset({2})}),
    ):
        group.update_member(member)
    group.target = {"m-1": {TOPIC_ID: frozenset({0, 1})}, "m-2": {TOPIC_ID: frozenset({0})}}
    group.subscription_fingerprint = (("t", TOPIC_ID, 4), ("u", other, 1))
    data = encode_group(group)

    loaded = decode_group(GROUP, data, 3)

    assert isinstance(loaded, ShareGroup)
    assert (loaded.group_epoch, loaded.assignment_epoch, loaded.assignor_name) == (7, 7, "simple")
    assert loaded.members == group.members
    assert loaded.target == group.target
    assert loaded.subscription_fingerprint == group.subscription_fingerprint
    assert (loaded.store_version, loaded.stored) == (3, data)
    assert encode_group(loaded) == data  # a heartbeat changing nothing writes nothing


def test_consumer_group_documents_decode_as_before() -> None:
    """The consumer group's document through the same code: its racks kept, and one stored
    before documents had a type still a consumer group."""
    group = ConsumerGroup(GROUP, group_epoch=3, assignment_epoch=3, assignor_name="uniform")
    assigned = {TOPIC_ID: frozenset({1})}
    group.update_member(
        ConsumerGroupMember("m-1", 3, 2, subscribed_topic_names=("t",), assigned=assigned)
    )
    group.subscription_fingerprint = (
        ("t", TOPIC_ID, 2, ((0, frozenset({"r1"})), (1, frozenset()))),
    )
    data = encode_group(group)
    loaded = decode_group(GROUP, data, 0)
    assert isinstance(loaded, ConsumerGroup)
    assert loaded.members == group.members
    assert loaded.current_partition_epoch(TOPIC_ID, 1) == 3
    assert loaded.subscription_fingerprint == group.subscription_fingerprint
    untyped = data.replace(b'"type": "consumer", ', b"")
    assert untyped != data and isinstance(decode_group(GROUP, untyped, 0), ConsumerGroup)
    assert decode_group(GROUP, data.replace(b'"consumer"', b'"classic"'), 0) is None


class Cluster:
    """Brokers sharing one metadata store; the lowest live one coordinates the group."""

    def __init__(self) -> None:
        self.live = {0, 1}
        self.client = KafkaMetadataClient(EmbeddedMetadataStore(None))

    def snapshot(self) -> MetadataSnapshot:
        partitions = {p: PartitionInfo(p, 0, 0, (0, 1), (0, 1)) for p in range(4)}
        return MetadataSnapshot(
            "c",
            0,
            brokers={b: BrokerRegistration(b, ()) for b in self.live},
            topics={"t": TopicInfo("t", TOPIC_ID, partitions)},
            topic_ids={TOPIC_ID: "t"},
        )

    def coordinator(
        self, timer: SystemTimer, broker_id: int, session_timeout_ms: int = 45_000
    ) -> GroupCoordinator:
        return GroupCoordinator(
            GroupConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=10),
            timer,
            lambda _t, _p: True,
            self.client,
            topics=self.snapshot,
            stored_topics=lambda: ["t"],
            group_store=self.client,
            share_config=dataclasses.replace(
                ShareGroupConfig(), session_timeout_ms=session_timeout_ms
            ),
            owns=lambda _group_id: min(self.live) == broker_id,
        )


def heartbeat(coord: GroupCoordinator, member_id: str, epoch: int) -> Any:
    return coord.share.heartbeat(
        ShareGroupHeartbeat(
            GROUP, member_id, epoch, subscribed_topic_names=("t",) if epoch == 0 else None
        )
    )


def listed(coord: GroupCoordinator) -> list[GroupOverview]:
    done: Future[list[GroupOverview]] = Future()
    coord.list_groups(done.set_result)
    return done.result(WAIT)


def wait_until(predicate: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_a_restarted_coordinator_keeps_the_members_at_their_epochs(timer: SystemTimer) -> None:
    cluster = Cluster()
    first = cluster.coordinator(timer, 0)
    assert heartbeat(first, "m-1", 0).member_epoch == 1
    assert heartbeat(first, "m-2", 0).member_epoch == 2
    m1 = heartbeat(first, "m-1", 1)
    assert (m1.error, m1.member_epoch) == (ErrorCode.none, 2)
    first.shutdown()  # the broker restarts

    again = cluster.coordinator(timer, 0)
    try:
        wait_until(lambda: again.groups.registered(GROUP) is not None)  # loaded unasked
        assert [(g.group_id, g.group_type) for g in listed(again)] == [(GROUP, "share")]
        (described,) = again.describe_share_groups([GROUP])
        assert (described.error, described.state, described.group_epoch) == (
            ErrorCode.none,
            "Stable",
            2,
        )
        assert sorted((m.member_id, m.member_epoch) for m in described.members) == [
            ("m-1", 2),
            ("m-2", 2),
        ]
        assert {m.member_id: m.assigned for m in described.members}["m-1"]
        resumed = heartbeat(again, "m-1", 2)  # its old member id and epoch: not fenced
        assert (resumed.error, resumed.member_epoch) == (ErrorCode.none, 2)
        assert heartbeat(again, "m-3", 0).member_epoch == 3  # the group epoch goes on
        assert heartbeat(again, "m-4", 3).error is ErrorCode.unknown_member_id
    finally:
        again.shutdown()


def test_loaded_members_that_do_not_come_back_expire(timer: SystemTimer) -> None:
    cluster = Cluster()
    first = cluster.coordinator(timer, 0, session_timeout_ms=60_000)
    assert heartbeat(first, "m-1", 0).error is ErrorCode.none
    first.shutdown()
    again = cluster.coordinator(timer, 0, session_timeout_ms=500)
    try:
        wait_until(lambda: bool(again.describe_share_groups([GROUP])[0].members))
        wait_until(lambda: not again.describe_share_groups([GROUP])[0].members)
        assert again.describe_share_groups([GROUP])[0].group_epoch == 2
        stored = decode_group(GROUP, *(cluster.client.read_consumer_group(GROUP) or (b"", 0)))
        assert isinstance(stored, ShareGroup) and not stored.members and stored.group_epoch == 2
    finally:
        again.shutdown()


def test_the_next_coordinator_takes_the_share_group_over(timer: SystemTimer) -> None:
    cluster = Cluster()
    first, second = cluster.coordinator(timer, 0), cluster.coordinator(timer, 1)
    try:
        assert heartbeat(first, "m-1", 0).member_epoch == 1
        cluster.live = {1}  # broker 0 is gone: broker 1 coordinates the group
        (described,) = second.describe_share_groups([GROUP])
        assert [(m.member_id, m.member_epoch) for m in described.members] == [("m-1", 1)]
        assert heartbeat(second, "m-1", 1).error is ErrorCode.none
        wait_until(lambda: first.groups.registered(GROUP) is None)  # unloaded there
        assert heartbeat(second, "m-2", 0).member_epoch == 2
    finally:
        first.shutdown()
        second.shutdown()


def test_a_coordinator_with_an_older_copy_is_fenced(timer: SystemTimer) -> None:
    cluster = Cluster()
    first, second = cluster.coordinator(timer, 0), cluster.coordinator(timer, 1)
    try:
        assert heartbeat(first, "m-1", 0).error is ErrorCode.none
        assert heartbeat(second, "m-2", 0).member_epoch == 2  # it read the stored group
        stale = heartbeat(first, "m-3", 0)
        assert stale.error is ErrorCode.not_coordinator
        assert first.groups.registered(GROUP) is None
    finally:
        first.shutdown()
        second.shutdown()


def test_deleting_a_share_group_removes_what_is_stored(timer: SystemTimer) -> None:
    cluster = Cluster()
    coord = cluster.coordinator(timer, 0)
    try:
        assert heartbeat(coord, "m-1", 0).error is ErrorCode.none
        assert heartbeat(coord, "m-1", -1).error is ErrorCode.none
        assert cluster.client.read_consumer_group(GROUP) is not None
        deleted: Future[dict[str, ErrorCode]] = Future()
        coord.delete_groups([GROUP], deleted.set_result)
        assert deleted.result(WAIT) == {GROUP: ErrorCode.none}
        assert cluster.client.read_consumer_group(GROUP) is None
    finally:
        coord.shutdown()
    again = cluster.coordinator(timer, 0)
    try:
        assert again.groups.get(GROUP) is None  # read from the store: nothing there
        assert listed(again) == []
        assert heartbeat(again, "m-1", 0).member_epoch == 1  # a new group
    finally:
        again.shutdown()
