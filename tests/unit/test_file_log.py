"""FileLog on real files: appends, reads by offset, rolls, indexes, recovery of a damaged
tail, retention, the log start offset, and producer state across a reopen."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from kplane.broker.log.file_log import FileLog
from kplane.broker.log.log_config import LogSettings
from kplane.broker.log.segment import LogSegment
from kplane.broker.utils.file_region import materialize
from kplane.protocol.records import (
    Record,
    build_batch,
    iter_all_records,
    number_batches,
    scan_batches,
)

NOW = int(time.time() * 1000)


def _batch(
    values: list[bytes], producer: tuple[int, int, int] | None = None, ts: int = NOW
) -> bytes:
    records = [Record(offset=i, timestamp=ts + i, key=b"k%d" % i, value=v, headers=())
               for i, v in enumerate(values)]
    if producer is None:
        return build_batch(records)
    pid, epoch, seq = producer
    return build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


class Harness:
    def __init__(self, directory: Path, **settings: object) -> None:
        self.directory = directory
        self.settings = LogSettings(**settings)  # type: ignore[arg-type]
        self.retired: list[LogSegment] = []
        self.log = self.open()

    def open(self, clean: bool = True, recovery_point: int = 0) -> FileLog:
        return FileLog(
            self.directory,
            lambda: self.settings,
            lambda seg, delay: self.retired.append(seg),
            clean=clean,
            recovery_point=recovery_point,
        )

    def append(self, data: bytes) -> tuple[int, int]:
        batches = scan_batches(data)
        first = self.log.log_end_offset
        number_batches(batches, first, 0)
        self.log.append(data, batches)
        return first, self.log.log_end_offset - 1

    def values(self, offset: int = 0) -> list[tuple[int, bytes | None]]:
        out = []
        while offset < self.log.log_end_offset:
            pieces = self.log.read(offset, 1 << 20, True)
            data = b"".join(materialize(pieces))
            records = [r for r in iter_all_records(data) if r.offset >= offset]
            if not records:
                break
            out += [(r.offset, r.value) for r in records]
            offset = records[-1].offset + 1
        return out


def test_append_read_and_reopen(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    assert h.append(_batch([b"a", b"b"])) == (0, 1)
    assert h.append(_batch([b"c"])) == (2, 2)
    assert h.values() == [(0, b"a"), (1, b"b"), (2, b"c")]
    assert h.values(2) == [(2, b"c")]
    h.log.close()
    assert (tmp_path / f"{0:020d}.log").exists()
    reopened = h.open()
    h.log = reopened
    assert reopened.log_end_offset == 3
    assert h.values() == [(0, b"a"), (1, b"b"), (2, b"c")]
    assert h.append(_batch([b"d"])) == (3, 3)


def test_segments_roll_on_size_and_reads_cross_them(tmp_path: Path) -> None:
    h = Harness(tmp_path, segment_bytes=300, index_interval_bytes=50)
    for i in range(20):
        h.append(_batch([b"v%02d" % i + b"x" * 40]))
    logs = sorted(p.name for p in tmp_path.glob("*.log"))
    assert len(logs) > 3
    assert h.values() == [(i, b"v%02d" % i + b"x" * 40) for i in range(20)]
    assert all((tmp_path / name.replace(".log", ".index")).exists() for name in logs)
    h.log.close()
    h.log = h.open()
    assert [o for o, _ in h.values(7)] == list(range(7, 20))


def test_unclean_stop_recovers_to_the_last_whole_batch(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    for i in range(5):
        h.append(_batch([b"r%d" % i]))
    segment = tmp_path / f"{0:020d}.log"
    size = segment.stat().st_size
    with open(segment, "r+b") as fh:
        fh.truncate(size - 7)  # the last batch cut mid-way
    reopened = h.open(clean=False)
    h.log = reopened
    assert reopened.log_end_offset == 4
    assert [v for _, v in h.values()] == [b"r0", b"r1", b"r2", b"r3"]
    assert h.append(_batch([b"next"])) == (4, 4)


def test_flipped_bytes_cut_the_log_at_the_damaged_batch(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    positions = []
    for i in range(4):
        positions.append(h.log.size_bytes)
        h.append(_batch([b"r%d" % i]))
    segment = tmp_path / f"{0:020d}.log"
    with open(segment, "r+b") as fh:
        fh.seek(positions[2] + 70)
        byte = fh.read(1)
        fh.seek(positions[2] + 70)
        fh.write(bytes([byte[0] ^ 0xFF]))
    h.log = h.open(clean=False)
    assert h.log.log_end_offset == 2
    assert segment.stat().st_size == positions[2]


def test_retention_by_bytes_and_by_time_removes_whole_segments(tmp_path: Path) -> None:
    h = Harness(tmp_path, segment_bytes=200, retention_bytes=400)
    for i in range(12):
        h.append(_batch([b"x" * 60], ts=NOW + i))
    before = len(list(tmp_path.glob("*.log")))
    deleted = h.log.delete_old_segments(now_ms=NOW + 20)
    assert deleted > 0
    assert len(list(tmp_path.glob("*.log"))) == before - deleted
    assert h.log.size_bytes <= 400 + 200
    start = h.log.log_start_offset
    assert start > 0 and h.values(start)[0][0] == start
    assert all(seg.log_path.with_name(seg.log_path.name + ".deleted").exists() for seg in h.retired)

    h.settings = LogSettings(segment_bytes=200, retention_ms=10)
    h.log.delete_old_segments(now_ms=NOW + 10_000_000)
    assert h.log.log_start_offset == h.log.log_end_offset == 12
    assert h.append(_batch([b"after"])) == (12, 12)


def test_log_start_offset_moves_and_drops_segments_below(tmp_path: Path) -> None:
    h = Harness(tmp_path, segment_bytes=200)
    for _ in range(10):
        h.append(_batch([b"y" * 60]))
    assert h.log.maybe_increment_log_start_offset(6)
    assert not h.log.maybe_increment_log_start_offset(3)
    assert h.log.log_start_offset == 6
    assert all(seg.next_offset <= 6 for seg in h.retired)


def test_timestamps_find_offsets(tmp_path: Path) -> None:
    h = Harness(tmp_path, index_interval_bytes=1)
    for i in range(10):
        h.append(_batch([b"t"], ts=NOW + 100 * i))
    assert h.log.offset_for_timestamp(NOW + 450) == (5, NOW + 500)
    assert h.log.offset_for_timestamp(0) == (0, NOW)
    assert h.log.offset_for_timestamp(NOW + 10_000) is None
    assert h.log.max_timestamp() == (9, NOW + 900)


def test_idempotent_producer_state_survives_unclean_and_clean_restarts(tmp_path: Path) -> None:
    h = Harness(tmp_path, segment_bytes=250)
    for seq in range(0, 8, 2):
        batch = _batch([b"p", b"q"], producer=(7, 0, seq))
        h.append(batch)
    h.log = h.open(clean=False)  # kill -9: no close, replay from the last snapshot
    retry = scan_batches(_batch([b"p", b"q"], producer=(7, 0, 6)))[0]
    duplicate = h.log.producer_state.find_duplicate(retry)
    assert duplicate is not None and duplicate.first_offset == 6
    h.log.close()
    h.log = h.open()
    assert h.log.producer_state.find_duplicate(retry) is not None


def test_a_segment_with_a_bad_index_is_rebuilt(tmp_path: Path) -> None:
    h = Harness(tmp_path, index_interval_bytes=1)
    for i in range(6):
        h.append(_batch([b"i%d" % i]))
    h.log.close()
    index = tmp_path / f"{0:020d}.index"
    index.write_bytes(os.urandom(16))
    h.log = h.open()
    assert [v for _, v in h.values(3)] == [b"i3", b"i4", b"i5"]


@pytest.mark.parametrize("offset", [0, 3, 5])
def test_min_one_batch_returns_a_batch_larger_than_max_bytes(tmp_path: Path, offset: int) -> None:
    h = Harness(tmp_path)
    for _ in range(6):
        h.append(_batch([b"z" * 500]))
    pieces = h.log.read(offset, 10, True)
    data = b"".join(materialize(pieces))
    assert [r.offset for r in iter_all_records(data)] == [offset]
    partial = b"".join(materialize(h.log.read(offset, 10, False)))
    assert len(partial) == 10  # Kafka serves the range; the client drops a partial batch
    assert list(iter_all_records(partial)) == []
