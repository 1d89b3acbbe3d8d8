"""LogManager: the partitions this broker hosts and, with file storage, their log dirs.

With ``kplane.log.storage=file`` (the default) each ``log.dirs`` entry is locked, carries
``meta.properties``, and holds one directory per partition; start-up loads them (recovering
the ones written after the last flush when the broker did not stop cleanly), and background
tasks apply retention, flush, and write the recovery-point and log-start-offset checkpoints.
With ``log.cleaner.enable`` the LogCleaner (``broker/log/log_cleaner.py``) compacts the logs
whose cleanup policy contains compact (and applies their retention); each log's first dirty
offset is kept in its dir's ``cleaner-offset-checkpoint``.
With ``memory`` the logs live in memory and are gone at exit.

A log dir fails as a whole (KIP-112): an I/O error on any of its files is reported to the
LogDirFailureChannel, and :meth:`LogManager.handle_log_dir_failure` then takes its logs out
of service; their partitions stay offline, answering KAFKA_STORAGE_ERROR, until a restart.
New logs go to the dirs still online.

A replica moves to another log dir (KIP-113, AlterReplicaLogDirs) through a future log,
``<topic>-<partition>.<id>-future`` in the target dir, which the
ReplicaAlterLogDirsManager (``broker/log/replica_alter_log_dirs.py``) copies up to the
current log; :meth:`LogManager.replace_current_with_future` then swaps it in (the current
dir renamed ``-delete``). A future dir found at start-up resumes its move.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from kplane.broker.config.errors import ConfigException
from kplane.broker.log.checkpoint_file import OffsetCheckpointFile
from kplane.broker.log.file_log import FileLog
from kplane.broker.log.log import Log, MemoryLog
from kplane.broker.log.log_cleaner import CleanerConfig, LogCleaner
from kplane.broker.log.log_config import LogSettings
from kplane.broker.log.log_dir import (
    DELETE_SUFFIX,
    FUTURE_SUFFIX,
    LogDir,
    LogDirError,
    special_dir_name,
)
from kplane.broker.log.log_dir_failure_channel import KafkaStorageError, LogDirFailureChannel
from kplane.broker.log.partition import Partition, TopicPartition
from kplane.broker.log.replica_alter_log_dirs import FutureLog, ReplicaAlterLogDirsManager
from kplane.broker.log.segment import LogSegment
from kplane.broker.metrics.registry import BrokerMetrics
from kplane.broker.utils.files import fsync_dir
from kplane.broker.utils.scheduler import KafkaScheduler
from kplane.protocol.errors import ErrorCode, KafkaError

log = structlog.get_logger(__name__)

FILE = "file"
MEMORY = "memory"


@dataclass(frozen=True, slots=True)
class LogManagerConfig:
    """The broker settings the LogManager acts on (topic-level ones come per log)."""

    storage: str = MEMORY
    log_dirs: tuple[str, ...] = ()
    retention_check_interval_ms: int = 300_000
    flush_check_interval_ms: int = 2**63 - 1
    recovery_point_checkpoint_interval_ms: int = 60_000
    log_start_checkpoint_interval_ms: int = 60_000
    file_delete_delay_ms: int = 60_000


_FutureOnDisk = tuple[TopicPartition, Path, LogDir, dict[str, Any]]
"""A future log found at start-up: its partition, directory, log dir and load settings."""


@dataclass(frozen=True, slots=True)
class DirReplica:
    """A log a log dir holds: the current one of a partition, or its future one."""

    tp: TopicPartition
    log: Log
    is_future: bool


@dataclass(frozen=True, slots=True)
class LogDirReplicas:
    """One log dir as DescribeLogDirs shows it."""

    path: Path
    offline: bool
    replicas: list[DirReplica]


class LogManager:
    """Creates, loads, finds and deletes the Partitions hosted by this broker."""

    def __init__(
        self,
        config: LogManagerConfig | None = None,
        settings: Callable[[str], LogSettings] = lambda topic: LogSettings(),
    ) -> None:
        self.config = config or LogManagerConfig()
        self._settings = settings
        self._partitions: dict[TopicPartition, Partition] = {}
        self._dirs_of: dict[TopicPartition, LogDir] = {}
        self._offline: set[TopicPartition] = set()
        self._futures: dict[TopicPartition, FutureLog] = {}
        self._lock = threading.Lock()
        self._moves_lock = threading.Lock()  # one AlterReplicaLogDirs change at a time
        self.log_dir_failures = LogDirFailureChannel()
        """Where an I/O error takes a log dir offline (Kafka's LogDirFailureChannel)."""
        try:
            self.log_dirs = [LogDir(Path(d)) for d in self.config.log_dirs]
        except LogDirError as exc:
            raise ConfigException(str(exc), name="log.dirs") from None
        self._scheduler: KafkaScheduler | None = None
        self.cleaner: LogCleaner | None = None
        self._cleaner_offsets: dict[int, dict[tuple[str, int], int]] = {
            id(d): {} for d in self.log_dirs
        }
        self._cleaner_offsets_lock = threading.Lock()
        self.log_dir_mover = ReplicaAlterLogDirsManager(self, len(self.log_dirs))
        """The threads moving replicas between log dirs (Kafka's default count: one a dir)."""

    @property
    def files(self) -> bool:
        return self.config.storage == FILE

    @property
    def live_log_dirs(self) -> list[LogDir]:
        """The log dirs not offline."""
        failures = self.log_dir_failures
        return [d for d in self.log_dirs if not failures.is_offline(str(d.path))]

    # start-up and shutdown -------------------------------------------------------------
    def lock_dirs(self) -> None:
        """Lock every log dir; ConfigException (one line) when another broker holds one."""
        locked = []
        try:
            for log_dir in self.log_dirs:
                log_dir.lock()
                locked.append(log_dir)
        except LogDirError as exc:
            for log_dir in locked:
                log_dir.unlock()
            raise ConfigException(str(exc), name="log.dirs") from None

    def check_identity(self, broker_id: int, cluster_id: str) -> None:
        """``meta.properties`` in each log dir names this broker and cluster (Kafka's
        InconsistentBrokerIdException / InconsistentClusterIdException as one line)."""
        for log_dir in self.log_dirs:
            try:
                log_dir.check_meta_properties(broker_id, cluster_id)
            except LogDirError as exc:
                raise ConfigException(str(exc), name="log.dirs") from None

    def startup(
        self, cleaner: CleanerConfig | None = None, metrics: BrokerMetrics | None = None
    ) -> None:
        """Load the logs on disk and start the background tasks, and the log cleaner when
        ``cleaner`` enables it."""
        if not self.files:
            return
        started = time.monotonic()
        futures = [f for log_dir in self.log_dirs for f in self._load_dir(log_dir)]
        for tp, path, log_dir, kwargs in futures:
            self._load_future(tp, path, log_dir, kwargs)
        log.info(
            "logs loaded",
            partitions=len(self._partitions),
            log_dirs=[str(d.path) for d in self.log_dirs],
            ms=round((time.monotonic() - started) * 1000),
        )
        c = self.config
        self._scheduler = scheduler = KafkaScheduler("kafka-log-scheduler")
        scheduler.schedule(
            "kafka-log-retention", self.cleanup_logs, c.retention_check_interval_ms,
            c.retention_check_interval_ms,
        )
        if c.flush_check_interval_ms < 2**62:
            scheduler.schedule(
                "kafka-log-flusher", self._flush_due, c.flush_check_interval_ms,
                c.flush_check_interval_ms,
            )
        if c.recovery_point_checkpoint_interval_ms > 0:
            scheduler.schedule(
                "kafka-recovery-point-checkpoint", self.checkpoint_recovery_points,
                c.recovery_point_checkpoint_interval_ms, c.recovery_point_checkpoint_interval_ms,
            )
        if c.log_start_checkpoint_interval_ms > 0:
            scheduler.schedule(
                "kafka-log-start-offset-checkpoint", self.checkpoint_log_start_offsets,
                c.log_start_checkpoint_interval_ms, c.log_start_checkpoint_interval_ms,
            )
        if cleaner is not None and cleaner.enable:
            self.cleaner = LogCleaner(cleaner, self, metrics)
            for tp in list(self._futures):  # a log being moved is not cleaned meanwhile
                self.cleaner.abort_and_pause(tp)
            self.cleaner.startup()

    def _load_dir(self, log_dir: LogDir) -> list[_FutureOnDisk]:
        """Load the dir's logs; its future logs are returned, to load once every current
        log is (a future log shares its current log's lock)."""
        clean = log_dir.had_clean_shutdown()
        recovery_points = log_dir.recovery_points.read()
        log_starts = log_dir.log_start_offsets.read()
        self._cleaner_offsets[id(log_dir)] = dict(log_dir.cleaner_offsets.read())
        for path in log_dir.path.iterdir():
            if path.is_dir() and path.name.endswith(DELETE_SUFFIX):
                shutil.rmtree(path, ignore_errors=True)  # a deletion cut short by a stop
        for topic, partition, path in log_dir.partition_dirs():
            tp = TopicPartition(topic, partition)
            file_log = self._file_log(
                tp,
                path,
                recovery_point=recovery_points.get((topic, partition), 0),
                log_start_offset=log_starts.get((topic, partition), 0),
                clean=clean,
            )
            self._partitions[tp] = Partition(tp, file_log)
            self._dirs_of[tp] = log_dir
        futures = [
            (
                TopicPartition(topic, partition),
                path,
                log_dir,
                {
                    "recovery_point": recovery_points.get((topic, partition), 0),
                    "log_start_offset": log_starts.get((topic, partition), 0),
                    "clean": clean,
                },
            )
            for topic, partition, path in log_dir.future_dirs()
        ]
        log_dir.remove_clean_shutdown_marker()
        return futures

    def _load_future(
        self, tp: TopicPartition, path: Path, log_dir: LogDir, kwargs: dict[str, Any]
    ) -> None:
        """Resume a move a stop cut short. Without a current log (a stop between the swap's
        renames) the future log is the log; a second future log of the partition, or one in
        its current log's dir, goes."""
        partition = self._partitions.get(tp)
        if partition is None:
            final = log_dir.path / str(tp)
            path.rename(final)
            fsync_dir(log_dir.path)
            log.info("moved replica's swap completed", partition=str(tp), log_dir=str(final))
            self._partitions[tp] = Partition(tp, self._file_log(tp, final, **kwargs))
            self._dirs_of[tp] = log_dir
            return
        if self._dirs_of.get(tp) is log_dir or tp in self._futures:
            log.warning("future log left over removed", log_dir=str(path))
            shutil.rmtree(path, ignore_errors=True)
            return
        future = self._file_log(tp, path, lock=partition.log.lock, **kwargs)
        self._futures[tp] = FutureLog(future, log_dir)
        log.info("replica move resumed", partition=str(tp), log_dir=str(log_dir.path))
        self.log_dir_mover.add(tp)

    def _file_log(self, tp: TopicPartition, path: Path, **kwargs: object) -> FileLog:
        topic = tp.topic
        return FileLog(
            path,
            lambda: self._settings(topic),
            self._retire,
            on_roll=self._flush_rolled,
            failures=self.log_dir_failures,
            **kwargs,  # type: ignore[arg-type]
        )

    def shutdown(self) -> None:
        """A clean stop: background tasks stopped, every log flushed and closed, the
        checkpoints written, then the clean-shutdown marker that lets the next start skip
        recovery."""
        self.log_dir_mover.shutdown()
        if self.cleaner is not None:
            self.cleaner.shutdown()
            self.cleaner = None
        if self._scheduler is not None:
            self._scheduler.shutdown()
            self._scheduler = None
        if self.files:
            with self._lock:
                for partition in self._partitions.values():
                    try:
                        partition.close()
                    except KafkaStorageError:  # its dir failed just now: logged there
                        _close_handlers(partition)
                for future in self._futures.values():
                    with contextlib.suppress(KafkaStorageError):
                        future.log.close()
                self.checkpoint_recovery_points()
                self.checkpoint_log_start_offsets()
                for log_dir in self.live_log_dirs:  # a failed dir is recovered at the next start
                    log_dir.write_clean_shutdown_marker()
        self.unlock_dirs()

    def unlock_dirs(self) -> None:
        """Release the log dir locks (a start-up that failed before ``startup``)."""
        for log_dir in self.log_dirs:
            log_dir.unlock()

    # partitions ----------------------------------------------------------------------------
    def get(self, tp: TopicPartition) -> Partition | None:
        """The hosted partition, or None."""
        return self._partitions.get(tp)

    def get_or_create(self, tp: TopicPartition) -> Partition:
        """The hosted partition, created empty when missing (in the live log dir holding
        the fewest partitions, as Kafka places new logs). KafkaStorageError for a partition
        in an offline log dir, or when its log cannot be created."""
        partition = self._partitions.get(tp)
        if partition is None:
            with self._lock:
                partition = self._partitions.get(tp)
                if partition is None:
                    partition = Partition(tp, self._new_log(tp))
                    self._partitions[tp] = partition
        return partition

    def _new_log(self, tp: TopicPartition) -> Log:
        if tp in self._offline:
            raise KafkaStorageError(f"{tp} is in an offline log dir")
        if not self.files:
            return MemoryLog()
        live = self.live_log_dirs
        if not live:
            raise KafkaStorageError(f"no log dir is online to create {tp} in")
        counts = {id(d): 0 for d in live}
        for log_dir in self._dirs_of.values():
            if id(log_dir) in counts:
                counts[id(log_dir)] += 1
        log_dir = min(live, key=lambda d: counts[id(d)])
        try:
            file_log = self._file_log(tp, log_dir.path / str(tp))
        except OSError as exc:
            self.log_dir_failures.maybe_add_offline_log_dir(str(log_dir.path), f"create {tp}", exc)
            raise KafkaStorageError(f"{tp} cannot be created in {log_dir.path}") from None
        self._dirs_of[tp] = log_dir
        return file_log

    def is_offline(self, tp: TopicPartition) -> bool:
        """Whether ``tp``'s log was in a log dir that failed (Kafka's HostedPartition.Offline)."""
        return tp in self._offline

    def handle_log_dir_failure(self, log_dir: str) -> list[TopicPartition]:
        """Kafka's LogManager.handleLogDirFailure: the logs in ``log_dir`` (offline in the
        failure channel) leave service, their files closed without a flush; their
        partitions stay offline until a restart. Returns them."""
        with self._lock:
            gone = [tp for tp, d in self._dirs_of.items() if str(d.path) == log_dir]
            partitions = [p for tp in gone if (p := self._partitions.pop(tp, None)) is not None]
            for tp in gone:
                del self._dirs_of[tp]
            self._offline.update(gone)
        # A move into the failed dir stops (the replica stays where it is), as does a move
        # out of it.
        for tp in [tp for tp, f in self._futures.items() if str(f.log_dir.path) == log_dir]:
            self.abort_future_log(tp)
        for tp in gone:
            self.abort_future_log(tp)
        for partition in partitions:
            _close_handlers(partition)
        log.warning("logs offline: their log dir failed", log_dir=log_dir, partitions=len(gone))
        return gone

    def delete(self, tp: TopicPartition) -> bool:
        """Drop one partition and its log (its directory renamed ``*-delete`` and removed
        in the background); False when it was not hosted."""
        self.abort_future_log(tp)
        with self._lock:
            partition = self._partitions.pop(tp, None)
            log_dir = self._dirs_of.pop(tp, None)
        if partition is None:
            return False
        cleaner = self.cleaner
        if cleaner is not None:
            cleaner.abort_and_pause(tp)
        partition.close()
        if log_dir is not None and self._forget_cleaner_offset(tp, log_dir):
            self._write_cleaner_offsets(log_dir)
        if cleaner is not None:
            cleaner.resume(tp)
        if isinstance(partition.log, FileLog) and log_dir is not None:
            self._delete_dir(tp, partition.log, log_dir)
        return True

    def _delete_dir(self, tp: TopicPartition, gone: FileLog, log_dir: LogDir) -> None:
        """Rename a closed log's directory ``*-delete`` and remove it in the background."""
        doomed = log_dir.path / special_dir_name(tp.topic, tp.partition, DELETE_SUFFIX)
        gone.directory.rename(doomed)
        self._later(
            "delete-log",
            lambda: shutil.rmtree(doomed, ignore_errors=True),
            self.config.file_delete_delay_ms,
        )

    def partitions(self) -> list[Partition]:
        """Every hosted partition."""
        return list(self._partitions.values())

    def replicas_by_dir(self) -> list[LogDirReplicas]:
        """Each log dir, whether it is offline, and the logs it holds (Kafka's logsByDir, for
        DescribeLogDirs); with memory storage the dirs hold none."""
        held: dict[int, list[DirReplica]] = {id(d): [] for d in self.log_dirs}
        for tp, partition in list(self._partitions.items()):
            log_dir = self._dirs_of.get(tp)
            if log_dir is not None and self.files:
                held[id(log_dir)].append(DirReplica(tp, partition.log, False))
        for tp, future in list(self._futures.items()):
            held[id(future.log_dir)].append(DirReplica(tp, future.log, True))
        failures = self.log_dir_failures
        return [
            LogDirReplicas(d.path, failures.is_offline(str(d.path)), held[id(d)])
            for d in self.log_dirs
        ]

    def _file_logs(self) -> list[tuple[TopicPartition, FileLog, LogDir]]:
        return [
            (tp, p.log, self._dirs_of[tp])
            for tp, p in list(self._partitions.items())
            if isinstance(p.log, FileLog) and tp in self._dirs_of
        ]

    # moving replicas between log dirs (KIP-113) --------------------------------------------
    def future_log(self, tp: TopicPartition) -> FutureLog | None:
        """``tp``'s future log while it moves to another log dir, else None."""
        return self._futures.get(tp)

    def alter_log_dir(self, tp: TopicPartition, destination: str) -> bool:
        """Kafka's ReplicaManager.alterReplicaLogDirs for one replica: move it to the log
        dir ``destination`` through a future log; True when a move starts. A move under way
        to another dir stops first (a move back to the current dir just stops). KafkaError:
        INVALID_TOPIC_EXCEPTION (a future dir name over 255 characters), LOG_DIR_NOT_FOUND
        (not one of ``log.dirs``, or memory storage), KAFKA_STORAGE_ERROR (the dir or the
        replica offline, or any log dir offline while a move would start),
        REPLICA_NOT_AVAILABLE (not hosted here)."""
        if len(special_dir_name(tp.topic, tp.partition, FUTURE_SUFFIX)) > 255:
            raise KafkaError(ErrorCode.invalid_topic_exception, "The topic name is too long.")
        with self._moves_lock:
            return self._alter_log_dir(tp, destination)

    def _alter_log_dir(self, tp: TopicPartition, destination: str) -> bool:
        path = os.path.abspath(destination)
        target = next((d for d in self.log_dirs if os.path.abspath(d.path) == path), None)
        if target is None or not self.files:
            raise KafkaError(
                ErrorCode.log_dir_not_found, f"log dir {destination} is not in log.dirs"
            )
        if self.log_dir_failures.is_offline(str(target.path)) or tp in self._offline:
            raise KafkaStorageError(f"log dir {destination} or {tp} is offline")
        with self._lock:
            partition = self._partitions.get(tp)
            if partition is None or tp not in self._dirs_of:
                raise KafkaError(ErrorCode.replica_not_available, f"{tp} is not hosted here")
            moving = self._futures.get(tp)
        if moving is not None and moving.log_dir is not target:
            self.abort_future_log(tp)
        elif moving is not None:
            return False
        if self._dirs_of.get(tp) is target:
            return False
        if len(self.live_log_dirs) < len(self.log_dirs):
            raise KafkaStorageError("a log dir is offline: no future log is made meanwhile")
        path_in = target.path / special_dir_name(tp.topic, tp.partition, FUTURE_SUFFIX)
        try:
            future = self._file_log(tp, path_in, lock=partition.log.lock)
        except OSError as exc:
            failed = str(target.path)
            self.log_dir_failures.maybe_add_offline_log_dir(failed, f"create future {tp}", exc)
            raise KafkaStorageError(f"the future log of {tp} cannot be created") from None
        with self._lock:
            self._futures[tp] = FutureLog(future, target)
        if self.cleaner is not None:
            self.cleaner.abort_and_pause(tp)
        log.info("replica move started", partition=str(tp), log_dir=str(target.path))
        self.log_dir_mover.add(tp)
        return True

    def replace_current_with_future(self, tp: TopicPartition) -> None:
        """Kafka's replaceCurrentWithFutureLog: the future log (as long as the current one,
        the caller holding their shared lock) becomes ``tp``'s log under its final name in
        the target dir, and the current log's directory, renamed ``-delete`` first, is
        removed in the background; the checkpoints follow. A stop between the two renames
        leaves only the future dir, which the next start takes as the log."""
        with self._lock:
            partition = self._partitions.get(tp)
            future = self._futures.get(tp)
            source = self._dirs_of.get(tp)
        if partition is None or future is None or source is None:
            return
        current, target = partition.log, future.log_dir
        assert isinstance(current, FileLog)
        end, start = future.log.log_end_offset, current.log_start_offset
        epochs = current.leader_epochs.entries
        future.log.close()  # flushed: the future dir holds every record from here on
        doomed = source.path / special_dir_name(tp.topic, tp.partition, DELETE_SUFFIX)
        final = target.path / str(tp)
        self._swap_rename(tp, source, current.directory, doomed)
        try:
            self._swap_rename(tp, target, future.log.directory, final)
        except KafkaStorageError:
            with contextlib.suppress(OSError):  # the current log stays where it was
                doomed.rename(current.directory)
            raise
        swapped = self._file_log(
            tp, final, recovery_point=end, log_start_offset=start, lock=current.lock
        )
        if epochs:
            swapped.maybe_assign_epoch_start_offset(*epochs[-1])
        swapped.maybe_increment_log_start_offset(start)
        with self._lock:  # the move ends: one change for every reader of these maps
            del self._futures[tp]
            partition.log = swapped
            self._dirs_of[tp] = target
        current.close_handlers()  # its records are in the swapped log; reads under way finish
        self._later(
            "delete-log",
            lambda: shutil.rmtree(doomed, ignore_errors=True),
            self.config.file_delete_delay_ms,
        )
        with self._cleaner_offsets_lock:
            moved = self._cleaner_offsets.get(id(source), {}).pop((tp.topic, tp.partition), None)
            if moved is not None:
                self._cleaner_offsets.setdefault(id(target), {})[(tp.topic, tp.partition)] = moved
        for log_dir in (source, target):
            self._write_cleaner_offsets(log_dir)
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        if self.cleaner is not None:
            self.cleaner.resume(tp)
        log.info("replica moved", partition=str(tp), log_dir=str(target.path), log_end_offset=end)

    def _swap_rename(self, tp: TopicPartition, log_dir: LogDir, old: Path, new: Path) -> None:
        """One rename of a swap, made durable; an I/O error takes ``log_dir`` offline."""
        try:
            old.rename(new)
            fsync_dir(log_dir.path)
        except OSError as exc:
            self.log_dir_failures.maybe_add_offline_log_dir(str(log_dir.path), f"swap {tp}", exc)
            raise KafkaStorageError(f"{tp} cannot be swapped into {log_dir.path}") from None

    def abort_future_log(self, tp: TopicPartition) -> None:
        """Stop ``tp``'s move, if any: its future log goes (Kafka's removeFutureLocalReplica).
        Under the shared lock, so a swap under way ends first (and there is nothing to stop)
        and a chunk being copied is dropped, not appended to closed files."""
        future = self._futures.get(tp)
        if future is None:
            return
        with future.log.lock:
            with self._lock:
                if self._futures.get(tp) is not future:
                    return
                del self._futures[tp]
            future.generation += 1
            future.log.close_handlers()
        if not self.log_dir_failures.is_offline(str(future.log_dir.path)):
            self._delete_dir(tp, future.log, future.log_dir)
        if self.cleaner is not None:
            self.cleaner.resume(tp)
        log.info("replica move stopped", partition=str(tp), log_dir=str(future.log_dir.path))

    def _follow_truncation(self, tp: TopicPartition, cut: Callable[[FileLog], object]) -> None:
        """A truncation of ``tp``'s current log cuts its future log the same way, and a copy
        read before it is dropped (the move's generation moves on)."""
        future = self._futures.get(tp)
        partition = self._partitions.get(tp)
        if future is None or partition is None:
            return
        with partition.log.lock:
            cut(future.log)
            future.generation += 1

    # background work ---------------------------------------------------------------------
    def _later(self, name: str, task: Callable[[], None], delay_ms: int) -> None:
        if self._scheduler is not None:
            self._scheduler.schedule(name, task, delay_ms)
        else:
            task()

    def _retire(self, segment: LogSegment, delay_ms: int) -> None:
        """Close and remove a deleted segment's files once reads under way are done."""

        def remove() -> None:
            segment.close()
            for path in segment.files():
                path.with_name(path.name + ".deleted").unlink(missing_ok=True)

        self._later("delete-file", remove, delay_ms)

    def _flush_rolled(self, file_log: FileLog, up_to: int) -> None:
        """After a roll, the segments before it are flushed in the background and the
        recovery point moves to the new segment (Kafka's flush on roll)."""

        def flush() -> None:
            with contextlib.suppress(KafkaStorageError):  # logged by the failure channel
                file_log.flush(up_to)

        self._later("flush-log", flush, 0)

    def cleanup_logs(self) -> int:
        """Retention over every log (kafka-log-retention); segments deleted."""
        now = time.time_ns() // 1_000_000
        deleted = 0
        for tp, file_log, _ in self._file_logs():
            if self.cleaner is not None and file_log.settings.compact:
                continue  # the cleaner threads apply a compacted log's retention (Kafka's way)
            try:
                deleted += file_log.delete_old_segments(now)
            except KafkaStorageError:
                continue  # logged by the failure channel
            except OSError as exc:
                log.warning("retention failed", partition=str(tp), reason=str(exc))
        if deleted:
            self.checkpoint_log_start_offsets()
        return deleted

    def _flush_due(self) -> None:
        now = time.time_ns() // 1_000_000
        for _, file_log, _ in self._file_logs():
            with contextlib.suppress(KafkaStorageError):  # logged by the failure channel
                file_log.flush_if_due(now)

    def _per_dir(self, value: Callable[[FileLog], int]) -> dict[int, dict[tuple[str, int], int]]:
        out: dict[int, dict[tuple[str, int], int]] = {id(d): {} for d in self.log_dirs}
        for tp, file_log, log_dir in self._file_logs():
            out[id(log_dir)][(tp.topic, tp.partition)] = value(file_log)
        for tp, future in list(self._futures.items()):
            out[id(future.log_dir)][(tp.topic, tp.partition)] = value(future.log)
        return out

    def checkpoint_recovery_points(self) -> None:
        """Write each log dir's ``recovery-point-offset-checkpoint``."""
        if not self.files:
            return
        points = self._per_dir(lambda f: f.recovery_point)
        for log_dir in self.live_log_dirs:
            self._write_checkpoint(log_dir, log_dir.recovery_points, points[id(log_dir)])

    def checkpoint_log_start_offsets(self) -> None:
        """Write each log dir's ``log-start-offset-checkpoint`` (Kafka writes the offsets
        above a log's first segment base; writing them all reads the same)."""
        if not self.files:
            return
        starts = self._per_dir(lambda f: f.log_start_offset)
        for log_dir in self.live_log_dirs:
            self._write_checkpoint(log_dir, log_dir.log_start_offsets, starts[id(log_dir)])

    def _write_checkpoint(
        self,
        log_dir: LogDir,
        checkpoint: OffsetCheckpointFile,
        entries: Mapping[tuple[str, int], int],
    ) -> None:
        """Write one of ``log_dir``'s checkpoints; an I/O error takes the dir offline."""
        try:
            checkpoint.write(entries)
        except OSError as exc:
            action = f"write {checkpoint.path.name}"
            self.log_dir_failures.maybe_add_offline_log_dir(str(log_dir.path), action, exc)

    # truncation (a follower's divergent tail) ----------------------------------------------
    def truncate_to(self, tp: TopicPartition, offset: int) -> bool:
        """Kafka's LogManager.truncateTo for one partition: :meth:`Log.truncate_to`, with
        the log cleaner paused (a cleaning under way given up) when the cut is below the
        active segment, the cleaner's checkpoint brought back to the new active segment's
        base, and the recovery points checkpointed. False when nothing was cut or ``tp`` is
        not hosted. Call it without holding the log's lock: the cleaner's swap takes it."""
        partition = self._partitions.get(tp)
        if partition is None:
            return False
        target = partition.log
        with self._cleaner_paused(tp, target, offset):
            truncated = target.truncate_to(offset)
            self._truncate_cleaner_offset(tp, target)
        self._follow_truncation(tp, lambda future: future.truncate_to(offset))
        if truncated and isinstance(target, FileLog):
            self.checkpoint_recovery_points()
        return truncated

    def truncate_fully_and_start_at(self, tp: TopicPartition, offset: int) -> None:
        """Kafka's LogManager.truncateFullyAndStartAt for one partition (see
        :meth:`Log.truncate_fully_and_start_at`), the cleaner paused meanwhile, its
        checkpoint and the recovery and log-start checkpoints following. Call it without
        holding the log's lock."""
        partition = self._partitions.get(tp)
        if partition is None:
            return
        target = partition.log
        with self._cleaner_paused(tp, target, -1):
            target.truncate_fully_and_start_at(offset)
            self._truncate_cleaner_offset(tp, target)
        self._follow_truncation(tp, lambda future: future.truncate_fully_and_start_at(offset))
        if isinstance(target, FileLog):
            self.checkpoint_recovery_points()
            self.checkpoint_log_start_offsets()

    @contextlib.contextmanager
    def _cleaner_paused(self, tp: TopicPartition, target: Log, offset: int) -> Iterator[None]:
        cleaner = self.cleaner
        pause = (
            cleaner is not None
            and isinstance(target, FileLog)
            and offset < target.segments[-1].base_offset
        )
        if cleaner is None or not pause:
            yield
            return
        cleaner.abort_and_pause(tp)
        try:
            yield
        finally:
            cleaner.resume(tp)

    def _truncate_cleaner_offset(self, tp: TopicPartition, target: Log) -> None:
        """A first dirty offset past the active segment's base comes back to it (Kafka's
        maybeTruncateCheckpoint): the offsets after it may hold other records now."""
        log_dir = self._dirs_of.get(tp)
        if log_dir is None or not isinstance(target, FileLog):
            return
        base = target.segments[-1].base_offset
        key = (tp.topic, tp.partition)
        with self._cleaner_offsets_lock:
            entries = self._cleaner_offsets.get(id(log_dir), {})
            if entries.get(key, -1) <= base:
                return
            entries[key] = base
        self._write_cleaner_offsets(log_dir)

    # the log cleaner's checkpoint ----------------------------------------------------------
    def compacted_logs(self) -> list[tuple[TopicPartition, FileLog]]:
        """The file logs whose topic's cleanup policy contains compact."""
        return [(tp, f) for tp, f, _ in self._file_logs() if f.settings.compact]

    def cleaner_offsets(self) -> dict[TopicPartition, int]:
        """Every log's first dirty offset, as in the ``cleaner-offset-checkpoint`` files."""
        with self._cleaner_offsets_lock:
            return {
                TopicPartition(topic, partition): offset
                for entries in self._cleaner_offsets.values()
                for (topic, partition), offset in entries.items()
            }

    def update_cleaner_offset(self, tp: TopicPartition, offset: int) -> None:
        """Write ``tp``'s first dirty offset to its log dir's ``cleaner-offset-checkpoint``
        (after the cleaner cleaned it up to there)."""
        log_dir = self._dirs_of.get(tp)
        if log_dir is None:
            return
        with self._cleaner_offsets_lock:
            self._cleaner_offsets.setdefault(id(log_dir), {})[(tp.topic, tp.partition)] = offset
        self._write_cleaner_offsets(log_dir)

    def _forget_cleaner_offset(self, tp: TopicPartition, log_dir: LogDir) -> bool:
        with self._cleaner_offsets_lock:
            entries = self._cleaner_offsets.get(id(log_dir), {})
            return entries.pop((tp.topic, tp.partition), None) is not None

    def _write_cleaner_offsets(self, log_dir: LogDir) -> None:
        with self._cleaner_offsets_lock:
            entries = dict(self._cleaner_offsets.get(id(log_dir), {}))
            self._write_checkpoint(log_dir, log_dir.cleaner_offsets, entries)


def _close_handlers(partition: Partition) -> None:
    """Close a partition's files without a flush (its log dir failed)."""
    if isinstance(partition.log, FileLog):
        partition.log.close_handlers()
