"""The transaction coordinator's state machine over a real embedded metadata store.

Markers go to a MarkerWriter that records them and answers as a partition leader would
(the coordinator's only way out to partitions), so each test sees exactly what was sent.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kplane.broker.log.partition import TopicPartition
from kplane.broker.metadata.kafka_store import KafkaMetadataClient
from kplane.broker.metadata.store import EmbeddedMetadataStore
from kplane.broker.network.broker_channels import BrokerChannelManager
from kplane.broker.transaction.coordinator import TransactionConfig, TransactionCoordinator
from kplane.broker.transaction.marker_channel import TransactionMarkerChannelManager, TxnMarker
from kplane.broker.transaction.state_manager import TransactionStateManager
from kplane.broker.transaction.transaction_metadata import MAX_PRODUCER_EPOCH, TransactionState
from kplane.broker.utils.timer import SystemTimer
from kplane.protocol.errors import ErrorCode, KafkaError

TP = TopicPartition("t", 0)


class Leaders:
    """Every partition led here; markers recorded, answered with ``error``."""

    def __init__(self) -> None:
        self.markers: list[TxnMarker] = []
        self.error = ErrorCode.none
        self.written = threading.Event()

    def __call__(self, marker: TxnMarker) -> dict[TopicPartition, ErrorCode]:
        self.markers.append(marker)
        self.written.set()
        return dict.fromkeys(marker.partitions, self.error)


@pytest.fixture
def timer() -> Iterator[SystemTimer]:
    t = SystemTimer()
    yield t
    t.shutdown()


def make_coordinator(
    store: KafkaMetadataClient,
    timer: SystemTimer,
    leaders: Leaders,
    broker_id: int = 1,
    **config: int,
) -> TransactionCoordinator:
    ids = iter(range(broker_id * 1000, broker_id * 1000 + 1000))
    markers = TransactionMarkerChannelManager(
        broker_id,
        lambda tp: broker_id,
        lambda b: None,
        BrokerChannelManager.__new__(BrokerChannelManager),  # never used: all local
        leaders,
        timer,
    )
    return TransactionCoordinator(
        TransactionConfig(**config),
        TransactionStateManager(store, broker_id, lambda tid: True),
        markers,
        lambda: next(ids),
        timer,
    )


@pytest.fixture
def client(tmp_path: Path) -> KafkaMetadataClient:
    return KafkaMetadataClient(EmbeddedMetadataStore(str(tmp_path)))


def wait_state(c: TransactionCoordinator, tid: str, state: TransactionState) -> None:
    deadline = time.monotonic() + 5
    while c.describe(tid).state is not state:
        assert time.monotonic() < deadline, c.describe(tid)
        time.sleep(0.01)


def test_init_bumps_the_epoch_and_fences_the_previous_producer(
    client: KafkaMetadataClient, timer: SystemTimer
) -> None:
    c = make_coordinator(client, timer, Leaders())
    first = c.init_producer_id("app", 60_000)
    assert (first.error, first.producer_epoch) == (ErrorCode.none, 0)
    second = c.init_producer_id("app", 60_000)
    assert (second.producer_id, second.producer_epoch) == (first.producer_id, 1)
    stale = c.add_partitions("app", first.producer_id, 0, [TP])
    assert stale is ErrorCode.producer_fenced
    assert c.add_partitions("app", first.producer_id, 1, [TP]) is ErrorCode.none
    assert c.add_partitions("other", first.producer_id, 1, [TP]) is (
        ErrorCode.invalid_producer_id_mapping
    )


def test_timeouts_are_checked(client: KafkaMetadataClient, timer: SystemTimer) -> None:
    c = make_coordinator(client, timer, Leaders(), max_timeout_ms=1000)
    assert c.init_producer_id("app", 1001).error is ErrorCode.invalid_transaction_timeout
    assert c.init_producer_id("app", 0).error is ErrorCode.invalid_transaction_timeout
    assert c.init_producer_id("", 10).error is ErrorCode.invalid_request


def test_commit_writes_markers_then_completes(
    client: KafkaMetadataClient, timer: SystemTimer
) -> None:
    leaders = Leaders()
    c = make_coordinator(client, timer, leaders)
    pid = c.init_producer_id("app", 60_000).producer_id
    assert c.end_transaction("app", pid, 0, commit=True) is ErrorCode.invalid_txn_state  # Empty
    c.add_partitions("app", pid, 0, [TP, TopicPartition("t", 1)])
    assert c.describe("app").state is TransactionState.ONGOING
    assert c.end_transaction("app", pid, 0, commit=True) is ErrorCode.none
    wait_state(c, "app", TransactionState.COMPLETE_COMMIT)
    (marker,) = leaders.markers
    assert marker.commit and marker.producer_id == pid and len(marker.partitions) == 2
    assert c.end_transaction("app", pid, 0, commit=True) is ErrorCode.none  # a retry
    assert c.end_transaction("app", pid, 0, commit=False) is ErrorCode.invalid_txn_state


def test_markers_are_retried_until_written(client: KafkaMetadataClient, timer: SystemTimer) -> None:
    leaders = Leaders()
    leaders.error = ErrorCode.not_leader_or_follower
    c = make_coordinator(client, timer, leaders)
    pid = c.init_producer_id("app", 60_000).producer_id
    c.add_partitions("app", pid, 0, [TP])
    c.end_transaction("app", pid, 0, commit=False)
    assert leaders.written.wait(5)
    assert c.describe("app").state is TransactionState.PREPARE_ABORT
    assert c.add_partitions("app", pid, 0, [TP]) is ErrorCode.concurrent_transactions
    assert c.init_producer_id("app", 60_000).error is ErrorCode.concurrent_transactions
    leaders.error = ErrorCode.none
    wait_state(c, "app", TransactionState.COMPLETE_ABORT)
    assert len(leaders.markers) >= 2


def test_init_during_an_open_transaction_aborts_it_with_a_bumped_epoch(
    client: KafkaMetadataClient, timer: SystemTimer
) -> None:
    leaders = Leaders()
    c = make_coordinator(client, timer, leaders)
    pid = c.init_producer_id("app", 60_000).producer_id
    c.add_partitions("app", pid, 0, [TP])
    assert c.init_producer_id("app", 60_000).error is ErrorCode.concurrent_transactions
    wait_state(c, "app", TransactionState.COMPLETE_ABORT)
    (marker,) = leaders.markers
    assert not marker.commit and marker.producer_epoch == 1
    retried = c.init_producer_id("app", 60_000)
    assert (retried.error, retried.producer_epoch) == (ErrorCode.none, 2)


def test_timed_out_transaction_is_aborted(client: KafkaMetadataClient, timer: SystemTimer) -> None:
    leaders = Leaders()
    c = make_coordinator(client, timer, leaders, abort_timed_out_interval_ms=20)
    c.startup()
    try:
        pid = c.init_producer_id("app", 50).producer_id
        c.add_partitions("app", pid, 0, [TP])
        wait_state(c, "app", TransactionState.COMPLETE_ABORT)
        assert c.describe("app").producer_epoch == 1
        assert c.end_transaction("app", pid, 0, commit=True) is ErrorCode.producer_fenced
    finally:
        c.shutdown()


def test_state_survives_and_a_new_coordinator_completes_a_prepared_commit(
    client: KafkaMetadataClient, timer: SystemTimer
) -> None:
    stuck = Leaders()
    stuck.error = ErrorCode.not_leader_or_follower
    old = make_coordinator(client, timer, stuck, broker_id=1)
    pid = old.init_producer_id("app", 60_000).producer_id
    old.add_partitions("app", pid, 0, [TP])
    old.end_transaction("app", pid, 0, commit=True)
    assert stuck.written.wait(5)

    leaders = Leaders()
    new = make_coordinator(client, timer, leaders, broker_id=2)
    new.startup()
    try:
        wait_state(new, "app", TransactionState.COMPLETE_COMMIT)
        assert leaders.markers[0].commit
        assert leaders.markers[0].coordinator_epoch == 1  # bumped on take-over
        # The old coordinator's next write is refused: the new one wrote since.
        with old.state.locked("app") as stale:
            assert stale is not None
            with pytest.raises(KafkaError) as refused:
                old.state.put(stale.copy())
        assert refused.value.code is ErrorCode.not_coordinator
    finally:
        new.shutdown()


def test_expired_transactional_ids_are_removed(
    client: KafkaMetadataClient, timer: SystemTimer
) -> None:
    c = make_coordinator(client, timer, Leaders(), transactional_id_expiration_ms=1)
    c.init_producer_id("app", 60_000)
    time.sleep(0.01)
    assert c.remove_expired_transactional_ids() == 1
    assert client.transactional_ids() == []


def test_list_and_describe(client: KafkaMetadataClient, timer: SystemTimer) -> None:
    c = make_coordinator(client, timer, Leaders())
    a = c.init_producer_id("a", 60_000).producer_id
    c.init_producer_id("b", 60_000)
    c.add_partitions("a", a, 0, [TP])
    assert [d.transactional_id for d in c.list_transactions()] == ["a", "b"]
    assert [d.transactional_id for d in c.list_transactions(["Ongoing"])] == ["a"]
    assert [d.transactional_id for d in c.list_transactions(producer_ids=[a])] == ["a"]
    assert c.describe("a").partitions == (TP,)


# InitProducerId with an expected producer id and epoch (KIP-360), branch by branch ---------


def _exhaust(c: TransactionCoordinator, tid: str) -> int:
    """Leave ``tid``'s epoch exhausted (as 32,766 bumps would); returns its producer id."""
    first = c.init_producer_id(tid, 60_000)
    with c.state.locked(tid) as current:
        assert current is not None
        exhausted = current.copy()
        exhausted.producer_epoch = MAX_PRODUCER_EPOCH - 1
        c.state.put(exhausted)
    return first.producer_id


def test_a_new_id_accepts_any_expected_producer(
    client: KafkaMetadataClient, timer: SystemTimer
) -> None:
    c = make_coordinator(client, timer, Leaders())
    new = c.init_producer_id("fresh", 60_000, expected_producer_id=0, expected_epoch=0)
    assert (new.error, new.producer_epoch) == (ErrorCode.none, 0)
    assert new.producer_id != 0  # a new id, not the one named


def test_the_current_producer_bumps_and_a_retry_gets_the_same_epoch(
    client: KafkaMetadataClient, timer: SystemTimer
) -> None:
    c = make_coordinator(client, timer, Leaders())
    first = c.init_producer_id("app", 60_000)
    bumped = c.init_producer_id("app", 60_000, first.producer_id, first.producer_epoch)
    assert (bumped.producer_id, bumped.producer_epoch) == (first.producer_id, 1)
    # the same call again (its answer was lost): the current epoch, no bump
    retried = c.init_producer_id("app", 60_000, first.producer_id, first.producer_epoch)
    assert (retried.error, retried.producer_epoch) == (ErrorCode.none, 1)


def test_an_older_epoch_or_another_id_is_fenced(
    client: KafkaMetadataClient, timer: SystemTimer
) -> None:
    c = make_coordinator(client, timer, Leaders())
    first = c.init_producer_id("app", 60_000)
    for _ in range(2):
        c.init_producer_id("app", 60_000)  # epoch 2; last epoch forgotten (-1)
    old = c.init_producer_id("app", 60_000, first.producer_id, 0)
    assert old.error is ErrorCode.producer_fenced
    other = c.init_producer_id("app", 60_000, first.producer_id + 7, 2)
    assert other.error is ErrorCode.producer_fenced


def test_an_id_without_an_epoch_is_an_invalid_request(
    client: KafkaMetadataClient, timer: SystemTimer
) -> None:
    c = make_coordinator(client, timer, Leaders())
    assert c.init_producer_id("app", 60_000, 5, -1).error is ErrorCode.invalid_request
    assert c.init_producer_id("app", 60_000, -1, 5).error is ErrorCode.invalid_request


def test_an_exhausted_epoch_rotates_the_id_and_its_retry_is_recognised(
    client: KafkaMetadataClient, timer: SystemTimer
) -> None:
    c = make_coordinator(client, timer, Leaders())
    old_id = _exhaust(c, "app")
    rotated = c.init_producer_id("app", 60_000, old_id, MAX_PRODUCER_EPOCH - 1)
    assert rotated.error is ErrorCode.none
    assert (rotated.producer_id != old_id, rotated.producer_epoch) == (True, 0)
    # the rotation's answer was lost: the previous id with its exhausted epoch is let in
    retried = c.init_producer_id("app", 60_000, old_id, MAX_PRODUCER_EPOCH - 1)
    assert (retried.producer_id, retried.producer_epoch) == (rotated.producer_id, 0)
    # the previous id with another epoch is not
    stale = c.init_producer_id("app", 60_000, old_id, 3)
    assert stale.error is ErrorCode.producer_fenced


def test_an_exhausted_epoch_without_an_expected_producer_rotates_too(
    client: KafkaMetadataClient, timer: SystemTimer
) -> None:
    c = make_coordinator(client, timer, Leaders())
    old_id = _exhaust(c, "app")
    rotated = c.init_producer_id("app", 60_000)
    assert (rotated.producer_id != old_id, rotated.producer_epoch) == (True, 0)
    # no epoch was named, so none is remembered: the old id is fenced from now on
    again = c.init_producer_id("app", 60_000, old_id, MAX_PRODUCER_EPOCH - 1)
    assert again.error is ErrorCode.producer_fenced
