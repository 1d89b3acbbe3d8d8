"""The log cleaner on real FileLogs: the last value per key kept across segments at its
offset, the active segment untouched, tombstones kept until their delete horizon (KIP-534),
min.compaction.lag.ms and max.compaction.lag.ms, a full offset map cleaning part of the
dirty range, crash leftovers settled on reopen, a read under way during a swap, producers'
last batches kept, the checkpoint, and KIP-226 reconfiguration."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from pathlib import Path

import pytest

from kplane.broker.config.errors import ConfigException
from kplane.broker.config.kafka_config import KafkaConfig
from kplane.broker.log.file_log import FileLog
from kplane.broker.log.log_cleaner import (
    CleanerConfig,
    LogCleaner,
    group_segments_by_size,
)
from kplane.broker.log.log_config import LogSettings
from kplane.broker.log.log_manager import LogManager, LogManagerConfig
from kplane.broker.log.partition import TopicPartition
from kplane.broker.log.segment import LogSegment
from kplane.broker.utils.file_region import materialize
from kplane.protocol.compression import COMPRESSION_GZIP
from kplane.protocol.records import (
    Record,
    build_batch,
    iter_all_records,
    number_batches,
    read_partial_batches,
    scan_batches,
)

NOW = int(time.time() * 1000)
TP = TopicPartition("compacted", 0)
COMPACT = ("compact",)


def _records(pairs: list[tuple[bytes | None, bytes | None]], ts: int = NOW) -> bytes:
    return build_batch(
        [Record(key=k, value=v, timestamp=ts, headers=()) for k, v in pairs]
    )


class Host:
    """The LogManager's part the cleaner sees, over one FileLog."""

    def __init__(self, file_log: FileLog) -> None:
        self.file_log = file_log
        self.offsets: dict[TopicPartition, int] = {}
        self.start_checkpoints = 0

    def compacted_logs(self) -> list[tuple[TopicPartition, FileLog]]:
        return [(TP, self.file_log)] if self.file_log.settings.compact else []

    def cleaner_offsets(self) -> dict[TopicPartition, int]:
        return dict(self.offsets)

    def update_cleaner_offset(self, tp: TopicPartition, offset: int) -> None:
        self.offsets[tp] = offset

    def checkpoint_log_start_offsets(self) -> None:
        self.start_checkpoints += 1


class Harness:
    def __init__(self, directory: Path, **settings: object) -> None:
        self.directory = directory
        values: dict[str, object] = {
            "cleanup_policy": COMPACT,
            "min_cleanable_dirty_ratio": 0.01,
            "segment_bytes": 400,
            "index_interval_bytes": 100,
        }
        values.update(settings)
        self.settings = LogSettings(**values)  # type: ignore[arg-type]
        self.retired: list[LogSegment] = []
        self.log = self.open()
        self.host = Host(self.log)
        self.now = NOW
        self.cleaner = LogCleaner(
            CleanerConfig(dedupe_buffer_size=1 << 20), self.host, clock=lambda: self.now
        )

    def open(self, clean: bool = True) -> FileLog:
        return FileLog(
            self.directory,
            lambda: self.settings,
            lambda seg, delay: self.retired.append(seg),
            clean=clean,
        )

    def reopen(self, clean: bool = True) -> None:
        self.log = self.open(clean)
        self.host.file_log = self.log

    def append(self, data: bytes) -> BatchRange:
        batches = scan_batches(data)
        first = self.log.log_end_offset
        number_batches(batches, first, 0)
        self.log.append(data, batches)
        for batch in batches:
            if batch.producer_id >= 0:
                self.log.producer_state.update(batch)
        return first, self.log.log_end_offset - 1

    def put(self, key: bytes | None, value: bytes | None, ts: int = NOW) -> int:
        return self.append(_records([(key, value)], ts))[0]

    def roll(self) -> None:
        self.log._roll(self.settings)

    def records(self, offset: int = 0) -> list[tuple[int, bytes | None, bytes | None]]:
        out = []
        while offset < self.log.log_end_offset:
            pieces = self.log.read(offset, 1 << 20, True)
            data = b"".join(materialize(pieces))
            found = [r for r in iter_all_records(data) if r.offset >= offset]
            if not found:
                break
            out += [(r.offset, r.key, r.value) for r in found]
            offset = found[-1].offset + 1
        return out

    def latest(self) -> dict[bytes | None, bytes | None]:
        out: dict[bytes | None, bytes | None] = {}
        for _, key, value in self.records():
            out[key] = value
        return out

    def clean(self) -> bool:
        return self.cleaner.clean_filthiest_log()


BatchRange = tuple[int, int]


def _keyed_updates(h: Harness, keys: int, rounds: int) -> dict[bytes, tuple[int, bytes]]:
    last: dict[bytes, tuple[int, bytes]] = {}
    for r in range(rounds):
        for k in range(keys):
            key, value = b"key-%d" % k, b"value-%d-%d" % (k, r) + b"x" * 20
            last[key] = (h.put(key, value), value)
    return last


def test_keeps_the_last_value_per_key_at_its_offset_and_leaves_the_active_segment(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path)
    last = _keyed_updates(h, keys=4, rounds=10)
    assert len(h.log.segments) > 4
    active = h.log.segments[-1]
    active_records = [r for r in h.records() if r[0] >= active.base_offset]
    end = h.log.log_end_offset
    before_bytes = h.log.size_bytes

    assert h.clean()

    records = h.records()
    assert h.log.log_end_offset == end
    assert h.log.segments[-1] is active
    assert [r for r in records if r[0] >= active.base_offset] == active_records
    cleaned = [r for r in records if r[0] < active.base_offset]
    keys = [key for _, key, _ in cleaned]
    assert len(keys) == len(set(keys)), "one record per key below the active segment"
    for offset, key, value in records:
        if offset < active.base_offset and key in last and last[key][0] < active.base_offset:
            assert (offset, value) == last[key], "the last value, at its own offset"
    assert h.latest() == {k: v for k, (_, v) in last.items()}
    assert h.log.size_bytes < before_bytes
    assert h.host.offsets[TP] == active.base_offset
    assert [r[0] for r in records] == sorted(r[0] for r in records)
    assert not list(tmp_path.glob("*.cleaned")) and not list(tmp_path.glob("*.swap"))
    assert {p.name for p in tmp_path.glob("*.deleted")}, "the replaced files await removal"
    # The cleaned log reopens as it was.
    expected = h.records()
    h.log.close()
    h.reopen()
    assert h.records() == expected


def test_nothing_is_cleaned_below_the_dirty_ratio_and_the_active_segment_alone_is_never_dirty(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path, min_cleanable_dirty_ratio=0.5)
    for i in range(5):
        h.put(b"same", b"v%d" % i)
    assert len(h.log.segments) == 1
    assert not h.clean(), "only the active segment: nothing is cleanable"
    _keyed_updates(h, keys=2, rounds=10)
    assert h.clean()
    assert not h.clean(), "cleaned up to the active segment: no dirty bytes left"
    assert h.cleaner.dirtiest_ratio == 0.0


def test_tombstones_stay_until_their_delete_horizon_then_go(tmp_path: Path) -> None:
    h = Harness(tmp_path, delete_retention_ms=60_000)
    h.put(b"gone", b"v1")
    h.put(b"kept", b"k1")
    h.put(b"gone", None)  # tombstone
    h.roll()
    h.put(b"other", b"o1")

    assert h.clean()
    assert h.latest() == {b"gone": None, b"kept": b"k1", b"other": b"o1"}
    assert [(k, v) for _, k, v in h.records()].count((b"gone", None)) == 1
    h.now += 30_000  # before the horizon written by the first cleaning
    h.roll()
    h.put(b"more", b"m1")
    h.roll()
    h.put(b"more", b"m2")
    assert h.clean()
    assert (b"gone", None) in [(k, v) for _, k, v in h.records()]
    h.now += 30_001  # past it
    h.roll()
    h.put(b"more", b"m3")
    assert h.clean()
    keys = [k for _, k, _ in h.records()]
    assert b"gone" not in keys
    assert h.latest() == {b"kept": b"k1", b"other": b"o1", b"more": b"m3"}


def test_min_compaction_lag_keeps_recent_segments_dirty(tmp_path: Path) -> None:
    h = Harness(tmp_path, min_compaction_lag_ms=60_000)
    for r in range(6):
        h.put(b"a", b"old-%d" % r + b"x" * 100, ts=NOW - 120_000)
    old_end = h.log.log_end_offset
    h.roll()
    for r in range(6):
        h.put(b"a", b"new-%d" % r + b"x" * 100, ts=NOW)
    h.roll()
    h.put(b"b", b"tail")

    assert h.clean()
    first_recent = next(s for s in h.log.segments if s.base_offset >= old_end).base_offset
    assert h.host.offsets[TP] == first_recent, "cleaning stops at the first recent segment"
    records = h.records()
    assert [v for o, k, v in records if o < first_recent] == [b"old-5" + b"x" * 100]
    assert len([o for o, _, _ in records if o >= first_recent]) == 7, "recent ones untouched"
    h.now += 120_000
    assert h.clean()
    assert h.latest()[b"a"] == b"new-5" + b"x" * 100
    assert len([k for _, k, _ in h.records() if k == b"a"]) == 1


def test_max_compaction_lag_forces_a_log_below_the_dirty_ratio(tmp_path: Path) -> None:
    h = Harness(tmp_path, min_cleanable_dirty_ratio=1.0, max_compaction_lag_ms=60_000)
    for r in range(8):
        h.put(b"a", b"%d" % r + b"x" * 100, ts=NOW)
    h.roll()
    h.put(b"b", b"x" * 100)
    h.host.offsets[TP] = 0
    assert not h.clean(), "neither dirty enough nor old enough"
    h.now += 120_000
    assert h.clean()
    assert len([k for _, k, _ in h.records() if k == b"a"]) == 1


def test_a_full_offset_map_cleans_part_of_the_dirty_range_then_the_rest(tmp_path: Path) -> None:
    h = Harness(tmp_path, segment_bytes=100_000)
    h.cleaner = LogCleaner(
        CleanerConfig(dedupe_buffer_size=24 * 4, load_factor=1.0), h.host, clock=lambda: h.now
    )
    for r in range(2):
        for k in range(10):
            h.put(b"k%d" % k, b"r%d" % r)
    h.roll()
    h.put(b"tail", b"t")
    end = h.log.segments[-1].base_offset

    assert h.clean()
    first = h.host.offsets[TP]
    assert 0 < first < end, "the map held 4 keys: the round stopped where it filled"
    rounds = 1
    while h.host.offsets[TP] < end:
        assert h.clean()
        rounds += 1
        assert rounds < 20
    assert h.latest() == {**{b"k%d" % k: b"r1" for k in range(10)}, b"tail": b"t"}
    assert len(h.records()) == 11


def test_keyless_records_and_control_batches_are_kept(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.put(None, b"no key 1")
    h.put(b"a", b"1")
    h.put(None, b"no key 2")
    h.put(b"a", b"2")
    h.roll()
    h.put(b"z", b"z")
    assert h.clean()
    assert [(k, v) for _, k, v in h.records()] == [
        (None, b"no key 1"), (None, b"no key 2"), (b"a", b"2"), (b"z", b"z"),
    ]


def test_a_producers_last_batch_stays_as_an_empty_batch(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    pid = 4242
    producer_batch = build_batch(
        [Record(key=b"a", value=b"from producer", timestamp=NOW, headers=())],
        producer_id=pid, producer_epoch=3, base_sequence=0,
    )
    offset = h.append(producer_batch)[0]
    h.put(b"a", b"later")
    h.roll()
    h.put(b"z", b"z")
    assert h.clean()
    data = h.log.segments[0].read(0, h.log.segments[0].size)
    headers = read_partial_batches(data)
    kept = [b for b in headers if b.producer_id == pid]
    assert len(kept) == 1 and kept[0].record_count == 0
    assert kept[0].base_offset == offset and kept[0].producer_epoch == 3
    assert h.latest() == {b"a": b"later", b"z": b"z"}
    # Reopened, the producer's state is rebuilt from the empty batch.
    h.log.close()
    for snapshot in tmp_path.glob("*.snapshot"):
        snapshot.unlink()
    h.reopen()
    entry = h.log.producer_state.entry(pid)
    assert entry is not None and entry.epoch == 3 and entry.last_seq == 0


def test_groups_respect_segment_bytes(tmp_path: Path) -> None:
    h = Harness(tmp_path, segment_bytes=250)
    for i in range(12):
        h.put(b"k%d" % i, b"v" * 60)
    segments = h.log.segments[:-1]
    groups = group_segments_by_size(segments, 250, 1 << 20, h.log.segments[-1].base_offset)
    assert [s for g in groups for s in g] == segments
    assert all(sum(s.size for s in g) <= 250 or len(g) == 1 for g in groups)
    assert len(groups) == len(segments), "each segment fills most of segment.bytes"
    assert len(group_segments_by_size(segments, 10_000, 1 << 20, 0)) == 1


def test_crash_leftovers_cleaned_files_are_deleted_and_a_swap_is_completed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = Harness(tmp_path)
    _keyed_updates(h, keys=3, rounds=8)
    expected_latest = h.latest()
    old_bases = [s.base_offset for s in h.log.segments[:-1]]
    assert len(old_bases) > 2
    h.settings = dataclasses.replace(h.settings, segment_bytes=100_000)  # one group
    group: list[int] = []

    def crash(self: FileLog, cleaned: LogSegment, old: list[LogSegment]) -> bool:
        group.extend(s.base_offset for s in old)
        cleaned.change_file_suffixes(".cleaned", ".swap")
        raise SystemExit("the broker died mid-swap")

    monkeypatch.setattr(FileLog, "replace_segments", crash)
    with pytest.raises(SystemExit):
        h.cleaner.clean_filthiest_log()
    monkeypatch.undo()
    assert len(group) > 1
    assert list(tmp_path.glob("*.log.swap"))
    assert all((tmp_path / f"{b:020d}.log").exists() for b in old_bases)
    stray = tmp_path / f"{old_bases[-1]:020d}.log.cleaned"
    stray.write_bytes(b"half-written")
    (tmp_path / f"{old_bases[-1]:020d}.index.cleaned").write_bytes(b"")

    h.reopen(clean=False)

    assert not list(tmp_path.glob("*.cleaned")) and not list(tmp_path.glob("*.swap"))
    assert h.latest() == expected_latest
    swapped = h.log.segments[0]
    assert swapped.base_offset == group[0]
    for base in group[1:]:
        if base < swapped.next_offset:
            assert not (tmp_path / f"{base:020d}.log").exists(), "a covered segment went"
    data = swapped.read(0, swapped.size)
    keys = [r.key for r in iter_all_records(data)]
    assert keys and len(keys) == len(set(keys)), "the swapped-in segment holds the group"
    assert h.log.segments[1].base_offset >= swapped.next_offset
    expected = h.records()
    assert [o for o, _, _ in expected] == sorted({o for o, _, _ in expected})


def test_a_swap_cut_short_before_the_rename_to_swap_leaves_the_originals(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    _keyed_updates(h, keys=3, rounds=8)
    expected = h.records()
    h.log.close()
    base = h.log.segments[0].base_offset
    for suffix in (".log.cleaned", ".index.cleaned", ".timeindex.cleaned"):
        (tmp_path / f"{base:020d}{suffix}").write_bytes(b"")
    (tmp_path / f"{base:020d}.log.deleted").write_bytes(b"old")
    h.reopen()
    assert h.records() == expected
    assert not list(tmp_path.glob("*.cleaned")) and not list(tmp_path.glob("*.deleted"))


def test_a_read_under_way_during_a_swap_still_returns_its_data(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    _keyed_updates(h, keys=2, rounds=10)
    first = h.log.segments[0]
    original = first.read(0, first.size)
    real_find = first.find
    swapped = threading.Event()

    def find_then_swap(offset: int, limit: int | None = None):  # type: ignore[no-untyped-def]
        found = real_find(offset, limit)
        if not swapped.is_set():
            swapped.set()
            assert h.clean()  # the segment is replaced while this read holds it
        return found

    first.find = find_then_swap  # type: ignore[method-assign]
    pieces = h.log.read(0, 1 << 20, True)
    assert swapped.is_set()
    assert first in h.retired and first not in h.log.segments
    assert first.log_path.with_name(first.log_path.name + ".deleted").exists(), "still open"
    data = b"".join(materialize(pieces))
    assert data == original[: len(data)] and data
    assert next(r.offset for r in iter_all_records(data)) == 0


def test_retention_that_took_the_segments_meanwhile_aborts_the_swap(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    _keyed_updates(h, keys=2, rounds=10)
    segments = h.log.segments
    h.log.maybe_increment_log_start_offset(segments[2].base_offset)
    cleaned = LogSegment(
        tmp_path, segments[0].base_offset, index_interval_bytes=100,
        max_index_bytes=1 << 20, created_ms=NOW, suffix=".cleaned",
    )
    assert not h.log.replace_segments(cleaned, segments[:2])
    assert h.log.segments[0] is segments[2]


def test_the_log_manager_keeps_the_cleaner_checkpoint(tmp_path: Path) -> None:
    settings = LogSettings(
        cleanup_policy=COMPACT, min_cleanable_dirty_ratio=0.01, segment_bytes=400
    )
    manager = LogManager(
        LogManagerConfig(storage="file", log_dirs=(str(tmp_path / "d0"),)),
        lambda topic: settings,
    )
    manager.startup(CleanerConfig(enable=True, threads=0))
    assert manager.cleaner is not None
    partition = manager.get_or_create(TP)
    for r in range(10):
        for k in range(3):
            data = _records([(b"k%d" % k, b"%d" % r + b"x" * 30)])
            partition.append_records_as_leader(data, scan_batches(data))
    assert manager.cleaner.clean_filthiest_log()
    active = partition.log.segments[-1].base_offset  # type: ignore[attr-defined]
    checkpoint = (tmp_path / "d0" / "cleaner-offset-checkpoint").read_text().split("\n")
    assert checkpoint[:3] == ["0", "1", f"{TP.topic} 0 {active}"]
    manager.shutdown()
    again = LogManager(
        LogManagerConfig(storage="file", log_dirs=(str(tmp_path / "d0"),)),
        lambda topic: settings,
    )
    again.startup()
    assert again.cleaner_offsets() == {TP: active}
    again.delete(TP)
    assert again.cleaner_offsets() == {}
    again.shutdown()


def _config(**props: str) -> KafkaConfig:
    return KafkaConfig.from_properties({"broker.id": "0", **props})


def test_threads_follow_kip_226_reconfiguration(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    old = _config()
    cleaner = LogCleaner(CleanerConfig.from_config(old), h.host)
    cleaner.startup()
    try:
        assert cleaner.thread_count == 1
        with pytest.raises(ConfigException, match="at least 1"):
            cleaner.validate_reconfiguration(_config(**{"log.cleaner.threads": "0"}))
        with pytest.raises(ConfigException, match="double"):
            cleaner.validate_reconfiguration(_config(**{"log.cleaner.threads": "3"}))
        with pytest.raises(ConfigException, match="too small"):
            cleaner.validate_reconfiguration(
                _config(**{"log.cleaner.dedupe.buffer.size": "10"})
            )
        new = _config(**{"log.cleaner.threads": "2", "log.cleaner.backoff.ms": "50"})
        cleaner.validate_reconfiguration(new)
        cleaner.reconfigure(old, new)
        assert cleaner.thread_count == 2
        names = {t.name for t in threading.enumerate()}
        assert {"kafka-log-cleaner-thread-0", "kafka-log-cleaner-thread-1"} <= names
        assert cleaner.config.backoff_ms == 50
    finally:
        cleaner.shutdown()
    assert cleaner.thread_count == 0


def test_cleaner_threads_clean_in_the_background(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    _keyed_updates(h, keys=2, rounds=10)
    cleaner = LogCleaner(CleanerConfig(backoff_ms=10, dedupe_buffer_size=1 << 20), h.host)
    cleaner.startup()
    try:
        deadline = time.monotonic() + 10
        while h.host.offsets.get(TP) != h.log.segments[-1].base_offset:
            assert time.monotonic() < deadline, "the cleaner thread did not clean the log"
            time.sleep(0.01)
    finally:
        cleaner.shutdown()
    assert len([k for o, k, _ in h.records() if o < h.log.segments[-1].base_offset]) <= 2


def test_a_bad_load_factor_is_refused() -> None:
    with pytest.raises(ConfigException, match="load\\.factor"):
        CleanerConfig(load_factor=1.5).check()


def test_mtime_of_a_cleaned_segment_is_its_originals(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    _keyed_updates(h, keys=2, rounds=10)
    group_last = h.log.segments[-2]
    past = NOW - 3_600_000
    os.utime(group_last.log_path, ns=(past * 1_000_000, past * 1_000_000))
    assert h.clean()
    assert h.log.segments[-2].last_modified_ms == past


def test_compressed_batches_are_compacted_and_keep_their_codec(tmp_path: Path) -> None:
    h = Harness(tmp_path, segment_bytes=4000)
    for r in range(6):
        pairs = [(b"key-%d" % k, b"value-%d-%d" % (k, r)) for k in range(8)]
        data = build_batch(
            [Record(key=k, value=v, timestamp=NOW, headers=()) for k, v in pairs],
            compression=COMPRESSION_GZIP,
        )
        h.append(data)
    h.roll()
    h.put(b"tail", b"t")
    assert h.clean()
    assert h.latest() == {**{b"key-%d" % k: b"value-%d-5" % k for k in range(8)}, b"tail": b"t"}
    first = h.log.segments[0]
    headers = read_partial_batches(first.read(0, first.size))
    assert headers and all(b.compression == COMPRESSION_GZIP for b in headers)
    assert sum(b.record_count for b in headers) == 8
