"""KIP-848's online migration driven through the GroupCoordinator: a classic group with a
member upgraded by a consumer-protocol member, its classic member served through
JoinGroup/SyncGroup/Heartbeat against the consumer group, offsets committed by generation,
and the downgrade when the consumer-protocol member leaves; the policy's refusals."""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import pytest

from kplane.broker.group.classic_group import ClassicGroup, JoinGroupResult, SyncGroupResult
from kplane.broker.group.classic_protocol import MemberIdentity
from kplane.broker.group.consumer_group import ConsumerGroup
from kplane.broker.group.consumer_protocol import ConsumerGroupHeartbeat, HeartbeatResult
from kplane.broker.group.coordinator import GroupCoordinator
from kplane.broker.group.embedded_protocol import decode_assignment, encode_assignment
from kplane.broker.group.group import OffsetAndMetadata, TopicPartition
from kplane.broker.group.group_config import GroupConfig
from kplane.broker.metadata.cache import MetadataSnapshot, PartitionInfo, TopicInfo
from kplane.broker.metadata.kafka_store import BrokerRegistration
from kplane.broker.utils.timer import SystemTimer
from kplane.protocol.errors import ErrorCode

WAIT = 5.0
TOPIC_ID = uuid.uuid4()
GROUP = "g"


@pytest.fixture
def timer() -> Iterator[SystemTimer]:
    t = SystemTimer("test-group-migration")
    yield t
    t.shutdown()


def snapshot() -> MetadataSnapshot:
    partitions = {p: PartitionInfo(p, 0, 0, (0,), (0,)) for p in range(4)}
    return MetadataSnapshot(
        "c",
        0,
        brokers={0: BrokerRegistration(0, ())},
        topics={"t": TopicInfo("t", TOPIC_ID, partitions)},
        topic_ids={TOPIC_ID: "t"},
    )


def coordinator(timer: SystemTimer, policy: str = "bidirectional") -> GroupCoordinator:
    config = GroupConfig(
        initial_rebalance_delay_ms=0, min_session_timeout_ms=10, consumer_migration_policy=policy
    )
    return GroupCoordinator(config, timer, lambda t, p: t == "t" and 0 <= p < 4, topics=snapshot)


def subscription() -> bytes:
    """A ConsumerProtocolSubscription v1 of topic t, owning nothing (an eager member)."""
    return struct.pack(">hih", 1, 1, 1) + b"t" + struct.pack(">ii", -1, 0)


def classic_join(
    coord: GroupCoordinator, member_id: str = "", rebalance_timeout_ms: int = 30_000
) -> JoinGroupResult:
    done: Future[JoinGroupResult] = Future()
    coord.join_group(
        GROUP, member_id, None, "classic", "/h", rebalance_timeout_ms, 10_000, "consumer",
        [("range", subscription())], done.set_result, require_known_member_id=False,
    )  # fmt: skip
    return done.result(WAIT)


def classic_sync(
    coord: GroupCoordinator, member_id: str, generation: int, assignment: bytes | None = None
) -> SyncGroupResult:
    done: Future[SyncGroupResult] = Future()
    assignments = {member_id: assignment} if assignment is not None else {}
    coord.sync_group(GROUP, generation, member_id, None, "consumer", "range", assignments,
                     done.set_result)  # fmt: skip
    return done.result(WAIT)


def classic_heartbeat(coord: GroupCoordinator, member_id: str, generation: int) -> ErrorCode:
    done: Future[ErrorCode] = Future()
    coord.heartbeat(GROUP, member_id, None, generation, done.set_result)
    return done.result(WAIT)


def commit(coord: GroupCoordinator, member_id: str, generation: int) -> ErrorCode:
    done: Future[dict[TopicPartition, ErrorCode]] = Future()
    coord.commit_offsets(
        GROUP, member_id, None, generation, {TopicPartition("t", 0): OffsetAndMetadata(5)},
        done.set_result, api_version=8,
    )  # fmt: skip
    return done.result(WAIT)[TopicPartition("t", 0)]


def consumer_heartbeat(coord: GroupCoordinator, member_id: str, epoch: int) -> HeartbeatResult:
    return coord.consumer.heartbeat(
        ConsumerGroupHeartbeat(
            group_id=GROUP,
            member_id=member_id,
            member_epoch=epoch,
            rebalance_timeout_ms=30_000 if epoch == 0 else -1,
            subscribed_topic_names=("t",) if epoch == 0 else None,
            owned={} if epoch == 0 else None,
        )
    )


def stable_classic_member(coord: GroupCoordinator) -> str:
    """A classic group of one member holding all four partitions at generation 1."""
    joined = classic_join(coord)
    assert (joined.error, joined.generation_id) == (ErrorCode.none, 1)
    everything = encode_assignment({"t": range(4)}, 1)
    assert classic_sync(coord, joined.member_id, 1, everything).assignment == everything
    return joined.member_id


def partitions(data: bytes) -> list[int]:
    return [p for _t, p in decode_assignment(data)]


def test_a_live_classic_group_upgrades_then_downgrades(timer: SystemTimer) -> None:
    coord = coordinator(timer)
    try:
        old = stable_classic_member(coord)
        assert commit(coord, old, 1) is ErrorCode.none
        new = consumer_heartbeat(coord, "new", 0)
        assert new.error is ErrorCode.none and new.member_epoch == 2
        assert new.assignment == {}  # its half is still the classic member's
        assert isinstance(coord.groups.get(GROUP), ConsumerGroup)
        # The classic member goes on at its generation until it rejoins.
        assert commit(coord, old, 1) is ErrorCode.none
        assert classic_heartbeat(coord, old, 1) is ErrorCode.rebalance_in_progress
        rejoined = classic_join(coord, old)
        assert (rejoined.error, rejoined.generation_id) == (ErrorCode.none, 2)
        assert (rejoined.protocol_type, rejoined.protocol_name) == ("consumer", "range")
        assert rejoined.leader_id != old and rejoined.members == ()  # the broker assigns
        synced = classic_sync(coord, old, 2)
        assert synced.error is ErrorCode.none and len(partitions(synced.assignment)) == 2
        assert classic_heartbeat(coord, old, 2) is ErrorCode.none
        assert commit(coord, old, 1) is ErrorCode.illegal_generation
        assert classic_sync(coord, old, 1).error is ErrorCode.illegal_generation
        taken = consumer_heartbeat(coord, "new", 2)
        assert taken.assignment == {
            TOPIC_ID: frozenset(range(4)) - set(partitions(synced.assignment))
        }
        (described,) = coord.describe_consumer_groups([GROUP])
        assert sorted(m.classic is not None for m, _t in described.members) == [False, True]

        assert consumer_heartbeat(coord, "new", -1).error is ErrorCode.none  # leaves
        group = coord.groups.get(GROUP)
        assert isinstance(group, ClassicGroup) and group.state.value == "PreparingRebalance"
        assert classic_heartbeat(coord, old, 2) is ErrorCode.rebalance_in_progress
        again = classic_join(coord, old)
        assert again.error is ErrorCode.none and again.leader_id == old  # it assigns now
        offsets: Future[Any] = Future()
        coord.fetch_offsets(GROUP, [TopicPartition("t", 0)], offsets.set_result)
        assert offsets.result(WAIT).partitions[TopicPartition("t", 0)].offset == 5
    finally:
        coord.shutdown()


def test_the_policy_refuses_an_upgrade_or_a_downgrade(timer: SystemTimer) -> None:
    refusing = coordinator(timer, policy="downgrade")
    try:
        old = stable_classic_member(refusing)
        assert consumer_heartbeat(refusing, "new", 0).error is ErrorCode.group_id_not_found
        assert classic_heartbeat(refusing, old, 1) is ErrorCode.none
    finally:
        refusing.shutdown()
    kept = coordinator(timer, policy="upgrade")
    try:
        assert consumer_heartbeat(kept, "new", 0).error is ErrorCode.none
        joined = classic_join(kept)  # a classic member joins a consumer group whatever the policy
        assert joined.error is ErrorCode.none and joined.protocol_name == "range"
        other: Future[JoinGroupResult] = Future()
        kept.join_group(
            GROUP, "", None, "classic", "/h", 30_000, 10_000, "consumer",
            [("roundrobin", subscription())], other.set_result, require_known_member_id=False,
        )  # fmt: skip
        assert other.result(WAIT).error is ErrorCode.inconsistent_group_protocol
        assert consumer_heartbeat(kept, "new", -1).error is ErrorCode.none
        group = kept.groups.get(GROUP)
        assert isinstance(group, ConsumerGroup) and list(group.members) == [joined.member_id]
        done: Future[Any] = Future()
        kept.leave_group(GROUP, [MemberIdentity(joined.member_id)], done.set_result)
        assert [m.error for m in done.result(WAIT).members] == [ErrorCode.none]
        assert not group.members
    finally:
        kept.shutdown()


def test_a_classic_member_that_does_not_sync_or_rejoin_in_time_is_fenced(
    timer: SystemTimer,
) -> None:
    """Kafka's sync and join timeouts (the member's rebalance timeout), well before its
    session would expire."""
    coord = coordinator(timer)
    try:
        assert consumer_heartbeat(coord, "new", 0).error is ErrorCode.none
        silent = classic_join(coord, rebalance_timeout_ms=200)
        assert silent.error is ErrorCode.none
        group = coord.groups.get(GROUP)
        assert isinstance(group, ConsumerGroup)
        wait_until(lambda: silent.member_id not in group.members)  # never synced

        joined = classic_join(coord, rebalance_timeout_ms=200)
        assert classic_sync(coord, joined.member_id, joined.generation_id).error is ErrorCode.none
        assert consumer_heartbeat(coord, "newer", 0).error is ErrorCode.none  # epoch moves
        generation = joined.generation_id
        assert (
            classic_heartbeat(coord, joined.member_id, generation)
            is ErrorCode.rebalance_in_progress
        )
        time.sleep(0.1)
        assert joined.member_id in group.members
        wait_until(lambda: joined.member_id not in group.members)  # never rejoined
    finally:
        coord.shutdown()


def wait_until(predicate: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_a_classic_static_member_replacing_the_last_consumer_one_downgrades(
    timer: SystemTimer,
) -> None:
    """Kafka's downgrade on a static member's replacement: the classic member takes the
    consumer-protocol member's place and partitions in a Stable classic group."""
    coord = coordinator(timer)
    try:
        first = coord.consumer.heartbeat(
            ConsumerGroupHeartbeat(
                group_id=GROUP,
                member_id="static-new",
                member_epoch=0,
                instance_id="i-1",
                rebalance_timeout_ms=30_000,
                subscribed_topic_names=("t",),
                owned={},
            )
        )
        assert first.error is ErrorCode.none and first.member_epoch == 1
        done: Future[JoinGroupResult] = Future()
        coord.join_group(
            GROUP, "", "i-1", "classic", "/h", 30_000, 10_000, "consumer",
            [("range", subscription())], done.set_result,
        )  # fmt: skip
        joined = done.result(WAIT)
        assert (joined.error, joined.generation_id) == (ErrorCode.none, 1)
        group = coord.groups.get(GROUP)
        assert isinstance(group, ClassicGroup) and group.state.value == "Stable"
        assert list(group.members) == [joined.member_id]
        synced = classic_sync(coord, joined.member_id, 1)
        assert synced.error is ErrorCode.none and partitions(synced.assignment) == [0, 1, 2, 3]
    finally:
        coord.shutdown()
