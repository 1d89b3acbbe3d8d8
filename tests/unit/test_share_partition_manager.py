"""The SharePartitionManager over a real ReplicaManager and metadata store (tests/unit/
leader.py): where a share partition starts, what a fetch acquires from the log, the state
written before an answer and read back by a manager that takes over."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from kplane.broker.group.group_configs import GroupConfigManager
from kplane.broker.group.share_config import ShareGroupConfig
from kplane.broker.log.partition import ReplicaAssignment, TopicPartition
from kplane.broker.server.replica_manager import ReplicaState
from kplane.broker.share.share_partition import AcknowledgementBatch, AcknowledgeType
from kplane.broker.share.share_partition_manager import SharePartitionManager
from kplane.broker.share.share_state_store import FencedStateEpochError, ShareStateStore
from kplane.protocol.records import Record, build_batch
from tests.unit.leader import TOPIC, Broker, batch

TP = TopicPartition(TOPIC, 0)


@pytest.fixture
def broker() -> Iterator[Broker]:
    b = Broker()
    yield b
    b.close()


def manager(broker: Broker, **group_configs: str) -> SharePartitionManager:
    return SharePartitionManager(
        broker.replicas,
        ShareGroupConfig(),
        GroupConfigManager(lambda: broker.config, lambda _g: dict(group_configs)),
        ShareStateStore(broker.store),
    )


def offsets(m: SharePartitionManager, member: str = "a") -> list[int]:
    got = m.fetch("g", member, [TP], 1 << 20, 100)[TP]
    return [o for a in got.acquired for o in range(a.first_offset, a.last_offset + 1)]


def test_latest_starts_after_what_the_log_holds_and_earliest_at_its_start(broker: Broker) -> None:
    broker.produce({0: batch(b"a", b"b")})
    latest = manager(broker)
    assert offsets(latest) == []
    broker.produce({0: batch(b"c")})
    assert offsets(latest) == [2]
    earliest = manager(broker, **{"share.auto.offset.reset": "earliest"})
    earliest.delete_group("g")  # the stored state of the first manager goes
    assert offsets(earliest) == [0, 1, 2]


def test_by_duration_starts_at_the_first_record_that_recent(broker: Broker) -> None:
    old = int(time.time() * 1000) - 3_600_000
    broker.produce({0: build_batch([Record(b"k", b"old", timestamp=old)])})
    broker.produce({0: batch(b"new")})
    m = manager(broker, **{"share.auto.offset.reset": "by_duration:PT10M"})
    assert offsets(m) == [1]


def test_the_state_stored_before_the_answer_is_where_a_new_leader_goes_on(broker: Broker) -> None:
    broker.produce({0: batch(b"a", b"b", b"c", b"d")})
    first = manager(broker, **{"share.auto.offset.reset": "earliest"})
    assert offsets(first) == [0, 1, 2, 3]
    accept = AcknowledgementBatch(0, 1, (AcknowledgeType.ACCEPT,))
    assert first.acknowledge("g", "a", {TP: [accept]}) == {TP: None}
    takeover = manager(broker)  # another broker, or this one after a restart
    assert offsets(takeover, "b") == [2, 3]
    assert takeover.stored_offsets("g", [TP])[TP].start_offset == 2


def test_a_new_leader_epoch_reads_the_stored_state_again(broker: Broker) -> None:
    broker.produce({0: batch(b"a", b"b")})
    m = manager(broker, **{"share.auto.offset.reset": "earliest"})
    assert offsets(m) == [0, 1]  # acquired, not settled: stored as available
    broker.replicas.become_leader_or_follower(
        1, [ReplicaState(TP, ReplicaAssignment(0, 1, 1, (0,), (0,)))]
    )
    assert offsets(m, "b") == [0, 1]


def test_an_alteration_at_the_coordinator_reaches_a_leader_that_held_the_partition(
    broker: Broker,
) -> None:
    """Two managers over one store: the partition's leader and the group's coordinator
    (another broker). The leader hands out records from the altered offset, not from the
    start it held in memory."""
    broker.produce({0: batch(b"a", b"b", b"c", b"d", b"e")})
    leader = manager(broker, **{"share.auto.offset.reset": "earliest"})
    coordinator = manager(broker)
    assert offsets(leader) == [0, 1, 2, 3, 4]
    accept = AcknowledgementBatch(0, 4, (AcknowledgeType.ACCEPT,))
    assert leader.acknowledge("g", "a", {TP: [accept]}) == {TP: None}
    coordinator.alter_offsets("g", {TP: 1})  # back: 1..4 again
    assert offsets(leader, "b") == [1, 2, 3, 4]
    assert coordinator.stored_offsets("g", [TP])[TP].start_offset == 1
    coordinator.alter_offsets("g", {TP: 4})  # forward, with 1..4 acquired by b
    assert offsets(leader, "c") == [4]
    accept = AcknowledgementBatch(4, 4, (AcknowledgeType.ACCEPT,))
    assert leader.acknowledge("g", "c", {TP: [accept]}) == {TP: None}
    assert coordinator.stored_offsets("g", [TP])[TP].start_offset == 5


def test_deleted_offsets_start_a_leader_again_at_the_reset_offset(broker: Broker) -> None:
    broker.produce({0: batch(b"a", b"b")})
    leader = manager(broker, **{"share.auto.offset.reset": "earliest"})
    assert offsets(leader) == [0, 1]
    manager(broker).delete_offsets("g", [TP])
    assert offsets(leader, "b") == [0, 1]  # earliest again, not the records it held


def test_a_write_under_an_older_state_epoch_is_fenced_and_changes_nothing(
    broker: Broker,
) -> None:
    states = ShareStateStore(broker.store)
    key = ("g", TP)
    old = states.state_epoch("g")
    states.write({key: {"start_offset": 3, "state_batches": []}}, {key: old}, new=[key])
    assert states.initialize("g", {TP: 7}) == old.epoch + 1
    with pytest.raises(FencedStateEpochError):
        states.write({key: {"start_offset": 9, "state_batches": []}}, {key: old})
    assert states.read("g", TP) == {
        "version": 1,
        "state_epoch": old.epoch + 1,
        "start_offset": 7,
        "state_batches": [],
    }
    states.initialize("g", {TP: None})
    assert states.read("g", TP) is None
    with pytest.raises(FencedStateEpochError):  # nor made again by an old leader
        states.write({key: {"start_offset": 9, "state_batches": []}}, {key: old}, new=[key])
    assert states.read("g", TP) is None
