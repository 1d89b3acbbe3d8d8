"""LogCleaner: Kafka's log compaction for topics whose ``cleanup.policy`` contains compact.

``log.cleaner.threads`` threads (``kafka-log-cleaner-thread-<n>``) each loop: pick the
filthiest compacted log, clean it, apply retention to the compacted logs (Kafka leaves that
to the cleaner threads), and sleep ``log.cleaner.backoff.ms`` when no log was due.

* **Choosing a log** (Kafka's LogCleanerManager): the dirty part of a log runs from its first
  dirty offset (its ``cleaner-offset-checkpoint`` entry, else the log start) to the first
  uncleanable offset: the active segment's base, or the first segment whose largest
  timestamp is within ``min.compaction.lag.ms`` of now. A log is due when its dirty bytes
  over its total bytes exceed ``min.cleanable.dirty.ratio``, or when a dirty segment's first
  batch is older than ``max.compaction.lag.ms``; the due log with the largest ratio is
  cleaned.
* **Cleaning** (Kafka's Cleaner): an :class:`~broker.log.offset_map.OffsetMap` of each key's
  last offset is built over the dirty part (``log.cleaner.dedupe.buffer.size`` split over
  the threads, ``log.cleaner.io.buffer.load.factor``); when it fills, the round stops there
  and the rest waits for the next one. The segments from the log start to the end of the
  mapped range are then rewritten in groups (Kafka's groupSegmentsBySize: at most
  ``segment.bytes`` and ``segment.index.bytes`` each, offsets within int32 of the group's
  base), each group into one ``<base>.log.cleaned`` segment that
  :meth:`~broker.log.file_log.FileLog.replace_segments` swaps in. A record stays when its
  offset is past the map, when it has no key (keyless records are refused at produce for
  compacted topics, so these predate the policy), or when it is its key's last record —
  unless it is a tombstone past its delete horizon. A producer's last batch stays, emptied,
  while the producer has state in the log.
* **Transactions** (Kafka's CleanedTransactionMetadata, see
  :mod:`broker.log.transaction_index`): cleaning stops at the first unstable offset (an
  ongoing transaction is never cleaned). The records of aborted transactions, found through
  the transaction indexes, neither enter the offset map nor survive a cleaning. An abort
  marker stays while its transaction still had batches in the segments cleaned (and is
  indexed again in the cleaned segment's ``.txnindex``); a commit marker stays while its
  transaction's batches are still there. A marker that may go gets a delete horizon (``now +
  delete.retention.ms``, as a tombstone does) and is removed by a cleaning after it.
* **Tombstones** follow KIP-534 (Kafka 3.1+): the first cleaning that keeps a tombstone
  writes its batch's delete horizon (``now + delete.retention.ms``) into the batch, and a
  cleaning after that horizon drops it. (Kafka's legacy rule, by the modification time of
  the last clean segment, applies only to pre-v2 batches, which kplane never stores.)
* **The checkpoint**: after a round, the end of the cleaned range is the log's first dirty
  offset, written to its log dir's ``cleaner-offset-checkpoint``.

KIP-226: the cleaner is a BrokerReconfigurable; a change to one of its cluster-wide configs
stops the threads and starts them again with the new values, as Kafka's LogCleaner does.
"""

from __future__ import annotations

import bisect
import math
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import structlog

from kplane.broker.config.definitions import LONG_MAX
from kplane.broker.config.errors import ConfigException
from kplane.broker.config.kafka_config import KafkaConfig
from kplane.broker.log.file_log import FileLog
from kplane.broker.log.log import control_marker
from kplane.broker.log.log_config import LogSettings
from kplane.broker.log.log_dir_failure_channel import KafkaStorageError
from kplane.broker.log.offset_map import BYTES_PER_SLOT, OffsetMap
from kplane.broker.log.partition import TopicPartition
from kplane.broker.log.segment import CLEANED_SUFFIX, LogSegment
from kplane.broker.log.transaction_index import CleanedTransactionMetadata
from kplane.broker.metrics.registry import BrokerMetrics, metric_name
from kplane.protocol.record_filter import filter_batch
from kplane.protocol.records import (
    LOG_OVERHEAD,
    BatchHeader,
    encode_batch,
    iter_records,
    read_partial_batches,
    record_keys,
)

log = structlog.get_logger(__name__)

INT32_MAX = 2**31 - 1
THREAD_PREFIX = "kafka-log-cleaner-thread-"
_DELETE_HORIZON_MASK = 0x40  # the batch attribute: baseTimestamp holds a delete horizon

RECONFIGURABLE_CONFIGS = frozenset(
    {
        "log.cleaner.threads",
        "log.cleaner.dedupe.buffer.size",
        "log.cleaner.io.buffer.load.factor",
        "log.cleaner.io.buffer.size",
        "message.max.bytes",
        "log.cleaner.io.max.bytes.per.second",
        "log.cleaner.backoff.ms",
    }
)
"""Kafka's LogCleaner.ReconfigurableConfigs."""

MAX_DIRTY_PERCENT = metric_name("log", "LogCleanerManager", "max-dirty-percent")
TIME_SINCE_LAST_RUN_MS = metric_name("log", "LogCleanerManager", "time-since-last-run-ms")
CLEANER_RECOPY_PERCENT = metric_name("log", "LogCleaner", "cleaner-recopy-percent")
MAX_BUFFER_UTILIZATION_PERCENT = metric_name("log", "LogCleaner", "max-buffer-utilization-percent")
MAX_CLEAN_TIME_SECS = metric_name("log", "LogCleaner", "max-clean-time-secs")
DEAD_THREAD_COUNT = metric_name("log", "LogCleaner", "DeadThreadCount")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """The broker settings the cleaner acts on (Kafka's CleanerConfig)."""

    enable: bool = True
    threads: int = 1
    dedupe_buffer_size: int = 134217728
    io_buffer_size: int = 524288
    load_factor: float = 0.9
    max_message_bytes: int = 1048588
    max_io_bytes_per_second: float = math.inf
    backoff_ms: int = 15000

    @classmethod
    def from_config(cls, config: KafkaConfig) -> CleanerConfig:
        return cls(
            enable=config.get_bool("log.cleaner.enable"),
            threads=config.get_int("log.cleaner.threads"),
            dedupe_buffer_size=config.get_int("log.cleaner.dedupe.buffer.size"),
            io_buffer_size=config.get_int("log.cleaner.io.buffer.size"),
            load_factor=float(config.get("log.cleaner.io.buffer.load.factor")),
            max_message_bytes=config.get_int("message.max.bytes"),
            max_io_bytes_per_second=float(config.get("log.cleaner.io.max.bytes.per.second")),
            backoff_ms=config.get_int("log.cleaner.backoff.ms"),
        )

    @property
    def map_bytes_per_thread(self) -> int:
        """Each thread's share of the dedupe buffer (Kafka caps it at 2 GiB)."""
        return min(self.dedupe_buffer_size // max(self.threads, 1), INT32_MAX)

    @property
    def io_buffer_per_thread(self) -> int:
        """Each thread's read (and write) buffer: half its share of the I/O buffer, grown for
        a larger batch when one comes."""
        return max(self.io_buffer_size // max(self.threads, 1) // 2, LOG_OVERHEAD)

    def check(self) -> None:
        """ConfigException when a cleaner thread could not make progress."""
        if not 0.0 < self.load_factor <= 1.0:
            raise ConfigException(
                f"Invalid value {self.load_factor} for log.cleaner.io.buffer.load.factor: "
                "must be in (0, 1]",
                name="log.cleaner.io.buffer.load.factor",
            )
        if self.threads > 0 and self.map_bytes_per_thread * self.load_factor < BYTES_PER_SLOT:
            raise ConfigException(
                "log.cleaner.dedupe.buffer.size is too small to fit even one key per cleaner "
                "thread, so log cleaning would never make progress: increase it or decrease "
                "log.cleaner.threads",
                name="log.cleaner.dedupe.buffer.size",
            )


class CleanerHost(Protocol):
    """What the cleaner needs of the LogManager."""

    def compacted_logs(self) -> list[tuple[TopicPartition, FileLog]]:
        """The file logs whose topic's cleanup policy contains compact."""
        ...

    def cleaner_offsets(self) -> dict[TopicPartition, int]:
        """Every log's first dirty offset from the ``cleaner-offset-checkpoint`` files."""
        ...

    def update_cleaner_offset(self, tp: TopicPartition, offset: int) -> None:
        """Write ``tp``'s first dirty offset to its log dir's checkpoint."""
        ...

    def checkpoint_log_start_offsets(self) -> None:
        """Write the log-start-offset checkpoints (retention moved a log start)."""
        ...


class CleaningAbortedError(Exception):
    """The cleaning of a log was aborted (the log is going away, or the cleaner stops)."""


@dataclass(slots=True)
class CleanerStats:
    """One cleaning round's figures (Kafka's CleanerStats)."""

    start: float = field(default_factory=time.monotonic)
    map_done: float = 0.0
    end: float = 0.0
    map_bytes_read: int = 0
    map_messages_read: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    messages_read: int = 0
    messages_written: int = 0
    buffer_utilization: float = 0.0

    @property
    def elapsed_secs(self) -> float:
        return max((self.end or time.monotonic()) - self.start, 1e-9)


@dataclass(slots=True)
class LogToClean:
    """A compacted log with its cleanable range and byte counts (Kafka's LogToClean)."""

    tp: TopicPartition
    log: FileLog
    settings: LogSettings
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


class Throttler:
    """Kafka's Throttler: holds the cleaner threads' combined I/O to
    ``log.cleaner.io.max.bytes.per.second``, checked every 300 ms."""

    CHECK_INTERVAL_S = 0.3

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self._lock = threading.Lock()
        self._period_start = time.monotonic()
        self._observed = 0.0

    def maybe_throttle(self, observed: int, stop: threading.Event) -> None:
        if self.rate <= 0 or self.rate >= sys.float_info.max:  # unset: Double.MAX_VALUE
            return
        with self._lock:
            self._observed += observed
            now = time.monotonic()
            elapsed = now - self._period_start
            if elapsed < self.CHECK_INTERVAL_S:
                return
            if self._observed / elapsed > self.rate:
                sleep = self._observed / self.rate - elapsed
                if sleep > 0:
                    stop.wait(sleep)  # holding the lock: every thread waits, as in Kafka
            self._period_start = time.monotonic()
            self._observed = 0.0


@dataclass(slots=True)
class _InProgress:
    aborted: bool = False


class LogCleaner:
    """The cleaner threads and the state they share (Kafka's LogCleaner and
    LogCleanerManager)."""

    reconfigurable_configs = RECONFIGURABLE_CONFIGS

    def __init__(
        self,
        config: CleanerConfig,
        host: CleanerHost,
        metrics: BrokerMetrics | None = None,
        clock: Callable[[], int] = _now_ms,
    ) -> None:
        config.check()
        self.config = config
        self._host = host
        self._metrics = metrics
        self._clock = clock
        self._lock = threading.Condition()
        self._in_progress: dict[TopicPartition, _InProgress] = {}
        self._paused: set[TopicPartition] = set()
        self._uncleanable: set[TopicPartition] = set()
        self._threads: list[CleanerThread] = []
        self._throttler = Throttler(config.max_io_bytes_per_second)
        self._threads_lock = threading.Lock()
        self.dirtiest_ratio = 0.0
        self.time_of_last_run_ms = clock()

    # lifecycle -----------------------------------------------------------------------------
    def startup(self) -> None:
        """Start ``log.cleaner.threads`` threads (and the gauges)."""
        log.info("starting the log cleaner", threads=self.config.threads)
        self._register_gauges()
        self._start_threads()

    def _start_threads(self) -> None:
        with self._threads_lock:
            for i in range(self.config.threads):
                thread = CleanerThread(self, i, self.config)
                self._threads.append(thread)
                thread.start()

    def _stop_threads(self) -> None:
        with self._threads_lock:
            threads, self._threads = self._threads, []
            for thread in threads:
                thread.stopping.set()
            with self._lock:
                for state in self._in_progress.values():
                    state.aborted = True
            for thread in threads:
                if thread is not threading.current_thread():
                    thread.join()

    def shutdown(self) -> None:
        """Stop the threads (a cleaning under way is abandoned at its next batch, its
        ``.cleaned`` files removed) and the gauges."""
        self._stop_threads()
        self._unregister_gauges()

    @property
    def thread_count(self) -> int:
        with self._threads_lock:
            return sum(1 for t in self._threads if t.is_alive())

    # KIP-226 ---------------------------------------------------------------------------------
    def validate_reconfiguration(self, new: KafkaConfig) -> None:
        """Kafka's rule: at least 1 thread, at least half and at most double the current
        count; and the new buffers must let every thread make progress."""
        config = CleanerConfig.from_config(new)
        threads, current = config.threads, self.config.threads
        if threads < 1:
            raise ConfigException(
                "Log cleaner threads should be at least 1", name="log.cleaner.threads"
            )
        if threads < current // 2:
            raise ConfigException(
                "Log cleaner threads cannot be reduced to less than half the current value "
                f"{current}",
                name="log.cleaner.threads",
            )
        if threads > current * 2:
            raise ConfigException(
                "Log cleaner threads cannot be increased to more than double the current "
                f"value {current}",
                name="log.cleaner.threads",
            )
        config.check()

    def reconfigure(self, old: KafkaConfig, new: KafkaConfig) -> None:
        """Stop the threads and start them again with the new config (as Kafka does, which
        also replaces a thread that had died)."""
        config = CleanerConfig.from_config(new)
        self._throttler.rate = config.max_io_bytes_per_second
        self._stop_threads()
        self.config = config
        log.info("log cleaner reconfigured", threads=config.threads)
        self._start_threads()

    # partitions going away -------------------------------------------------------------------
    def abort_and_pause(self, tp: TopicPartition) -> None:
        """Stop cleaning ``tp`` (waiting for a cleaning under way to give up) and clean it no
        more until :meth:`resume` (the log is being deleted)."""
        with self._lock:
            self._paused.add(tp)
            state = self._in_progress.get(tp)
            if state is not None:
                state.aborted = True
            while tp in self._in_progress:
                self._lock.wait(0.1)

    def resume(self, tp: TopicPartition) -> None:
        """Forget ``tp``'s pause and uncleanable mark (its log is gone)."""
        with self._lock:
            self._paused.discard(tp)
            self._uncleanable.discard(tp)

    def _check_done(self, tp: TopicPartition, thread: CleanerThread | None) -> None:
        if thread is not None and thread.stopping.is_set():
            raise CleaningAbortedError(str(tp))
        state = self._in_progress.get(tp)
        if state is not None and state.aborted:
            raise CleaningAbortedError(str(tp))

    # choosing a log --------------------------------------------------------------------------
    def grab_filthiest_log(self) -> LogToClean | None:
        """The compacted log most in need of cleaning, marked in progress; None when no log
        is due (Kafka's grabFilthiestCompactedLog)."""
        with self._lock:
            now = self._clock()
            self.time_of_last_run_ms = now
            checkpoints = self._host.cleaner_offsets()
            candidates = []
            for tp, file_log in self._host.compacted_logs():
                if tp in self._in_progress or tp in self._paused or tp in self._uncleanable:
                    continue
                try:
                    ltc = self._log_to_clean(tp, file_log, checkpoints.get(tp), now)
                except Exception as exc:  # one log's failure is that log's
                    self._mark_uncleanable(tp, exc)
                    continue
                if ltc.total_bytes > 0:
                    candidates.append(ltc)
            self.dirtiest_ratio = max((c.cleanable_ratio for c in candidates), default=0.0)
            due = [
                c
                for c in candidates
                if (c.need_compaction_now and c.cleanable_bytes > 0)
                or c.cleanable_ratio > c.settings.min_cleanable_dirty_ratio
            ]
            if not due:
                return None
            filthiest = max(due, key=lambda c: c.cleanable_ratio)
            self._in_progress[filthiest.tp] = _InProgress()
            return filthiest

    def _log_to_clean(
        self, tp: TopicPartition, file_log: FileLog, checkpoint: int | None, now: int
    ) -> LogToClean:
        settings = file_log.settings
        segments = file_log.segments
        first_dirty = checkpoint if checkpoint is not None else file_log.log_start_offset
        if first_dirty < file_log.log_start_offset or first_dirty > file_log.log_end_offset:
            if not settings.delete or first_dirty > file_log.log_end_offset:
                log.warning(
                    "resetting the first dirty offset to the log start offset",
                    partition=str(tp),
                    checkpointed=first_dirty,
                    log_start_offset=file_log.log_start_offset,
                )
            first_dirty = file_log.log_start_offset
            self._host.update_cleaner_offset(tp, first_dirty)
        uncleanable = first_uncleanable_offset(
            segments, first_dirty, now, settings, file_log.first_unstable_offset
        )
        # Kafka's LogToClean: the segment holding the first dirty offset counts as both.
        clean_bytes = sum(s.size for s in segments_in(segments, -1, first_dirty))
        uncleanable_base = _base_of_segment_holding(segments, uncleanable)
        cleanable = segments_in(segments, min(first_dirty, uncleanable_base), uncleanable_base)
        cleanable_bytes = sum(s.size for s in cleanable)
        delay = max_compaction_delay(segments, first_dirty, now, settings)
        return LogToClean(
            tp, file_log, settings, first_dirty, uncleanable, clean_bytes, cleanable_bytes,
            delay > 0,
        )

    def _mark_uncleanable(self, tp: TopicPartition, exc: BaseException) -> None:
        log.warning(
            "log cleaning failed: the partition is marked uncleanable",
            partition=str(tp),
            reason=f"{type(exc).__name__}: {exc}",
        )
        self._uncleanable.add(tp)

    def _done_cleaning(self, tp: TopicPartition, end_offset: int | None) -> None:
        with self._lock:
            state = self._in_progress.pop(tp, None)
            if end_offset is not None and state is not None and not state.aborted:
                self._host.update_cleaner_offset(tp, end_offset)
            self._lock.notify_all()

    # the thread's round ----------------------------------------------------------------------
    def clean_filthiest_log(self, thread: CleanerThread | None = None) -> bool:
        """One round: clean the filthiest due log, then apply retention to the compacted
        logs. True when a log was cleaned."""
        cleaner = thread.cleaner if thread is not None else Cleaner(self, None, self.config)
        ltc = self.grab_filthiest_log()
        cleaned = False
        if ltc is not None:
            end_offset = None
            try:
                end_offset, stats = cleaner.clean(ltc)
                if thread is not None:
                    thread.last_stats = stats
                cleaned = True
            except CleaningAbortedError:
                pass
            except Exception as exc:  # a failed log must not stop the thread
                if isinstance(exc, OSError) and exc.errno is not None:  # the disk (KIP-112)
                    action = f"clean {ltc.tp}"
                    ltc.log.failures.maybe_add_offline_log_dir(ltc.log.log_dir, action, exc)
                with self._lock:
                    self._mark_uncleanable(ltc.tp, exc)
            finally:
                self._done_cleaning(ltc.tp, end_offset)
        self._delete_old_segments()
        return cleaned

    def _delete_old_segments(self) -> None:
        """Retention of the compacted logs (Kafka's deletableLogs): with ``compact,delete``
        by time and size, always below the log start offset."""
        with self._lock:
            logs = [
                (tp, file_log)
                for tp, file_log in self._host.compacted_logs()
                if tp not in self._in_progress
                and tp not in self._paused
                and tp not in self._uncleanable
            ]
            for tp, _ in logs:
                self._in_progress[tp] = _InProgress()
        deleted = 0
        try:
            for tp, file_log in logs:
                try:
                    deleted += file_log.delete_old_segments()
                except KafkaStorageError:
                    continue  # logged by the failure channel
                except OSError as exc:
                    log.warning("retention failed", partition=str(tp), reason=str(exc))
        finally:
            for tp, _ in logs:
                self._done_cleaning(tp, None)
        if deleted:
            self._host.checkpoint_log_start_offsets()

    # metrics ---------------------------------------------------------------------------------
    def _stats(self) -> list[CleanerStats]:
        with self._threads_lock:
            return [t.last_stats for t in self._threads]

    def recopy_percent(self) -> int:
        stats = self._stats()
        written = sum(s.bytes_written for s in stats)
        read = sum(s.bytes_read for s in stats)
        return int(100 * written / max(read, 1))

    def _register_gauges(self) -> None:
        metrics = self._metrics
        if metrics is None:
            return
        gauges: list[tuple[str, str, Callable[[], float]]] = [
            (MAX_DIRTY_PERCENT, "Dirty percent of the dirtiest compacted log.",
             lambda: int(100 * self.dirtiest_ratio)),
            (TIME_SINCE_LAST_RUN_MS, "Milliseconds since a cleaner thread last looked for a log.",
             lambda: self._clock() - self.time_of_last_run_ms),
            (CLEANER_RECOPY_PERCENT, "Bytes written over bytes read by the last cleanings, in %.",
             self.recopy_percent),
            (MAX_BUFFER_UTILIZATION_PERCENT, "Largest offset-map use of the last cleanings, in %.",
             lambda: int(100 * max((s.buffer_utilization for s in self._stats()), default=0))),
            (MAX_CLEAN_TIME_SECS, "Longest of the last cleanings, in seconds.",
             lambda: int(max((s.elapsed_secs for s in self._stats() if s.end), default=0))),
            (DEAD_THREAD_COUNT, "Cleaner threads that died.",
             lambda: sum(1 for t in self._threads_snapshot() if not t.is_alive())),
        ]
        for name, doc, fn in gauges:
            metrics.register_gauge(name, doc, fn)

    def _threads_snapshot(self) -> list[CleanerThread]:
        with self._threads_lock:
            return list(self._threads)

    def _unregister_gauges(self) -> None:
        if self._metrics is None:
            return
        for name in (
            MAX_DIRTY_PERCENT, TIME_SINCE_LAST_RUN_MS, CLEANER_RECOPY_PERCENT,
            MAX_BUFFER_UTILIZATION_PERCENT, MAX_CLEAN_TIME_SECS, DEAD_THREAD_COUNT,
        ):
            self._metrics.unregister_gauge(name)


class CleanerThread(threading.Thread):
    """One cleaner thread: its own offset map and buffers (Kafka's CleanerThread)."""

    def __init__(self, owner: LogCleaner, index: int, config: CleanerConfig) -> None:
        super().__init__(name=f"{THREAD_PREFIX}{index}", daemon=True)
        self.owner = owner
        self.backoff_s = config.backoff_ms / 1000
        self.stopping = threading.Event()
        self.cleaner = Cleaner(owner, self, config)
        self.last_stats = CleanerStats()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                cleaned = self.owner.clean_filthiest_log(self)
            except Exception as exc:  # the thread outlives a bad round
                log.warning("log cleaner round failed", reason=f"{type(exc).__name__}: {exc}")
                cleaned = False
            if not cleaned:
                self.stopping.wait(self.backoff_s)


class Cleaner:
    """Cleans one log at a time with one offset map (Kafka's Cleaner)."""

    def __init__(
        self, owner: LogCleaner, thread: CleanerThread | None, config: CleanerConfig
    ) -> None:
        self.owner = owner
        self.thread = thread
        self.offset_map = OffsetMap(config.map_bytes_per_thread, config.load_factor)
        self.io_buffer = config.io_buffer_per_thread
        self._stop = thread.stopping if thread is not None else threading.Event()

    def _check_done(self, tp: TopicPartition) -> None:
        self.owner._check_done(tp, self.thread)

    def _throttle(self, count: int) -> None:
        self.owner._throttler.maybe_throttle(count, self._stop)

    # one round -------------------------------------------------------------------------------
    def clean(self, ltc: LogToClean, now: int | None = None) -> tuple[int, CleanerStats]:
        """Clean ``ltc``'s log; returns the first offset not cleaned (the next first dirty
        offset) and the round's figures."""
        current = self.owner._clock() if now is None else now
        stats = CleanerStats()
        file_log, tp = ltc.log, ltc.tp
        upper = ltc.first_uncleanable_offset
        offset_map = self.offset_map
        self.build_offset_map(tp, file_log, ltc.first_dirty_offset, upper, stats)
        end_offset = max(offset_map.latest_offset + 1, ltc.first_dirty_offset)
        stats.map_done = time.monotonic()
        if end_offset == ltc.first_dirty_offset:  # nothing was mapped: nothing to clean
            stats.end = time.monotonic()
            return end_offset, stats
        settings = file_log.settings
        groups = group_segments_by_size(
            segments_in(file_log.segments, 0, end_offset),
            settings.segment_bytes,
            settings.segment_index_bytes,
            upper,
        )
        for group in groups:
            self.clean_segments(tp, file_log, group, current, stats, upper)
        stats.buffer_utilization = offset_map.utilization
        stats.end = time.monotonic()
        _log_stats(tp, ltc.first_dirty_offset, end_offset, stats)
        return end_offset, stats

    # the offset map --------------------------------------------------------------------------
    def build_offset_map(
        self,
        tp: TopicPartition,
        file_log: FileLog,
        start: int,
        end: int,
        stats: CleanerStats,
    ) -> None:
        """Map each key of the records in [start, end) to its last offset, stopping where the
        map fills (Kafka's buildOffsetMap); records of aborted transactions are left out."""
        offset_map = self.offset_map
        offset_map.clear()
        txns = CleanedTransactionMetadata()
        txns.add_aborted_transactions(file_log.collect_aborted_transactions(start, end))
        dirty = segments_in(file_log.segments, start, end)
        for k, segment in enumerate(dirty):
            next_start = dirty[k + 1].base_offset if k + 1 < len(dirty) else end
            if self._map_segment(tp, segment, start, next_start, txns, stats):
                break

    def _map_segment(
        self,
        tp: TopicPartition,
        segment: LogSegment,
        start: int,
        next_start: int,
        txns: CleanedTransactionMetadata,
        stats: CleanerStats,
    ) -> bool:
        """Add the keys of one segment's batches below ``next_start``; True when the map
        filled on the way."""
        offset_map = self.offset_map
        put = offset_map.put
        position = segment.offset_index.lookup(start)
        for header, data in self.read_batches(tp, segment, position):
            if header.base_offset >= next_start:
                break  # past the first uncleanable offset (an ongoing transaction)
            stats.map_bytes_read += header.size
            if header.is_control:
                txns.on_control_batch_read(header, control_marker(data, header))
            elif not txns.on_batch_read(header):
                for offset, key, _ in record_keys(header, data):
                    if key is not None and offset >= start:
                        if offset_map.is_full:
                            return True
                        put(key, offset)
                    stats.map_messages_read += 1
            if header.last_offset >= start:
                offset_map.update_latest_offset(header.last_offset)
        offset_map.update_latest_offset(next_start - 1)  # past a gap of offsets
        return False

    def read_batches(
        self, tp: TopicPartition, segment: LogSegment, position: int = 0
    ) -> Iterator[tuple[BatchHeader, memoryview]]:
        """The whole batches of ``segment`` from ``position``, read ``io_buffer`` bytes at a
        time (more for a batch larger than that, as Kafka grows its buffers)."""
        end = segment.size
        while position < end:
            self._check_done(tp)
            chunk = segment.read(position, min(self.io_buffer, end - position))
            headers = read_partial_batches(chunk)
            if not headers:
                batch = segment.peek(position)
                if batch is None or batch.size <= len(chunk) or batch.size > end - position:
                    raise OSError(
                        f"{segment.log_path}: no whole batch at position {position} of {end}"
                    )
                chunk = segment.read(position, batch.size)
                headers = read_partial_batches(chunk)
                if not headers:
                    raise OSError(f"{segment.log_path}: unreadable batch at position {position}")
            self._throttle(len(chunk))
            view = memoryview(chunk)
            for header in headers:
                yield header, view[header.position : header.position + header.size]
            position += headers[-1].position + headers[-1].size

    # rewriting -------------------------------------------------------------------------------
    def clean_segments(
        self,
        tp: TopicPartition,
        file_log: FileLog,
        group: Sequence[LogSegment],
        now: int,
        stats: CleanerStats,
        upper_bound: int,
    ) -> None:
        """Rewrite ``group`` into one ``.cleaned`` segment and swap it in (Kafka's
        cleanSegments); the aborted transactions whose markers stay are indexed in it."""
        settings = file_log.settings
        directory = file_log.directory
        base = group[0].base_offset
        cleaned = _new_cleaned_segment(directory, base, settings)
        txns = CleanedTransactionMetadata(cleaned.txn_index)
        txns.add_aborted_transactions(
            file_log.collect_aborted_transactions(base, group[-1].next_offset)
        )
        try:
            pending: list[bytes] = []
            pending_bytes = 0
            for segment in group:
                for header, data in self.read_batches(tp, segment):
                    output = self._filter(
                        file_log, header, data, now, settings, stats, upper_bound, txns
                    )
                    if output is None:
                        continue
                    pending.append(output)
                    pending_bytes += len(output)
                    if pending_bytes >= self.io_buffer:
                        _append(cleaned, pending)
                        self._throttle(pending_bytes)
                        pending, pending_bytes = [], 0
            if pending:
                _append(cleaned, pending)
                self._throttle(pending_bytes)
            self._check_done(tp)
            cleaned.flush()
            cleaned.set_last_modified_ms(group[-1].last_modified_ms)
        except BaseException:
            _discard(cleaned)
            raise
        # A failure inside the swap leaves its files to the next load (.swap is completed).
        if not file_log.replace_segments(cleaned, list(group)):
            _discard(cleaned)
            raise CleaningAbortedError(f"{tp}: segments changed during cleaning")

    def _filter(
        self,
        file_log: FileLog,
        header: BatchHeader,
        data: memoryview,
        now: int,
        settings: LogSettings,
        stats: CleanerStats,
        upper_bound: int,
        txns: CleanedTransactionMetadata,
    ) -> bytes | None:
        """One batch as it goes into the cleaned segment, or None when it goes away.

        The keep decisions come from a walk of the keys
        (:func:`protocol.records.record_keys`); only a batch that keeps some of its records,
        or must gain a delete horizon or become Kafka's empty batch, goes through
        :func:`protocol.record_filter.filter_batch`. A batch of an aborted transaction keeps
        none."""
        horizon = min(now + settings.delete_retention_ms, LONG_MAX)
        stats.bytes_read += header.size
        if header.is_control:
            output = _filter_marker(header, data, now, horizon, txns)
            stats.messages_read += header.record_count
            if output is not None:
                stats.messages_written += header.record_count
                stats.bytes_written += len(output)
            return output
        aborted = txns.on_batch_read(header)
        offset_map = self.offset_map
        latest = offset_map.latest_offset
        lookup = offset_map.get
        horizon_passed = header.has_delete_horizon and now >= header.base_timestamp

        def keep(offset: int, key: bytes | None, has_value: bool) -> bool:
            if aborted:
                return False
            if offset > latest or key is None:
                return True  # past the map; keyless (refused at produce on compacted topics)
            if offset < lookup(key):
                return False
            return has_value or not horizon_passed

        entries = record_keys(header, data)
        kept = 0
        keeps_tombstone = False
        for offset, key, has_value in entries:
            if keep(offset, key, has_value):
                kept += 1
                keeps_tombstone = keeps_tombstone or not has_value
        retain_empty = header.next_offset == upper_bound or _last_batch_of_producer(
            file_log, header
        )
        stats.messages_read += len(entries)
        stats.messages_written += kept
        if entries and kept == len(entries) and (not keeps_tombstone or header.has_delete_horizon):
            stats.bytes_written += header.size
            return bytes(data)  # every record stays: the same bytes (an empty batch may go)
        if kept == 0 and not (retain_empty and header.producer_id >= 0):
            return None
        result = filter_batch(
            data,
            lambda r: keep(r.offset, r.key, r.value is not None),
            retain_empty=retain_empty,
            delete_horizon_ms=horizon,
        )
        stats.bytes_written += result.bytes_out
        return result.output


def _filter_marker(
    header: BatchHeader,
    data: memoryview,
    now: int,
    horizon: int,
    txns: CleanedTransactionMetadata,
) -> bytes | None:
    """A control batch as it goes into the cleaned segment (Kafka's rule): kept while its
    transaction still has batches; then given a delete horizon, and gone after it."""
    if not txns.on_control_batch_read(header, control_marker(data, header)):
        return bytes(data)
    if header.has_delete_horizon:
        return None if now >= header.base_timestamp else bytes(data)
    return encode_batch(
        list(iter_records(data)),
        base_offset=header.base_offset,
        last_offset_delta=header.last_offset_delta,
        base_timestamp=horizon,
        max_timestamp=header.max_timestamp,
        attributes=header.attributes | _DELETE_HORIZON_MASK,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        partition_leader_epoch=header.partition_leader_epoch,
    )


# pure helpers ----------------------------------------------------------------------------------
def segments_in(segments: Sequence[LogSegment], start: int, end: int) -> list[LogSegment]:
    """The segments holding offsets in [start, end) (Kafka's logSegments(from, to)): from
    the one holding ``start`` to the last whose base is below ``end``."""
    if start >= end:
        return []
    bases = [s.base_offset for s in segments]
    i = max(bisect.bisect_right(bases, start) - 1, 0)
    j = bisect.bisect_left(bases, end)
    return list(segments[i:j])


def _base_of_segment_holding(segments: Sequence[LogSegment], offset: int) -> int:
    """The base of the segment holding ``offset``: the active segment's from its base on
    (Kafka's calculateCleanableBytes)."""
    bases = [s.base_offset for s in segments]
    return bases[max(bisect.bisect_right(bases, offset) - 1, 0)]


def first_uncleanable_offset(
    segments: Sequence[LogSegment],
    first_dirty: int,
    now: int,
    settings: LogSettings,
    first_unstable: int | None = None,
) -> int:
    """Where cleaning must stop: the active segment, the first unstable offset (an ongoing
    transaction), or the first dirty segment whose largest timestamp is within
    ``min.compaction.lag.ms`` of now (Kafka's cleanableOffsets)."""
    uncleanable = segments[-1].base_offset
    if first_unstable is not None:
        uncleanable = min(uncleanable, first_unstable)
    lag = max(settings.min_compaction_lag_ms, 0)
    if lag > 0:
        for segment in segments_in(segments[:-1], first_dirty, 2**63):
            if segment.largest_timestamp > now - lag:
                uncleanable = min(uncleanable, segment.base_offset)
                break
    return max(first_dirty, uncleanable)


def max_compaction_delay(
    segments: Sequence[LogSegment], first_dirty: int, now: int, settings: LogSettings
) -> int:
    """How long past ``max.compaction.lag.ms`` the oldest dirty record is (0: not yet), by
    the first batch timestamp of each dirty non-active segment."""
    firsts = [
        s.rolling_base_timestamp
        for s in segments_in(segments[:-1], first_dirty, 2**63)
        if s.rolling_base_timestamp > 0
    ]
    if not firsts:
        return 0
    clean_until = now - max(settings.max_compaction_lag_ms, 0)
    earliest = min(firsts)
    return clean_until - earliest if earliest < clean_until else 0


def group_segments_by_size(
    segments: Sequence[LogSegment], max_size: int, max_index_size: int, first_uncleanable: int
) -> list[list[LogSegment]]:
    """Consecutive segments in groups of at most ``max_size`` log bytes and
    ``max_index_size`` bytes of each index, whose offsets stay within int32 of the group's
    base (Kafka's groupSegmentsBySize)."""
    groups: list[list[LogSegment]] = []
    i = 0
    while i < len(segments):
        head = segments[i]
        group = [head]
        log_size = head.size
        index_size, time_index_size = head.index_sizes()
        i += 1
        while i < len(segments):
            candidate = segments[i]
            offset_size, time_size = candidate.index_sizes()
            last_offset = (
                segments[i + 1].base_offset - 1 if i + 1 < len(segments) else first_uncleanable - 1
            )
            if (
                log_size + candidate.size > max_size
                or index_size + offset_size > max_index_size
                or time_index_size + time_size > max_index_size
                or (candidate.size != 0 and last_offset - head.base_offset > INT32_MAX)
            ):
                break
            group.append(candidate)
            log_size += candidate.size
            index_size += offset_size
            time_index_size += time_size
            i += 1
        groups.append(group)
    return groups


def _last_batch_of_producer(file_log: FileLog, header: BatchHeader) -> bool:
    """True for the last batch of a producer the log still has state for: emptied, it is
    kept so the producer's epoch and sequence survive (Kafka's lastRecordsOfActiveProducers)."""
    if header.producer_id < 0:
        return False
    entry = file_log.producer_state.entry(header.producer_id)
    if entry is None:
        return False
    try:
        last = entry.batches[-1]
    except IndexError:
        return False
    return last.last_offset == header.last_offset


def _new_cleaned_segment(directory: Path, base: int, settings: LogSettings) -> LogSegment:
    segment = LogSegment(
        directory,
        base,
        index_interval_bytes=settings.index_interval_bytes,
        max_index_bytes=settings.segment_index_bytes,
        created_ms=_now_ms(),
        suffix=CLEANED_SUFFIX,
    )
    if segment.size:  # left by an attempt that did not remove its files: start afresh
        _discard(segment)
        segment = _new_cleaned_segment(directory, base, settings)
    return segment


def _discard(segment: LogSegment) -> None:
    segment.close()
    for path in segment.files():
        path.unlink(missing_ok=True)


def _append(segment: LogSegment, outputs: list[bytes]) -> None:
    headers = [read_partial_batches(output)[0] for output in outputs]
    segment.append(headers, outputs)


def _log_stats(tp: TopicPartition, start: int, end: int, stats: CleanerStats) -> None:
    mb = 1024 * 1024
    elapsed = stats.elapsed_secs
    log.info(
        "log cleaned",
        partition=str(tp),
        dirty_section=f"[{start}, {end})",
        mb_read=round(stats.bytes_read / mb, 2),
        mb_written=round(stats.bytes_written / mb, 2),
        records_read=stats.messages_read,
        records_written=stats.messages_written,
        seconds=round(elapsed, 3),
        mb_per_sec=round(stats.bytes_read / mb / elapsed, 1),
        map_seconds=round(max(stats.map_done - stats.start, 0.0), 3),
        buffer_utilization=round(stats.buffer_utilization, 3),
    )
