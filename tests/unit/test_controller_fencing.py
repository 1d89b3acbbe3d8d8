"""A deposed controller writes nothing and resigns once; a leader's ISR write that lost the
version race reads the state again instead of retrying forever. On the in-memory store."""

from __future__ import annotations

import uuid
from typing import Any, cast

import pytest
from structlog.testing import capture_logs

from kplane.broker.controller.controller import KafkaController
from kplane.broker.log.log import MemoryLog
from kplane.broker.log.partition import Partition, ReplicaAssignment, TopicPartition
from kplane.broker.metadata.kafka_store import (
    BrokerRegistration,
    KafkaMetadataClient,
    PartitionStateChangedError,
    PartitionStateRecord,
    TopicAssignment,
)
from kplane.broker.metadata.store import EmbeddedMetadataStore
from kplane.broker.metadata.zk_store import ZooKeeperUnavailableError
from kplane.broker.server.replica_manager import ReplicaManager, ReplicaState
from kplane.protocol.errors import ErrorCode, KafkaError

TP = TopicPartition("t", 0)


class Channels:
    """The controller's channels, recording what it sends."""

    listener = "PLAINTEXT"

    def __init__(self) -> None:
        self.sent: list[tuple[int, int]] = []

    def add_broker(self, broker: BrokerRegistration) -> None:
        pass

    def remove_broker(self, broker_id: int) -> None:
        pass

    def send(self, broker_id: int, api_key: int, build: object) -> None:
        self.sent.append((broker_id, api_key))


def _deposed_controller() -> tuple[KafkaController, KafkaMetadataClient, Channels]:
    """Broker 0 elected, leading ``t-0`` with broker 1; then broker 1 elected after broker
    0's ``/controller`` went (its session ended while it was paused), broker 0 not told
    yet."""
    store = EmbeddedMetadataStore(None)
    client = KafkaMetadataClient(store)
    for broker_id in (0, 1):
        client.register_broker(BrokerRegistration(broker_id, ()))
    channels = Channels()
    controller = KafkaController(0, client, cast(Any, channels), lambda: False)
    controller.startup()
    assert controller.active and controller.epoch == 1
    client.create_topic("t", TopicAssignment(uuid.uuid4(), {0: (0, 1)}), {})
    assert client.get_partition_state("t", 0) == PartitionStateRecord(0, 0, (0, 1), 1, 0)
    store.delete("/controller")
    assert client.register_controller(1) == (2, 2)
    assert controller.active  # it does not know yet
    channels.sent.clear()
    return controller, client, channels


def _events(logs: list[dict[str, Any]], event: str) -> int:
    return sum(1 for entry in logs if entry["event"] == event)


def test_a_deposed_controller_resigns_at_its_first_write() -> None:
    controller, client, channels = _deposed_controller()
    with capture_logs() as logs:
        client.create_topic("u", TopicAssignment(uuid.uuid4(), {0: (0,)}), {})  # its watcher
        client.create_topic("v", TopicAssignment(uuid.uuid4(), {0: (0,)}), {})
    assert not controller.active
    assert client.get_partition_state("u", 0) is None  # nothing written
    assert channels.sent == []  # nothing sent
    assert _events(logs, "controller moved: resigning") == 1
    with pytest.raises(KafkaError) as refused:
        controller.elect_leaders(False, None)
    assert refused.value.code is ErrorCode.not_controller


def test_a_request_to_a_deposed_controller_is_answered_not_controller() -> None:
    controller, client, _ = _deposed_controller()
    with pytest.raises(KafkaError) as refused:
        controller.controlled_shutdown(0)  # it would make broker 1 lead t-0
    assert refused.value.code is ErrorCode.not_controller
    assert not controller.active
    assert client.get_partition_state("t", 0) == PartitionStateRecord(0, 0, (0, 1), 1, 0)
    assert controller.rebalance_leaders(10) == 0


class IsrWriter:
    """A leader's ISR writes: raises what it is given, else succeeds with the next version."""

    def __init__(self, *failures: Exception) -> None:
        self.failures = list(failures)
        self.records: list[PartitionStateRecord] = []

    def __call__(self, tp: TopicPartition, record: PartitionStateRecord) -> int:
        self.records.append(record)
        if self.failures:
            raise self.failures.pop(0)
        return record.version + 1


class Logs:
    """The log manager of one partition."""

    def __init__(self, partition: Partition) -> None:
        self.partition = partition

    def get(self, tp: TopicPartition) -> Partition | None:
        return self.partition if tp == TP else None

    def get_or_create(self, tp: TopicPartition) -> Partition:
        return self.partition

    def partitions(self) -> list[Partition]:
        return [self.partition]


class Purgatory:
    def check_and_complete(self, key: object) -> int:
        return 0


def _leader(writer: IsrWriter) -> tuple[ReplicaManager, Partition]:
    """Broker 0 leading ``t-0`` at leader epoch 5 and partition epoch 7, ISR (0, 1)."""
    partition = Partition(TP, MemoryLog())
    partition.make_leader(0, ReplicaAssignment(0, 5, 7, (0, 1, 2), (0, 1)))
    manager = ReplicaManager(
        0,
        cast(Any, Logs(partition)),
        cast(Any, None),
        cast(Any, Purgatory()),
        cast(Any, None),
        cast(Any, Purgatory()),
        writer,
    )
    return manager, partition


def _stored(leader: int, leader_epoch: int, version: int) -> PartitionStateChangedError:
    path = "/brokers/topics/t/partitions/0/state"
    return PartitionStateChangedError(
        path, PartitionStateRecord(leader, leader_epoch, (leader,), 2, version)
    )


def test_a_leader_moved_by_the_controller_stops_writing_until_its_leader_and_isr() -> None:
    writer = IsrWriter(_stored(1, 6, 9))
    manager, partition = _leader(writer)
    with capture_logs() as logs:
        for _ in range(50):  # follower 2 fetches, caught up: it would join the ISR
            manager.update_follower_fetch(TP, 2, 0)
    assert len(writer.records) == 1
    assert partition.isr == (0, 1)
    assert _events(logs, "isr change not written: the controller moved the partition") == 1
    # the controller's LeaderAndIsr (this broker leads again, a newer epoch): writes resume
    manager.become_leader_or_follower(
        2, [ReplicaState(TP, ReplicaAssignment(0, 7, 10, (0, 1, 2), (0, 1)))]
    )
    manager.update_follower_fetch(TP, 2, 0)
    assert writer.records[-1].version == 10 and writer.records[-1].leader_epoch == 7
    assert partition.isr == (0, 1, 2)


def test_a_state_at_this_leader_epoch_is_where_the_next_write_starts() -> None:
    writer = IsrWriter(_stored(0, 5, 9))
    manager, partition = _leader(writer)
    with capture_logs() as logs:
        manager.update_follower_fetch(TP, 2, 0)
        assert partition.isr == (0, 1) and partition.partition_epoch == 9
        manager.update_follower_fetch(TP, 2, 0)
    assert [r.version for r in writer.records] == [7, 9]
    assert partition.isr == (0, 1, 2) and partition.partition_epoch == 10
    assert _events(logs, "isr change not written: partition state read again") == 1


def test_store_failures_are_logged_once_per_interval_with_a_count() -> None:
    path = "/brokers/topics/t/partitions/0/state"
    writer = IsrWriter(*(ZooKeeperUnavailableError(path) for _ in range(20)))
    manager, partition = _leader(writer)
    with capture_logs() as logs:
        for _ in range(20):
            manager.update_follower_fetch(TP, 2, 0)
    assert len(writer.records) == 20
    lines = [entry for entry in logs if entry["event"] == "isr change not written"]
    assert len(lines) == 1 and lines[0]["count"] == 1
    manager.update_follower_fetch(TP, 2, 0)
    assert partition.isr == (0, 1, 2)
