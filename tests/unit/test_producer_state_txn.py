"""Transactions in broker.log.producer_state: a transactional batch begins one, its marker
completes it, the first unstable offset follows the ongoing ones, and the state survives a
snapshot and a replay."""

from __future__ import annotations

from pathlib import Path

import pytest

from kplane.broker.log.producer_state import (
    CompletedTxn,
    ProducerInfo,
    ProducerStateManager,
    load_latest_snapshot,
    write_snapshot,
)
from kplane.protocol.errors import ErrorCode, KafkaError
from kplane.protocol.records import (
    BatchHeader,
    EndTxnMarker,
    Record,
    build_batch,
    build_control_batch,
    number_batches,
    scan_batches,
)

NOW_MS = 1_700_000_000_000


class TxnLog:
    """Appends as a Partition does: check, number, record (and complete a marker's txn)."""

    def __init__(self, state: ProducerStateManager | None = None, end: int = 0) -> None:
        self.state = state or ProducerStateManager()
        self.end = end
        self.stored: list[tuple[BatchHeader, EndTxnMarker | None]] = []

    def data(
        self, pid: int, epoch: int, seq: int, count: int = 1, transactional: bool = True
    ) -> BatchHeader:
        raw = build_batch(
            [Record(key=None, value=b"v", timestamp=NOW_MS)] * count,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            is_transactional=transactional,
        )
        (h,) = scan_batches(raw)
        assert self.state.find_duplicate(h) is None
        self.end = number_batches([h], self.end, 0)
        assert self.state.update(h, NOW_MS) is None
        self.stored.append((h, None))
        return h

    def marker(
        self, pid: int, epoch: int, commit: bool, coordinator_epoch: int = 0
    ) -> CompletedTxn:
        self.state.check_end_txn_marker(pid, epoch, coordinator_epoch)
        (h,) = scan_batches(build_control_batch(pid, epoch, commit, coordinator_epoch, NOW_MS))
        self.end = number_batches([h], self.end, 0)
        marker = EndTxnMarker(commit, coordinator_epoch)
        completed = self.state.update(h, NOW_MS, marker)
        assert completed is not None
        self.state.complete_txn(completed)
        self.stored.append((h, marker))
        return completed


def test_a_transactional_batch_begins_a_transaction_and_its_marker_completes_it() -> None:
    log = TxnLog()
    log.data(1, 0, 0, 3, transactional=False)  # offsets 0-2, idempotent only
    assert log.state.first_unstable_offset is None
    log.data(1, 0, 3, 2)  # 3-4: begins a transaction
    log.data(1, 0, 5, 1)  # 5: the same one
    entry = log.state.entry(1)
    assert entry is not None and entry.current_txn_first_offset == 3
    assert log.state.first_unstable_offset == 3

    done = log.marker(1, 0, commit=True, coordinator_epoch=4)  # offset 6

    assert done == CompletedTxn(1, 3, 6, is_aborted=False, last_stable_offset=7)
    assert (entry.current_txn_first_offset, entry.coordinator_epoch) == (-1, 4)
    assert log.state.first_unstable_offset is None


def test_the_first_unstable_offset_is_the_oldest_ongoing_transaction() -> None:
    log = TxnLog()
    log.data(1, 0, 0)  # 0
    log.data(2, 0, 0)  # 1
    log.data(3, 0, 0)  # 2
    assert log.state.first_unstable_offset == 0

    done = log.marker(2, 0, commit=False)  # 3: the LSO after it is still producer 1's start
    assert done == CompletedTxn(2, 1, 3, is_aborted=True, last_stable_offset=0)
    assert log.state.first_unstable_offset == 0

    done = log.marker(1, 0, commit=True)  # 4
    assert done.last_stable_offset == 2
    assert log.state.first_unstable_offset == 2
    log.data(1, 0, 1)  # 5: producer 1's next transaction
    done = log.marker(3, 0, commit=False)  # 6
    assert (done.first_offset, done.last_stable_offset) == (2, 5)
    assert log.state.first_unstable_offset == 5


def test_a_non_transactional_batch_during_a_transaction_is_refused() -> None:
    log = TxnLog()
    log.data(1, 0, 0)
    (h,) = scan_batches(build_batch([Record(None, b"x")], producer_id=1, producer_epoch=0,
                                    base_sequence=1))
    with pytest.raises(KafkaError) as info:
        log.state.find_duplicate(h)
    assert info.value.code == ErrorCode.invalid_txn_state
    log.marker(1, 0, commit=True)
    log.data(1, 0, 1, transactional=False)  # after the marker it is fine


def test_an_older_epoch_is_fenced_for_batches_and_markers() -> None:
    log = TxnLog()
    log.data(1, 5, 0)
    (h,) = scan_batches(build_batch([Record(None, b"x")], producer_id=1, producer_epoch=4,
                                    base_sequence=1, is_transactional=True))
    with pytest.raises(KafkaError) as info:
        log.state.find_duplicate(h)
    assert info.value.code == ErrorCode.invalid_producer_epoch
    with pytest.raises(KafkaError) as info:
        log.state.check_end_txn_marker(1, 4, 0)
    assert info.value.code == ErrorCode.invalid_producer_epoch
    log.marker(1, 5, commit=False, coordinator_epoch=3)
    with pytest.raises(KafkaError) as info:
        log.state.check_end_txn_marker(1, 5, 2)
    assert info.value.code == ErrorCode.transaction_coordinator_fenced
    log.state.check_end_txn_marker(1, 5, 3)
    log.state.check_end_txn_marker(1, 6, 3)
    log.state.check_end_txn_marker(99, 0, 0)  # a producer never seen: nothing to check


def test_a_marker_adds_no_batch_and_the_sequence_continues() -> None:
    log = TxnLog()
    first = log.data(1, 0, 0, 2)
    log.marker(1, 0, commit=True)
    entry = log.state.entry(1)
    assert entry is not None
    assert [(b.first_seq, b.last_seq) for b in entry.batches] == [(0, 1)]
    retry = log.state.find_duplicate(first)
    assert retry is not None and retry.first_offset == 0
    (gap,) = scan_batches(build_batch([Record(None, b"x")], producer_id=1, producer_epoch=0,
                                      base_sequence=3, is_transactional=True))
    with pytest.raises(KafkaError) as info:
        log.state.find_duplicate(gap)
    assert info.value.code == ErrorCode.out_of_order_sequence_number
    log.data(1, 0, 2)


def test_a_marker_with_a_new_epoch_restarts_the_sequence() -> None:
    log = TxnLog()
    log.data(1, 0, 0, 4)
    log.marker(1, 1, commit=False)  # the coordinator bumped the epoch while aborting
    entry = log.state.entry(1)
    assert entry is not None and (entry.epoch, list(entry.batches)) == (1, [])
    (old_seq,) = scan_batches(build_batch([Record(None, b"x")], producer_id=1, producer_epoch=1,
                                          base_sequence=4, is_transactional=True))
    with pytest.raises(KafkaError) as info:
        log.state.find_duplicate(old_seq)
    assert info.value.code == ErrorCode.out_of_order_sequence_number
    log.data(1, 1, 0)


def test_a_marker_for_a_producer_never_seen_completes_an_empty_transaction() -> None:
    log = TxnLog()
    log.data(2, 0, 0, 2, transactional=False)
    done = log.marker(7, 3, commit=False, coordinator_epoch=9)
    assert done == CompletedTxn(7, 2, 2, is_aborted=True, last_stable_offset=3)
    entry = log.state.entry(7)
    assert entry is not None
    assert (entry.epoch, entry.coordinator_epoch, len(entry.batches)) == (3, 9, 0)
    log.data(7, 3, 0)  # the producer's first batch here starts at sequence 0


def test_replaying_what_the_state_covers_changes_nothing() -> None:
    log = TxnLog()
    log.data(1, 0, 0)
    log.data(2, 0, 0)
    log.marker(1, 0, commit=False)
    before = log.state.snapshot()
    for h, marker in log.stored:
        assert log.state.update(h, NOW_MS + 5, marker) is None
    assert log.state.snapshot() == before
    assert log.state.first_unstable_offset == 1


def test_a_rebuild_from_the_stored_batches_finds_the_same_transactions() -> None:
    log = TxnLog()
    log.data(1, 0, 0)
    log.data(2, 0, 0)
    log.marker(1, 0, commit=False)
    log.data(3, 0, 0, 2)
    rebuilt = TxnLog()
    completed = []
    for h, marker in log.stored:
        done = rebuilt.state.update(h, NOW_MS, marker)
        if done is not None:
            completed.append(done)
            rebuilt.state.complete_txn(done)
    assert completed == [CompletedTxn(1, 0, 2, is_aborted=True, last_stable_offset=1)]
    assert rebuilt.state.snapshot() == log.state.snapshot()
    assert rebuilt.state.first_unstable_offset == 1


def test_an_unreadable_control_batch_changes_no_transaction() -> None:
    log = TxnLog()
    log.data(1, 0, 0)
    (h,) = scan_batches(build_control_batch(1, 0, True, 0, NOW_MS))
    number_batches([h], log.end, 0)
    assert log.state.update(h, NOW_MS, None) is None
    assert log.state.first_unstable_offset == 0
    assert log.state.map_end_offset == 2


def test_a_snapshot_keeps_the_ongoing_transactions(tmp_path: Path) -> None:
    log = TxnLog()
    log.data(1, 2, 0)  # 0
    log.data(2, 0, 0)  # 1
    log.marker(2, 0, commit=True, coordinator_epoch=6)  # 2
    log.data(3, 0, 0)  # 3
    write_snapshot(tmp_path, log.end, log.state)

    found = load_latest_snapshot(tmp_path)
    assert found is not None
    offset, state = found
    assert (offset, state.map_end_offset, state.first_unstable_offset) == (4, 4, 0)
    entry = state.entry(2)
    assert entry is not None and entry.coordinator_epoch == 6

    loaded = TxnLog(state, end=offset)
    done = loaded.marker(1, 2, commit=False)
    assert done == CompletedTxn(1, 0, 4, is_aborted=True, last_stable_offset=3)
    assert loaded.state.first_unstable_offset == 3
    loaded.marker(3, 0, commit=True)
    assert loaded.state.first_unstable_offset is None


def test_active_producers_lists_what_describe_producers_needs() -> None:
    log = TxnLog()
    log.data(1, 2, 0, 3)
    log.data(5, 0, 0, 1, transactional=False)
    log.marker(5, 0, commit=True, coordinator_epoch=1)
    assert sorted(log.state.active_producers(), key=lambda p: p.producer_id) == [
        ProducerInfo(1, 2, 2, NOW_MS, -1, 0),
        ProducerInfo(5, 0, 0, NOW_MS, 1, -1),
    ]
