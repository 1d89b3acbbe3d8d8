"""broker.log.transaction_index (Kafka's TransactionIndex and CleanedTransactionMetadata) and
the transaction markers of protocol.records it reads."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from kplane.broker.log.transaction_index import (
    ENTRY_SIZE,
    AbortedTxn,
    CleanedTransactionMetadata,
    TransactionIndex,
)
from kplane.protocol.records import (
    EndTxnMarker,
    InvalidRecordError,
    Record,
    build_batch,
    build_control_batch,
    encode_batch,
    end_txn_marker,
    number_batches,
    parse_end_txn_marker,
    scan_batches,
)

TXNS = [
    AbortedTxn(producer_id=1, first_offset=0, last_offset=5, last_stable_offset=6),
    AbortedTxn(producer_id=2, first_offset=3, last_offset=9, last_stable_offset=7),
    AbortedTxn(producer_id=3, first_offset=7, last_offset=12, last_stable_offset=13),
]


def filled(path: Path | None) -> TransactionIndex:
    index = TransactionIndex(path)
    for txn in TXNS:
        index.append(txn)
    return index


# --------------------------------------------------------------------------- the file


def test_the_file_is_kafkas_34_byte_entries_created_with_the_first(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    index = TransactionIndex(path)
    assert not path.exists()
    index.append(TXNS[0])
    index.flush()
    assert path.read_bytes() == struct.pack(">hqqqq", 0, 1, 0, 5, 6)
    assert ENTRY_SIZE == 34
    for txn in TXNS[1:]:
        index.append(txn)
    index.close()
    assert TransactionIndex(path).entries == TXNS


def test_markers_must_follow_each_other(tmp_path: Path) -> None:
    index = filled(tmp_path / "x.txnindex")
    with pytest.raises(ValueError):
        index.append(AbortedTxn(4, 10, 12, 13))
    assert index.last_offset == 12


@pytest.mark.parametrize("cut", range(1, ENTRY_SIZE))
def test_a_torn_tail_entry_is_dropped_at_load(tmp_path: Path, cut: int) -> None:
    path = tmp_path / "x.txnindex"
    filled(path).close()
    path.write_bytes(path.read_bytes()[:-cut])
    index = TransactionIndex(path)
    assert index.entries == TXNS[:2]
    assert path.stat().st_size == 2 * ENTRY_SIZE
    index.append(AbortedTxn(9, 10, 20, 21))  # appends line up again
    index.close()
    assert TransactionIndex(path).entries == [*TXNS[:2], AbortedTxn(9, 10, 20, 21)]


@pytest.mark.parametrize(
    "bad",
    [
        struct.pack(">hqqqq", 1, 4, 13, 14, 15),  # unknown version
        struct.pack(">hqqqq", 0, -1, 13, 14, 15),  # no producer
        struct.pack(">hqqqq", 0, 4, 15, 14, 15),  # begins after its marker
        struct.pack(">hqqqq", 0, 4, 13, 14, 16),  # an LSO past the marker
        struct.pack(">hqqqq", 0, 4, 10, 12, 13),  # a marker not after the one before
        struct.pack(">hqqqq", 0, 4, -5, 14, -1),  # negative offsets
    ],
)
def test_an_entry_that_cannot_be_true_ends_the_index(tmp_path: Path, bad: bytes) -> None:
    path = tmp_path / "x.txnindex"
    filled(path).close()
    good = path.read_bytes()
    path.write_bytes(good + bad + struct.pack(">hqqqq", 0, 5, 20, 30, 31))
    assert TransactionIndex(path).entries == TXNS
    assert path.read_bytes() == good


def test_garbage_loads_as_an_empty_index(tmp_path: Path) -> None:
    path = tmp_path / "x.txnindex"
    path.write_bytes(b"\xff" * 100)
    assert TransactionIndex(path).entries == []
    assert path.read_bytes() == b""


def test_truncate_to_drops_the_markers_at_or_after(tmp_path: Path) -> None:
    path = tmp_path / "x.txnindex"
    index = filled(path)
    index.truncate_to(13)
    assert index.entries == TXNS
    index.truncate_to(9)
    assert index.entries == TXNS[:1]
    index.append(AbortedTxn(5, 6, 8, 9))
    index.close()
    assert TransactionIndex(path).entries == [TXNS[0], AbortedTxn(5, 6, 8, 9)]
    index.truncate_to(0)
    assert TransactionIndex(path).entries == []


# --------------------------------------------------------------------------- collect


@pytest.mark.parametrize("path", [None, "x.txnindex"])
def test_collect_as_kafka(tmp_path: Path, path: str | None) -> None:
    index = filled(tmp_path / path if path else None)
    assert index.collect(0, 100) == (TXNS, False)
    assert index.collect(6, 100) == (TXNS[1:], False)
    assert index.collect(0, 3) == (TXNS[:1], True)  # the first entry's LSO covers 3
    assert index.collect(10, 7) == ([], True)  # began at or after the upper bound
    assert index.collect(10, 8) == ([TXNS[2]], True)
    assert index.collect(13, 20) == ([], False)


# --------------------------------------------------------------------------- the cleaner's view


def _data(pid: int, offset: int, transactional: bool = True):  # type: ignore[no-untyped-def]
    (h,) = scan_batches(build_batch([Record(b"k", b"v", timestamp=1)], producer_id=pid,
                                    producer_epoch=0, base_sequence=0,
                                    is_transactional=transactional))
    number_batches([h], offset, 0)
    return h


def _control(pid: int, offset: int, commit: bool):  # type: ignore[no-untyped-def]
    (h,) = scan_batches(build_control_batch(pid, 0, commit, 0, 1))
    number_batches([h], offset, 0)
    return h, EndTxnMarker(commit, 0)


def test_cleaned_metadata_drops_aborted_batches_and_keeps_their_marker_once() -> None:
    cleaned = TransactionIndex(None)
    meta = CleanedTransactionMetadata(cleaned)
    aborted = AbortedTxn(1, 0, 3, 1)
    meta.add_aborted_transactions([aborted, AbortedTxn(9, 50, 60, 61)])
    assert meta.on_batch_read(_data(1, 0)) is True  # aborted
    assert meta.on_batch_read(_data(2, 1)) is False  # committed later
    assert meta.on_batch_read(_data(3, 2, transactional=False)) is False
    assert meta.on_control_batch_read(*_control(1, 3, commit=False)) is False  # data seen
    assert cleaned.entries == [aborted]
    assert meta.on_control_batch_read(*_control(2, 4, commit=True)) is False  # data seen
    # the next pass: nothing of either transaction is left, so both markers may go
    again = CleanedTransactionMetadata(TransactionIndex(None))
    again.add_aborted_transactions([aborted])
    assert again.on_control_batch_read(*_control(1, 3, commit=False)) is True
    assert again.on_control_batch_read(*_control(2, 4, commit=True)) is True


def test_an_empty_control_batch_may_go_and_an_unknown_one_stays() -> None:
    meta = CleanedTransactionMetadata()
    h, _ = _control(1, 0, commit=True)
    h.record_count = 0
    assert meta.on_control_batch_read(h, None) is True
    h, _ = _control(1, 1, commit=True)
    assert meta.on_control_batch_read(h, None) is False


# --------------------------------------------------------------------------- markers


def test_a_control_batch_is_kafkas_marker() -> None:
    raw = build_control_batch(42, 7, True, 3, 1_000, partition_leader_epoch=5)
    (h,) = scan_batches(raw)
    assert len(raw) == 78
    assert (h.is_control, h.is_transactional, h.base_sequence) == (True, True, -1)
    assert (h.producer_id, h.producer_epoch, h.partition_leader_epoch) == (42, 7, 5)
    assert (h.record_count, h.base_timestamp) == (1, 1_000)
    assert end_txn_marker(raw) == EndTxnMarker(commit=True, coordinator_epoch=3)
    assert end_txn_marker(build_control_batch(1, 0, False, -1, 0)) == EndTxnMarker(False, -1)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (None, b"\x00\x00\x00\x00\x00\x01"),
        (b"\x00\x00\x00", b"\x00\x00\x00\x00\x00\x01"),
        (b"\xff\xff\x00\x01", b"\x00\x00\x00\x00\x00\x01"),
        (b"\x00\x00\x00\x01", None),
        (b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00"),
        (b"\x00\x00\x00\x01", b"\xff\xff\x00\x00\x00\x01"),
    ],
)
def test_a_malformed_marker_raises_and_reads_nothing_beyond_its_bytes(
    key: bytes | None, value: bytes | None
) -> None:
    with pytest.raises(InvalidRecordError):
        parse_end_txn_marker(key, value)


def test_marker_versions_above_0_read_as_0_and_other_types_are_no_marker() -> None:
    assert parse_end_txn_marker(b"\x00\x03\x00\x00", b"\x00\x02\x00\x00\x00\x07xx") == (
        EndTxnMarker(False, 7)
    )
    assert parse_end_txn_marker(b"\x00\x00\x00\x02", None) is None  # LEADER_CHANGE


def test_end_txn_marker_wants_one_whole_control_batch() -> None:
    raw = build_control_batch(1, 0, True, 0, 0)
    with pytest.raises(InvalidRecordError):
        end_txn_marker(raw[:-1])
    with pytest.raises(InvalidRecordError):
        end_txn_marker(raw + raw)
    with pytest.raises(InvalidRecordError):
        end_txn_marker(build_batch([Record(b"k", b"v")]))
    empty = encode_batch([], base_offset=0, last_offset_delta=0, base_timestamp=-1,
                         max_timestamp=0, attributes=0x30, producer_id=1, producer_epoch=0)
    assert end_txn_marker(empty) is None
