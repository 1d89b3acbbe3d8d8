"""Tests for broker.log.producer_state: duplicate detection, snapshots, snapshot files, replay."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import crc32c
import pytest

from kplane.broker.log.producer_state import (
    CACHED_BATCHES,
    CorruptSnapshotError,
    ProducerStateManager,
    delete_snapshots,
    latest_snapshot,
    list_snapshots,
    load_latest_snapshot,
    write_snapshot,
)
from kplane.protocol.errors import ErrorCode, KafkaError
from kplane.protocol.records import BatchHeader, Record, build_batch, number_batches, scan_batches
from kplane.protocol.records import served_prefix as _served_prefix

NOW_MS = 1_700_000_000_000


def records(count: int) -> list[Record]:
    return [Record(key=None, value=f"v{i}".encode(), timestamp=NOW_MS) for i in range(count)]


def batch(pid: int, epoch: int, seq: int, count: int) -> bytes:
    return build_batch(records(count), producer_id=pid, producer_epoch=epoch, base_sequence=seq)


@dataclass
class FakeLog:
    """Appends as Partition.append_records_as_leader does, keeping the stored bytes."""

    state: ProducerStateManager = field(default_factory=ProducerStateManager)
    end: int = 0
    stored: bytearray = field(default_factory=bytearray)

    def append(self, raw: bytes, now_ms: int = NOW_MS) -> list[BatchHeader]:
        headers = scan_batches(raw)
        assert self.state.find_duplicate(headers[0]) is None
        self.end = number_batches(headers, self.end, 0)
        for h in headers:
            # what a log stores: the assigned offsets in front of the producer's bytes
            self.stored += _served_prefix(h) + raw[h.position + 16 : h.position + h.size]
            self.state.update(h, now_ms)
        return headers


def header(raw: bytes) -> BatchHeader:
    (h,) = scan_batches(raw)
    return h


def producer_log() -> tuple[FakeLog, dict[int, list[tuple[bytes, int, int]]]]:
    """Three producers with full caches (seven batches each, interleaved) and one with two.

    Returns the log and, per producer, every (raw batch, first offset, last offset)."""
    flog = FakeLog()
    sent: dict[int, list[tuple[bytes, int, int]]] = {}
    plan = {1000: (0, 7), 2000: (3, 7), 3000: (7, 7), 4000: (1, 2)}
    seqs = dict.fromkeys(plan, 0)
    for round_ in range(7):
        for pid, (epoch, batches) in plan.items():
            if round_ >= batches:
                continue
            count = 1 + (pid // 1000 + round_) % 4
            raw = batch(pid, epoch, seqs[pid], count)
            seqs[pid] += count
            (h,) = flog.append(raw, NOW_MS + round_)
            sent.setdefault(pid, []).append((raw, h.base_offset, h.base_offset + count - 1))
    return flog, sent


# --------------------------------------------------------------------------- round trip


def test_snapshot_round_trip_keeps_every_producer_and_its_cached_batches() -> None:
    flog, _ = producer_log()
    tx = flog.state.entry(2000)
    assert tx is not None
    tx.coordinator_epoch, tx.current_txn_first_offset = 17, 123_456_789_012

    loaded = ProducerStateManager.from_snapshot(flog.state.snapshot())

    assert loaded.producer_count() == flog.state.producer_count() == 4
    for pid in (1000, 2000, 3000, 4000):
        assert loaded.entry(pid) == flog.state.entry(pid)
    e = loaded.entry(2000)
    assert e is not None
    assert (e.epoch, e.coordinator_epoch, e.current_txn_first_offset) == (3, 17, 123_456_789_012)
    assert e.last_timestamp_ms == NOW_MS + 6
    assert len(e.batches) == CACHED_BATCHES
    assert e.batches.maxlen == CACHED_BATCHES
    untouched = loaded.entry(1000)
    assert untouched is not None
    assert (untouched.coordinator_epoch, untouched.current_txn_first_offset) == (-1, -1)
    assert loaded.snapshot() == flog.state.snapshot()


def test_empty_state_round_trips() -> None:
    loaded = ProducerStateManager.from_snapshot(ProducerStateManager().snapshot())
    assert loaded.producer_count() == 0


def test_after_loading_retries_of_the_last_five_batches_are_duplicates_with_their_offsets() -> None:
    flog, sent = producer_log()
    loaded = ProducerStateManager.from_snapshot(flog.state.snapshot())
    for pid, batches in sent.items():
        for raw, first, last in batches[-CACHED_BATCHES:]:
            found = loaded.find_duplicate(header(raw))
            assert found is not None, (pid, first)
            assert (found.first_offset, found.last_offset) == (first, last)
        for raw, _, _ in batches[:-CACHED_BATCHES]:  # fell out of the cache: not a retry
            with pytest.raises(KafkaError) as info:
                loaded.find_duplicate(header(raw))
            assert info.value.code == ErrorCode.out_of_order_sequence_number


def test_after_loading_the_next_sequence_is_accepted_and_a_gap_is_refused() -> None:
    flog, _ = producer_log()
    loaded = ProducerStateManager.from_snapshot(flog.state.snapshot())
    entry = loaded.entry(3000)
    assert entry is not None
    next_seq = entry.last_seq + 1

    with pytest.raises(KafkaError) as info:
        loaded.find_duplicate(header(batch(3000, 7, next_seq + 1, 1)))
    assert info.value.code == ErrorCode.out_of_order_sequence_number
    with pytest.raises(KafkaError) as info:
        loaded.find_duplicate(header(batch(3000, 6, next_seq, 1)))
    assert info.value.code == ErrorCode.invalid_producer_epoch

    h = header(batch(3000, 7, next_seq, 3))
    assert loaded.find_duplicate(h) is None
    number_batches([h], flog.end, 0)
    loaded.update(h, NOW_MS + 100)
    assert entry.last_seq == next_seq + 2
    assert entry.batches[-1].first_offset == flog.end
    assert len(entry.batches) == CACHED_BATCHES
    assert entry.last_timestamp_ms == NOW_MS + 100


def test_update_records_the_wall_clock_by_default() -> None:
    state = ProducerStateManager()
    h = header(batch(5, 0, 0, 1))
    state.update(h)
    entry = state.entry(5)
    assert entry is not None
    assert entry.last_timestamp_ms > NOW_MS


def test_a_new_epoch_starts_a_fresh_cache_and_keeps_the_transaction_fields() -> None:
    flog = FakeLog()
    flog.append(batch(9, 0, 0, 2))
    flog.append(batch(9, 0, 2, 2))
    entry = flog.state.entry(9)
    assert entry is not None
    entry.coordinator_epoch = 4
    flog.append(batch(9, 1, 0, 1))
    entry = flog.state.entry(9)
    assert entry is not None
    assert entry.epoch == 1
    assert [(b.first_seq, b.last_seq) for b in entry.batches] == [(0, 0)]
    assert entry.coordinator_epoch == 4


# --------------------------------------------------------------------------- corrupt snapshots


def with_crc(body: bytes, version: int = 1) -> bytes:
    return struct.pack(">hI", version, crc32c.crc32c(body)) + body


def test_every_truncation_of_a_snapshot_is_corrupt() -> None:
    flog, _ = producer_log()
    data = flog.state.snapshot()
    for length in range(len(data)):
        with pytest.raises(CorruptSnapshotError):
            ProducerStateManager.from_snapshot(data[:length])


def test_a_flipped_bit_fails_the_crc() -> None:
    flog, _ = producer_log()
    data = bytearray(flog.state.snapshot())
    data[len(data) // 2] ^= 0x10
    with pytest.raises(CorruptSnapshotError, match="CRC"):
        ProducerStateManager.from_snapshot(bytes(data))


def test_an_unknown_version_is_refused() -> None:
    data = bytearray(ProducerStateManager().snapshot())
    struct.pack_into(">h", data, 0, 2)
    with pytest.raises(CorruptSnapshotError, match="version 2"):
        ProducerStateManager.from_snapshot(bytes(data))


@pytest.mark.parametrize(
    "body",
    [
        struct.pack(">i", 2**31 - 1),  # producer count beyond the bytes
        struct.pack(">i", -1),
        struct.pack(">i", 1) + struct.pack(">qhqiqi", 7, 0, NOW_MS, -1, -1, 2**31 - 1),
        struct.pack(">i", 1) + struct.pack(">qhqiqi", 7, 0, NOW_MS, -1, -1, -3),
        struct.pack(">i", 1) + struct.pack(">qhqiqi", 7, 0, NOW_MS, -1, -1, 1),  # batch missing
        struct.pack(">i", 0) + b"\x00",  # trailing byte
        struct.pack(">i", 2) + struct.pack(">qhqiqi", 7, 0, NOW_MS, -1, -1, 0) * 2,  # repeated id
        struct.pack(">i", 1) + struct.pack(">qhqiqi", -7, 0, NOW_MS, -1, -1, 0),
    ],
    ids=[
        "producer-count",
        "negative-count",
        "batch-count",
        "negative-batch-count",
        "missing-batch",
        "trailing",
        "repeated",
        "negative-id",
    ],
)
def test_counts_and_lengths_are_checked_against_the_bytes_present(body: bytes) -> None:
    with pytest.raises(CorruptSnapshotError):
        ProducerStateManager.from_snapshot(with_crc(body))


def test_corrupt_snapshot_error_is_a_value_error() -> None:
    assert issubclass(CorruptSnapshotError, ValueError)


# --------------------------------------------------------------------------- files


def test_write_snapshot_names_the_file_by_offset_and_reads_back(tmp_path: Path) -> None:
    flog, _ = producer_log()
    path = write_snapshot(tmp_path, flog.end, flog.state)
    assert path == tmp_path / f"{flog.end:020d}.snapshot"
    assert path.name == "00000000000000000057.snapshot"
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no temp file left
    assert path.read_bytes() == flog.state.snapshot()

    empty = write_snapshot(tmp_path, flog.end, ProducerStateManager())  # replaces it
    assert empty == path
    assert ProducerStateManager.from_snapshot(path.read_bytes()).producer_count() == 0


def test_write_snapshot_refuses_an_offset_that_has_no_20_digit_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        write_snapshot(tmp_path, -1, ProducerStateManager())
    with pytest.raises(ValueError):
        write_snapshot(tmp_path, 10**20, ProducerStateManager())
    assert list(tmp_path.iterdir()) == []


def test_list_and_latest_snapshots(tmp_path: Path) -> None:
    state = ProducerStateManager()
    for offset in (300, 5, 120, 0):
        write_snapshot(tmp_path, offset, state)
    for stray in (
        "123.snapshot",
        "0000000000000000000x.snapshot",
        "00000000000000000400.snapshot.tmp",
        "00000000000000000500.log",
        "000000000000000000600.snapshot",
    ):
        (tmp_path / stray).write_bytes(b"")
    (tmp_path / "00000000000000000700.snapshot").mkdir()

    assert list_snapshots(tmp_path) == [
        (offset, tmp_path / f"{offset:020d}.snapshot") for offset in (0, 5, 120, 300)
    ]
    assert latest_snapshot(tmp_path) == (300, tmp_path / "00000000000000000300.snapshot")
    assert latest_snapshot(tmp_path, at_most=300) == (300, tmp_path / f"{300:020d}.snapshot")
    assert latest_snapshot(tmp_path, at_most=299) == (120, tmp_path / f"{120:020d}.snapshot")
    assert latest_snapshot(tmp_path, at_most=4) == (0, tmp_path / f"{0:020d}.snapshot")
    assert latest_snapshot(tmp_path / "missing") is None
    assert list_snapshots(tmp_path / "missing") == []


def test_delete_snapshots_above_and_below(tmp_path: Path) -> None:
    state = ProducerStateManager()
    for offset in (10, 20, 30, 40, 50, 60):
        write_snapshot(tmp_path, offset, state)

    def offsets() -> list[int]:
        return [offset for offset, _ in list_snapshots(tmp_path)]

    assert delete_snapshots(tmp_path, above=50) == [tmp_path / f"{60:020d}.snapshot"]
    assert offsets() == [10, 20, 30, 40, 50]
    delete_snapshots(tmp_path, above=50)  # nothing left to delete
    assert offsets() == [10, 20, 30, 40, 50]
    delete_snapshots(tmp_path, below=45)  # the newest two below 45 stay
    assert offsets() == [30, 40, 50]
    delete_snapshots(tmp_path, below=45)
    assert offsets() == [30, 40, 50]
    delete_snapshots(tmp_path, below=45, keep_below=0)
    assert offsets() == [50]
    delete_snapshots(tmp_path, below=1000, above=40)
    assert offsets() == []
    assert delete_snapshots(tmp_path / "missing", below=10, above=0) == []


def test_load_latest_snapshot_skips_and_deletes_corrupt_ones(tmp_path: Path) -> None:
    flog, _ = producer_log()
    write_snapshot(tmp_path, 10, ProducerStateManager())
    write_snapshot(tmp_path, 20, flog.state)
    bad = write_snapshot(tmp_path, 30, flog.state)
    bad.write_bytes(bad.read_bytes()[:-1])
    write_snapshot(tmp_path, 40, ProducerStateManager())

    found = load_latest_snapshot(tmp_path, at_most=35)
    assert found is not None
    offset, state = found
    assert offset == 20
    assert state.snapshot() == flog.state.snapshot()
    assert not bad.exists()
    assert [o for o, _ in list_snapshots(tmp_path)] == [10, 20, 40]
    assert load_latest_snapshot(tmp_path, at_most=9) is None


# --------------------------------------------------------------------------- replay


def test_replaying_the_stored_batches_rebuilds_the_state() -> None:
    flog, _ = producer_log()
    rebuilt = ProducerStateManager()
    for h in scan_batches(bytes(flog.stored)):
        rebuilt.update(h, NOW_MS + (h.base_offset * 7) % 3)  # time does not matter here
    for pid in (1000, 2000, 3000, 4000):
        want, got = flog.state.entry(pid), rebuilt.entry(pid)
        assert want is not None and got is not None
        assert (got.epoch, list(got.batches)) == (want.epoch, list(want.batches))


def test_replaying_a_batch_twice_does_not_double_it() -> None:
    flog = FakeLog()
    (h,) = flog.append(batch(1, 0, 0, 3))
    flog.state.update(h)
    flog.state.update(h)
    entry = flog.state.entry(1)
    assert entry is not None
    assert [(b.first_offset, b.last_offset) for b in entry.batches] == [(0, 2)]


def test_replaying_from_before_a_snapshot_changes_nothing(tmp_path: Path) -> None:
    """A snapshot taken half way, then every stored batch replayed from offset 0."""
    flog = FakeLog()
    for seq in range(0, 12, 3):
        flog.append(batch(1, 0, seq, 3))
        flog.append(batch(2, 0, seq, 3))
    write_snapshot(tmp_path, flog.end, flog.state)
    half = flog.state.snapshot()
    for seq in range(12, 18, 3):
        flog.append(batch(1, 0, seq, 3))

    found = load_latest_snapshot(tmp_path)
    assert found is not None
    offset, state = found
    assert state.snapshot() == half
    for h in scan_batches(bytes(flog.stored)):
        state.update(h, NOW_MS)
    for pid in (1, 2):
        want, got = flog.state.entry(pid), state.entry(pid)
        assert want is not None and got is not None
        assert list(got.batches) == list(want.batches)
    assert offset == 24
