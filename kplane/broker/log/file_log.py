"""FileLog: a partition's log as Kafka keeps it on disk, a directory of segments.

``<log dir>/<topic>-<partition>/`` holds ``<base offset>.log|.index|.timeindex`` per segment
(and ``.txnindex`` for one holding abort markers), ``<offset>.snapshot`` files of the producer
state and ``leader-epoch-checkpoint``.
Appends go to the active (last) segment, which rolls on size, age or a full index. Reads take
one byte range of one segment. The segment list is replaced, never changed in place, so
readers work on a consistent copy without a lock; a removed segment's file stays open until
``file.delete.delay.ms`` has passed, so a read already under way finishes. Rolls, retention
and the log cleaner's swap (:meth:`FileLog.replace_segments`) change the list under one lock.

A cleaning cut short by a stop is settled on load as Kafka's LogLoader does: ``*.cleaned``
files are deleted, a ``*.swap`` segment is completed (the segments it covers removed, its
files renamed to their final names), ``*.deleted`` files are removed.

Load replays the batches past the newest producer-state snapshot; the transactions their
markers complete are indexed again, so each replayed segment's ``.txnindex`` is first cut
back to the snapshot's offset and ends up matching the segment as recovered.

A follower's divergent tail is cut by :meth:`FileLog.truncate_to` (Kafka's truncateTo):
later segments retired as retention's are, the last one cut at a batch boundary with its
indexes, the producer state rebuilt from the newest snapshot left;
:meth:`FileLog.truncate_fully_and_start_at` replaces every segment with an empty one.

An I/O error in any of its methods takes the log's log dir offline (Kafka's
maybeHandleIOException, see ``broker/log/log_dir_failure_channel.py``) and raises
KafkaStorageError; nothing is read or written in an offline log dir.
"""

from __future__ import annotations

import bisect
import functools
import os
import random
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

import structlog

from kplane.broker.log.leader_epoch_cache import LeaderEpochCache
from kplane.broker.log.log import (
    PREFIX_SIZE,
    Log,
    control_marker,
    first_at_or_after,
    latest_of_max,
    replay_into,
)
from kplane.broker.log.log_config import LogSettings
from kplane.broker.log.log_dir_failure_channel import (
    KafkaStorageError,
    LogDirFailureChannel,
    describe,
)
from kplane.broker.log.producer_state import (
    CompletedTxn,
    ProducerStateManager,
    delete_snapshots,
    load_latest_snapshot,
    write_snapshot,
)
from kplane.broker.log.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
)
from kplane.broker.log.transaction_index import AbortedTxn, TransactionIndex
from kplane.broker.utils.file_region import Transferable
from kplane.broker.utils.files import fsync_dir
from kplane.protocol.fetch_codec import Piece
from kplane.protocol.records import (
    BatchHeader,
    EndTxnMarker,
    Record,
    iter_records,
    served_prefix,
)

log = structlog.get_logger(__name__)

LEFTOVER_SUFFIXES = (".tmp",)
SEGMENT_FILE_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
Retire = Callable[[LogSegment, int], None]
"""Close and remove a segment's renamed files after a delay in ms (the LogManager's)."""
OnRoll = Callable[["FileLog", int], None]
"""Called with the new segment's base offset after a roll (the LogManager flushes the
segments before it in the background)."""
P = ParamSpec("P")
R = TypeVar("R")
Method = Callable[Concatenate["FileLog", P], R]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _storage(action: str) -> Callable[[Method[P, R]], Method[P, R]]:
    """Kafka's maybeHandleIOException around a FileLog method doing ``action``: nothing is
    tried in an offline log dir, and an OSError takes the dir offline; both raise
    KafkaStorageError. A log closed meanwhile (its partition deleted) raises the OSError
    as it is: the dir did not fail."""

    def decorate(method: Method[P, R]) -> Method[P, R]:
        @functools.wraps(method)
        def run(self: FileLog, *args: P.args, **kwargs: P.kwargs) -> R:
            if self.failures.is_offline(self.log_dir):
                raise KafkaStorageError(f"{self.directory} is in an offline log dir")
            try:
                return method(self, *args, **kwargs)
            except OSError as exc:
                if self._closed:
                    raise
                what = f"{action} {self.directory.name}"
                self.failures.maybe_add_offline_log_dir(self.log_dir, what, exc)
                raise KafkaStorageError(f"{what} in {self.log_dir}: {describe(exc)}") from None

        return run

    return decorate


class FileLog(Log):
    """A partition's segments on disk; appends are serialized by the Partition's lock."""

    def __init__(
        self,
        directory: Path,
        settings: Callable[[], LogSettings],
        retire: Retire,
        *,
        on_roll: OnRoll | None = None,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean: bool = True,
        failures: LogDirFailureChannel | None = None,
        lock: threading.RLock | None = None,
    ) -> None:
        """``lock``: the lock to share (a future log shares its current log's, so one lock
        serializes both while a replica moves between log dirs)."""
        self.directory = directory
        self.log_dir = str(directory.parent)
        self.failures = failures if failures is not None else LogDirFailureChannel()
        """Where an I/O error takes the log dir offline (the LogManager's channel)."""
        self._closed = False
        self._settings = settings
        self._retire = retire
        self._on_roll = on_roll
        directory.mkdir(parents=True, exist_ok=True)
        self.leader_epochs = LeaderEpochCache(directory)
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._start = log_start_offset
        self._end = 0
        self.recovery_point = recovery_point
        self._unflushed = 0
        self._last_flush_ms = _now_ms()
        self.producer_state = ProducerStateManager()
        self.lock = lock if lock is not None else threading.RLock()  # see Log.lock
        self._load(clean)

    # loading -------------------------------------------------------------------------
    def _segment(self, base_offset: int, settings: LogSettings) -> LogSegment:
        segment = LogSegment(
            self.directory,
            base_offset,
            index_interval_bytes=settings.index_interval_bytes,
            max_index_bytes=settings.segment_index_bytes,
            created_ms=_now_ms(),
        )
        jitter = settings.segment_jitter_ms
        segment.roll_jitter_ms = random.randrange(jitter) if jitter > 0 else 0
        return segment

    def _load(self, clean: bool) -> None:
        settings = self._settings()
        self._complete_swaps(settings)
        bases = []
        for path in self.directory.iterdir():
            if path.name.endswith(DELETED_SUFFIX) or path.suffix in LEFTOVER_SUFFIXES:
                path.unlink(missing_ok=True)  # a removal or a cleaning cut short by a stop
            elif path.suffix == LOG_SUFFIX and path.stem.isdigit():
                bases.append(int(path.stem))
        snapshot = self._load_producer_state()
        replay_from = snapshot if snapshot is not None else 0
        truncated = False
        bases.sort()
        for k, base in enumerate(bases):
            segment = self._segment(base, settings)
            if truncated:  # everything after a cut tail is gone with it
                self._remove_now(segment)
                continue
            self._segments.append(segment)  # before the replay: its aborted txns go here
            self._bases.append(base)
            next_base = bases[k + 1] if k + 1 < len(bases) else None
            unsafe = not clean and (next_base is None or next_base > self.recovery_point)
            if unsafe or not segment.load():
                segment.txn_index.truncate_to(replay_from)
                cut, reason = segment.recover(partial(self._replay, segment, replay_from))
                if cut:
                    log.warning(
                        "log recovered after an unclean stop: tail cut",
                        log_dir=str(self.directory),
                        segment=segment.log_path.name,
                        bytes_dropped=cut,
                        reason=reason,
                    )
                    truncated = True
            elif segment.next_offset > replay_from:
                segment.txn_index.truncate_to(replay_from)
                start = segment.find(replay_from)
                for header in segment.batches(start.position if start else segment.size):
                    self._replay(segment, replay_from, header)
        if not self._segments:
            self._segments.append(self._segment(max(self._start, self.recovery_point), settings))
        self._bases = [s.base_offset for s in self._segments]
        self._end = max(self._segments[-1].next_offset, self._segments[-1].base_offset)
        self._start = max(self._start, self._segments[0].base_offset)
        if snapshot is not None and snapshot > self._end:
            self._rebuild_producer_state()
        delete_snapshots(self.directory, above=self._end)
        self.leader_epochs.truncate_from_end(self._end)
        self.leader_epochs.truncate_from_start(self._start)
        self.recovery_point = self._end

    def _complete_swaps(self, settings: LogSettings) -> None:
        """Settle a cleaning cut short by a stop (Kafka's LogLoader): ``.deleted`` and
        ``.cleaned`` files go; a ``.swap`` segment replaces the segments whose base offsets
        fall in the offsets it holds, then loses its suffix. A ``.swap`` at or above the
        lowest ``.cleaned`` offset is deleted too (KAFKA-6264: part of an unfinished step)."""
        swaps: list[Path] = []
        cleaned: list[Path] = []
        min_cleaned = None
        for path in self.directory.iterdir():
            name = path.name
            if name.endswith(DELETED_SUFFIX):
                path.unlink(missing_ok=True)
            elif name.endswith(CLEANED_SUFFIX):
                cleaned.append(path)
                offset = _offset_of(path)
                if offset is not None:
                    min_cleaned = offset if min_cleaned is None else min(min_cleaned, offset)
            elif name.endswith(SWAP_SUFFIX):
                swaps.append(path)
        valid = []
        for path in swaps:
            offset = _offset_of(path)
            if offset is None or (min_cleaned is not None and offset >= min_cleaned):
                path.unlink(missing_ok=True)
            else:
                valid.append(path)
        for path in cleaned:
            path.unlink(missing_ok=True)
        low = high = None
        for path in valid:
            if not path.name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
                continue
            base = _offset_of(path)
            assert base is not None
            segment = LogSegment(
                self.directory,
                base,
                index_interval_bytes=settings.index_interval_bytes,
                max_index_bytes=settings.segment_index_bytes,
                created_ms=_now_ms(),
                suffix=SWAP_SUFFIX,
            )
            next_offset = base
            for header in segment.batches():
                next_offset = header.next_offset
            segment.close()
            low = base if low is None else min(low, base)
            high = next_offset if high is None else max(high, next_offset)
            log.info(
                "completing a log cleaner swap cut short by a stop",
                log_dir=str(self.directory),
                segment=path.name,
            )
        if low is not None and high is not None:
            for path in self.directory.iterdir():
                offset = _offset_of(path)
                if (
                    offset is not None
                    and path.suffix in SEGMENT_FILE_SUFFIXES
                    and low <= offset < high
                ):
                    path.unlink(missing_ok=True)
        for path in valid:
            os.replace(path, path.with_name(path.name[: -len(SWAP_SUFFIX)]))

    def _load_producer_state(self) -> int | None:
        """Load the newest readable snapshot; its offset, or None (replay from the start)."""
        found = load_latest_snapshot(self.directory)
        if found is None:
            return None
        offset, self.producer_state = found
        return offset

    def _marker(self, segment: LogSegment, header: BatchHeader) -> EndTxnMarker | None:
        """What a producer's stored control batch says (None: nothing to act on)."""
        if not header.is_control or header.producer_id < 0:
            return None
        data = segment.read(header.position, header.size)
        return control_marker(data, header, log_dir=str(self.directory))

    def _replay(self, segment: LogSegment, replay_from: int, header: BatchHeader) -> None:
        if header.base_offset < replay_from or header.producer_id < 0:
            return
        marker = self._marker(segment, header)
        self._update_producer_state(header, marker, now_ms=header.max_timestamp)

    def _rebuild_producer_state(self) -> None:
        self.producer_state = ProducerStateManager()
        for segment in self._segments:
            segment.txn_index.truncate_to(segment.base_offset)
            for header in segment.batches():
                self._replay(segment, 0, header)

    @_storage("update producer state of")
    def update_producer_state(
        self, batch: BatchHeader, marker: EndTxnMarker | None = None, now_ms: int | None = None
    ) -> CompletedTxn | None:
        return self._update_producer_state(batch, marker, now_ms)

    def _update_producer_state(
        self, batch: BatchHeader, marker: EndTxnMarker | None, now_ms: int | None
    ) -> CompletedTxn | None:
        completed = super().update_producer_state(batch, marker, now_ms)
        if (
            completed is not None
            and completed.is_aborted
            and completed.last_offset < self.recovery_point
        ):  # the append flushed its marker (flush.messages): the index entry goes with it
            self._txn_index_for(completed.last_offset).flush()
        return completed

    def _txn_index_for(self, offset: int) -> TransactionIndex:
        segments, bases = self._segments, self._bases
        return segments[max(bisect.bisect_right(bases, offset) - 1, 0)].txn_index

    # the Log interface -----------------------------------------------------------------
    @property
    def log_start_offset(self) -> int:
        return self._start

    @property
    def log_end_offset(self) -> int:
        return self._end

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def segments(self) -> list[LogSegment]:
        """The segments, oldest first, the last one active (a snapshot: do not modify)."""
        return self._segments

    @property
    def settings(self) -> LogSettings:
        """The topic's current log settings."""
        return self._settings()

    @_storage("append to")
    def append(self, buffer: bytes | memoryview, batches: list[BatchHeader]) -> None:
        settings = self._settings()
        view = memoryview(buffer)
        pieces: list[Piece] = []
        size = records = 0
        for b in batches:  # one loop, no generators: this runs once a Produce
            pieces += (served_prefix(b), view[b.position + PREFIX_SIZE : b.position + b.size])
            size += b.size
            records += b.last_offset_delta + 1
        active = self._segments[-1]
        roll_ms = settings.segment_ms - active.roll_jitter_ms
        if active.should_roll(
            size, _now_ms(), settings.segment_bytes, roll_ms, batches[-1].last_offset
        ):
            active = self._roll(settings)
        active.append(batches, pieces)
        for b in batches:
            self.leader_epochs.assign(b.partition_leader_epoch, b.base_offset)
        self._end = batches[-1].next_offset
        self._unflushed += records
        if self._unflushed >= settings.flush_messages:
            self.flush()

    @_storage("append to")
    def append_as_follower(self, buffer: bytes, batches: list[BatchHeader]) -> None:
        super().append_as_follower(buffer, batches)

    @_storage("assign a leader epoch in")
    def maybe_assign_epoch_start_offset(self, epoch: int, start_offset: int) -> None:
        super().maybe_assign_epoch_start_offset(epoch, start_offset)

    def _roll(self, settings: LogSettings) -> LogSegment:
        """Start a new active segment at the log end; snapshot the producer state there
        (as Kafka does), so a restart replays at most the new segment."""
        with self.lock:
            segment = self._segment(self._end, settings)
            self._segments = [*self._segments, segment]
            self._bases = [*self._bases, segment.base_offset]
        write_snapshot(self.directory, self._end, self.producer_state)
        delete_snapshots(self.directory, below=self._start)
        if self._on_roll is not None:
            self._on_roll(self, segment.base_offset)
        return segment

    def _segments_from(self, offset: int) -> list[LogSegment]:
        """The segments from the one holding ``offset`` on (without a lock)."""
        segments, bases = self._segments, self._bases
        i = max(bisect.bisect_right(bases, offset) - 1, 0)
        # The two lists are replaced one after the other: when the bases read are not the
        # segments', step back (scanning forward from an earlier segment finds the batch).
        while i > 0 and (i >= len(segments) or segments[i].base_offset > offset):
            i -= 1
        return segments[i:]

    @_storage("read")
    def read(
        self, offset: int, max_bytes: int, min_one_batch: bool, max_offset: int | None = None
    ) -> list[Transferable]:
        for segment in self._segments_from(offset):
            size = limit = segment.size
            if max_offset is not None and max_offset < segment.next_offset:
                stop = segment.find(max_offset, size)
                if stop is not None:
                    limit = stop.position
            batch = segment.find(offset, limit)
            if batch is None:
                if limit < size:
                    return []  # the batches left are at or past max_offset
                continue
            length = min(max_bytes, limit - batch.position)
            if min_one_batch and batch.size > length:
                length = min(batch.size, limit - batch.position)
            return [segment.region(batch.position, length)] if length > 0 else []
        return []

    @_storage("read aborted transactions of")
    def collect_aborted_transactions(
        self, start_offset: int, upper_bound_offset: int
    ) -> list[AbortedTxn]:
        found: list[AbortedTxn] = []
        for segment in self._segments_from(start_offset):
            txns, complete = segment.txn_index.collect(start_offset, upper_bound_offset)
            found += txns
            if complete:
                break
        return found

    def _batch_records(self, segment: LogSegment, offset: int) -> list[Record]:
        batch = segment.find(offset)
        if batch is None:
            return []
        return list(iter_records(segment.read(batch.position, batch.size)))

    @_storage("search by timestamp in")
    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        for segment in self._segments:
            if segment.max_timestamp < timestamp_ms:
                continue
            start = segment.find(segment.time_index.lookup(timestamp_ms))
            position = start.position if start is not None else segment.size
            for header in segment.batches(position):
                if header.max_timestamp < timestamp_ms:
                    continue
                records = iter_records(segment.read(header.position, header.size))
                found = first_at_or_after(records, timestamp_ms, self._start)
                if found is not None:
                    return found
        return None

    @_storage("search the largest timestamp in")
    def max_timestamp(self) -> tuple[int, int] | None:
        segments = [s for s in self._segments if s.size]
        if not segments:
            return None
        best = max(reversed(segments), key=lambda s: s.max_timestamp)
        return latest_of_max(self._batch_records(best, best.offset_of_max_timestamp))

    @_storage("move the log start offset of")
    def maybe_increment_log_start_offset(self, new_start: int) -> bool:
        """Move the log start offset forward (DeleteRecords, retention); segments wholly
        below it go."""
        if new_start <= self._start:
            return False
        self._start = min(new_start, self._end)
        self.leader_epochs.truncate_from_start(self._start)
        self._delete_segments(lambda seg, nxt: nxt is not None and nxt.base_offset <= self._start)
        return True

    # retention ---------------------------------------------------------------------------
    @_storage("apply retention to")
    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Kafka's retention: with ``cleanup.policy`` delete, segments past ``retention.ms``
        (by their largest timestamp) and the oldest beyond ``retention.bytes``; always those
        wholly below the log start offset. Returns how many went."""
        with self.lock:  # it may roll: no append in between
            return self._delete_old_segments(now_ms)

    def _delete_old_segments(self, now_ms: int | None) -> int:
        settings = self._settings()
        now = _now_ms() if now_ms is None else now_ms
        deleted = self._delete_segments(
            lambda seg, nxt: nxt is not None and nxt.base_offset <= self._start
        )
        if not settings.delete:
            return deleted
        if settings.retention_ms >= 0:
            active = self._segments[-1]
            if active.size and now - _largest_timestamp(active) > settings.retention_ms:
                self._roll(settings)  # Kafka rolls so the expired active segment can go
            deleted += self._delete_segments(
                lambda seg, nxt: nxt is not None
                and seg.size > 0
                and now - _largest_timestamp(seg) > settings.retention_ms
            )
        if settings.retention_bytes >= 0:
            excess = self.size_bytes - settings.retention_bytes

            def over(seg: LogSegment, nxt: LogSegment | None) -> bool:
                nonlocal excess
                if nxt is None or excess < seg.size:
                    return False
                excess -= seg.size
                return True

            deleted += self._delete_segments(over)
        return deleted

    def _delete_segments(
        self, deletable: Callable[[LogSegment, LogSegment | None], bool]
    ) -> int:
        """Remove the oldest segments while ``deletable(segment, next)`` holds; the active
        segment (whose next is None) always stays."""
        with self.lock:
            segments = self._segments
            count = 0
            while count < len(segments) - 1 and deletable(segments[count], segments[count + 1]):
                count += 1
            if not count:
                return 0
            gone = segments[:count]
            self._bases = self._bases[count:]
            self._segments = segments[count:]
            self._start = max(self._start, self._segments[0].base_offset)
            self.leader_epochs.truncate_from_start(self._start)
            delay = self._settings().file_delete_delay_ms
            for segment in gone:
                segment.mark_deleted()
                self._retire(segment, delay)
        delete_snapshots(self.directory, below=self._start)
        return count

    # truncation (a follower's divergent tail) ------------------------------------------------
    @_storage("truncate")
    def truncate_to(self, offset: int) -> bool:
        """Kafka's truncateTo (see :meth:`Log.truncate_to`): the segments whose base offset
        is past ``offset`` go (renamed ``*.deleted`` and retired, as retention's), the last
        one left is cut before the batch holding ``offset`` with its indexes, and made
        durable; the producer-state snapshots past the new end go and the state is rebuilt
        from the newest one left (a snapshot is written at the new end)."""
        if offset < 0:
            raise ValueError(f"cannot truncate a log to a negative offset ({offset})")
        with self.lock:
            if offset >= self._end:
                self.leader_epochs.truncate_from_end(self._end)
                return False
            if self._segments[0].base_offset > offset:
                self.truncate_fully_and_start_at(offset)
                return True
            segments, bases = self._segments, self._bases
            keep = bisect.bisect_right(bases, offset)
            gone = segments[keep:]
            if gone:
                self._bases = bases[:keep]  # before the segments: see _segments_from
                self._segments = segments[:keep]
                delay = self._settings().file_delete_delay_ms
                for segment in gone:
                    segment.mark_deleted()
                    self._retire(segment, delay)
            active = self._segments[-1]
            cut = active.find(offset)
            end = offset if cut is None else min(offset, cut.base_offset)
            active.truncate_to(offset, _now_ms())
            active.flush()
            fsync_dir(self.directory)
            self._end = end
            self._start = min(self._start, end)
            self.recovery_point = min(self.recovery_point, end)
            self._unflushed = 0
            self.leader_epochs.truncate_from_end(end)
            self._rebuild_producer_state_to(end)
            return True

    def _rebuild_producer_state_to(self, end: int) -> None:
        """Kafka's rebuildProducerState after a truncation to ``end``: snapshots past it
        deleted, the newest left loaded (none: from the first batch) and the stored batches
        from it to ``end`` replayed; a log with no producer before keeps none. The
        transaction indexes already hold the markers below ``end`` and stay as they are."""
        delete_snapshots(self.directory, above=end)
        if self.producer_state.producer_count() == 0:
            state = ProducerStateManager(end)
        else:
            found = load_latest_snapshot(self.directory, at_most=end)
            start, state = found if found is not None else (0, ProducerStateManager())
            for segment in self._segments:
                if segment.next_offset <= start:
                    continue
                first = segment.find(start)
                for header in segment.batches(first.position if first else segment.size):
                    if header.base_offset >= start:
                        replay_into(state, header, self._marker(segment, header))
            state.map_end_offset = end
        write_snapshot(self.directory, end, state)
        self.producer_state = state

    @_storage("truncate")
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Kafka's truncateFullyAndStartAt (see :meth:`Log.truncate_fully_and_start_at`):
        every segment is renamed ``*.deleted`` and retired (first, so a new segment may take
        an old one's base offset), one empty segment at ``offset`` replaces them; the
        snapshots and the leader-epoch checkpoint are emptied."""
        if offset < 0:
            raise ValueError(f"cannot start a log at a negative offset ({offset})")
        with self.lock:
            settings = self._settings()
            gone = self._segments
            for segment in gone:
                segment.mark_deleted()
            segment = self._segment(offset, settings)
            self._bases = [offset]
            self._segments = [segment]
            for old in gone:
                self._retire(old, settings.file_delete_delay_ms)
            fsync_dir(self.directory)
            self._start = self._end = offset
            self.recovery_point = offset  # nothing below it is left to recover
            self._unflushed = 0
            self.leader_epochs.clear()
            delete_snapshots(self.directory, above=-1)
            self.producer_state = ProducerStateManager(offset)

    # compaction -----------------------------------------------------------------------------
    @_storage("swap cleaned segments into")
    def replace_segments(self, cleaned: LogSegment, old: list[LogSegment]) -> bool:
        """Swap ``cleaned`` (its files suffixed ``.cleaned``, flushed, base offset that of
        ``old[0]``) in for ``old``, consecutive segments below the active one, as Kafka's
        replaceSegments does: ``.cleaned`` -> ``.swap``, the list replaced, the old segments
        renamed ``*.deleted`` and retired (reads under way finish), ``.swap`` -> the final
        names. False, and nothing changed, when ``old`` is no longer in the log as given
        (retention or a new log start offset took some of it meanwhile)."""
        with self.lock:
            segments = self._segments
            try:
                start = next(i for i, s in enumerate(segments) if s is old[0])
            except (StopIteration, IndexError):
                return False
            end = start + len(old)
            if end >= len(segments) or any(
                a is not b for a, b in zip(segments[start:end], old, strict=True)
            ):
                return False
            if cleaned.base_offset != old[0].base_offset:
                raise ValueError(
                    f"cleaned segment {cleaned.base_offset} does not start at {old[0].base_offset}"
                )
            cleaned.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)
            replaced = [*segments[:start], cleaned, *segments[end:]]
            self._bases = [s.base_offset for s in replaced]  # before the segments: see read
            self._segments = replaced
            delay = self._settings().file_delete_delay_ms
            for segment in old:
                segment.mark_deleted()
                self._retire(segment, delay)
            cleaned.change_file_suffixes(SWAP_SUFFIX, "")
            fsync_dir(self.directory)
        return True

    # flush and close -----------------------------------------------------------------------
    @_storage("flush")
    def flush(self, up_to: int | None = None) -> None:
        """fsync the segments holding offsets from the recovery point to ``up_to`` (the
        log end when None); the recovery point moves there."""
        end = self._end if up_to is None else min(up_to, self._end)  # a truncation since
        for segment in self._segments:
            if segment.base_offset < end and segment.next_offset > self.recovery_point:
                segment.flush()
        self.recovery_point = max(self.recovery_point, end)
        if up_to is None:
            self._unflushed = 0
            self._last_flush_ms = _now_ms()

    @_storage("flush")
    def flush_if_due(self, now_ms: int) -> None:
        """The flush scheduler's check: flush when ``flush.ms`` has passed with data."""
        if self._unflushed and now_ms - self._last_flush_ms >= self._settings().flush_ms:
            self.flush()

    @_storage("close")
    def close(self) -> None:
        """A clean stop: flush, snapshot the producer state at the end, close the files."""
        self.flush()
        write_snapshot(self.directory, self._end, self.producer_state)
        self.close_handlers()

    def close_handlers(self) -> None:
        """Close the files, without a flush or a snapshot (Kafka's closeHandlers: what
        ``close`` does last, and all that is done for a log whose dir failed)."""
        with self.lock:
            self._closed = True
            for segment in self._segments:
                segment.close()

    def _remove_now(self, segment: LogSegment) -> None:
        segment.close()
        for path in segment.files():
            path.unlink(missing_ok=True)


def _offset_of(path: Path) -> int | None:
    """The offset a segment or snapshot file is named for, or None."""
    stem = path.name.split(".", 1)[0]
    return int(stem) if stem.isdigit() else None


def _largest_timestamp(segment: LogSegment) -> int:
    """The newest record timestamp in the segment, else its file's modification time."""
    if segment.max_timestamp >= 0:
        return segment.max_timestamp
    return int(os.stat(segment.log_path).st_mtime * 1000)
