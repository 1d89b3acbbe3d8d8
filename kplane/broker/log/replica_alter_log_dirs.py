"""ReplicaAlterLogDirsManager: replicas moving between log dirs (KIP-113), as Kafka's
ReplicaAlterLogDirsThreads move them.

A move has a future log in the target dir (``LogManager.alter_log_dir`` creates it; it
shares its current log's lock). Threads copy each future log up to its current log a chunk
at a time, as a follower copies its leader: batches with their offsets, epochs and producer
state (``Log.append_as_follower``), without holding the lock while reading. Once a copy
reaches the current log's end, the rest (what was appended meanwhile) is copied under the
lock, so no append comes between, and the LogManager swaps the future log in. A truncation
of the current log truncates the future log too and bumps the move's generation, so a
chunk read before it is dropped. The copying (not the rest under the lock) is throttled to
``replica.alter.log.dirs.io.max.bytes.per.second``, as Kafka's alter-log-dirs quota does.
"""

from __future__ import annotations

import collections
import enum
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from kplane.broker.log.file_log import FileLog
from kplane.broker.log.log import Log
from kplane.broker.log.log_dir import LogDir
from kplane.broker.log.log_dir_failure_channel import KafkaStorageError
from kplane.broker.log.partition import TopicPartition
from kplane.broker.utils.file_region import materialize
from kplane.protocol.records import read_partial_batches, scan_batches

if TYPE_CHECKING:
    from kplane.broker.log.log_manager import LogManager

log = structlog.get_logger(__name__)

CHUNK_BYTES = 1 << 20
"""Bytes one copy step reads from the current log."""
UNLIMITED = 2**63 - 1
IDLE_WAIT_S = 0.05
"""How long a thread waits after a step that found nothing to copy."""


@dataclass(slots=True)
class FutureLog:
    """A replica's future log: where it is, and how many truncations it has followed."""

    log: FileLog
    log_dir: LogDir
    generation: int = 0


class ReplicaAlterLogDirsManager:
    """Threads that copy future logs up to their current logs and have them swapped in."""

    def __init__(self, log_manager: LogManager, threads: int) -> None:
        self._log_manager = log_manager
        self._thread_count = max(threads, 1)
        self._pending: collections.deque[TopicPartition] = collections.deque()
        self._queued: set[TopicPartition] = set()
        self._wake = threading.Condition()
        self._stopping = False
        self._threads: list[threading.Thread] = []
        self.io_max_bytes_per_second: Callable[[], int] = lambda: UNLIMITED
        """The copy rate limit (``replica.alter.log.dirs.io.max.bytes.per.second``)."""
        self._debt = 0.0
        self._debt_at = time.monotonic()

    def add(self, tp: TopicPartition) -> None:
        """Copy ``tp``'s future log from now on (the threads start with the first move)."""
        with self._wake:
            if self._stopping or tp in self._queued:
                return
            if not self._threads:
                self._threads = [
                    threading.Thread(
                        target=self._run, name=f"ReplicaAlterLogDirsThread-{i}", daemon=True
                    )
                    for i in range(self._thread_count)
                ]
                for thread in self._threads:
                    thread.start()
            self._queued.add(tp)
            self._pending.append(tp)
            self._wake.notify()

    def shutdown(self) -> None:
        """Stop the threads after the step each is taking; moves resume at the next start."""
        with self._wake:
            self._stopping = True
            self._wake.notify_all()
            threads, self._threads = self._threads, []
        for thread in threads:
            thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._pending and not self._stopping:
                    self._wake.wait()
                if self._stopping:
                    return
                tp = self._pending.popleft()
            try:
                step = self._step(tp)
            except KafkaStorageError:  # logged by the failure channel; the dir is handled
                step = Step.DONE
            except Exception as exc:  # one move's fault never stops the others
                log.warning("replica move failed", partition=str(tp), reason=str(exc))
                self._log_manager.abort_future_log(tp)
                step = Step.DONE
            with self._wake:
                # Done, unless a new move of the partition began meanwhile (``add`` found it
                # queued): that one goes on from this entry.
                if step is Step.DONE and self._log_manager.future_log(tp) is None:
                    self._queued.discard(tp)
                    continue
                self._pending.append(tp)
                if step is Step.IDLE:  # nothing to copy just now: not a busy loop
                    self._wake.wait(IDLE_WAIT_S)

    def _step(self, tp: TopicPartition) -> Step:
        """Copy one chunk of ``tp``, or the rest and swap once the copy reached the end."""
        manager = self._log_manager
        future = manager.future_log(tp)
        partition = manager.get(tp)
        if future is None or partition is None:
            return Step.DONE
        current, generation = partition.log, future.generation
        start = future.log.log_end_offset
        if current.log_start_offset > start:  # what it still needs is deleted: start there
            with current.lock:
                if future.generation == generation:
                    future.log.truncate_fully_and_start_at(current.log_start_offset)
            return Step.PROGRESS
        end = current.log_end_offset
        if start < end:
            if self._throttled():
                return Step.IDLE
            before = future.log.size_bytes
            copied = _copy_chunk(current, future, generation, start)
            self._charge(future.log.size_bytes - before)
            if copied < end:
                return Step.PROGRESS if copied > start else Step.IDLE
        with current.lock:  # no append comes between the rest of the copy and the swap
            if future.generation != generation or partition.log is not current:
                return Step.PROGRESS
            while (start := future.log.log_end_offset) < current.log_end_offset:
                if _copy_chunk(current, future, generation, start) == start:
                    return Step.IDLE  # a gap it cannot copy yet
            manager.replace_current_with_future(tp)
        return Step.DONE

    def _throttled(self) -> bool:
        """Whether the bytes copied so far are more than the rate allows by now."""
        rate = self.io_max_bytes_per_second()
        with self._wake:
            now = time.monotonic()
            self._debt = max(0.0, self._debt - rate * (now - self._debt_at))
            self._debt_at = now
            return rate < UNLIMITED and self._debt > 0

    def _charge(self, copied: int) -> None:
        with self._wake:
            self._debt += max(copied, 0)


class Step(enum.Enum):
    """What one copy step came to."""

    PROGRESS = "progress"
    IDLE = "idle"
    DONE = "done"


def _copy_chunk(current: Log, future: FutureLog, generation: int, start: int) -> int:
    """Append to the future log the whole batches ``current`` holds from ``start`` (one
    chunk of them) and return where it ends. Read without the lock, appended under it,
    and dropped when a truncation came between (the generation moved, or the log no longer
    ends at ``start``). A first batch that begins before an empty future log's start (the
    log start offset inside a batch, as DeleteRecords leaves it) restarts the log at the
    batch, as Kafka's Partition does for a future replica."""
    data = b"".join(materialize(current.read(start, CHUNK_BYTES, True)))
    whole = read_partial_batches(data) if data else []
    if not whole:
        return start
    complete = data[: whole[-1].position + whole[-1].size]
    headers = scan_batches(complete)
    target = future.log
    with current.lock:
        if future.generation != generation or target.log_end_offset != start:
            return start
        if headers[0].base_offset < start == target.log_start_offset:
            target.truncate_fully_and_start_at(headers[0].base_offset)
        target.append_as_follower(complete, headers)
        return target.log_end_offset
