"""LeaderEpochCache: which leader epoch began at which offset, kept in
``leader-epoch-checkpoint`` (Kafka's LeaderEpochFileCache; KIP-101 and KIP-320 read it).

A file log keeps the cache in its directory; a memory log keeps the same cache without a
file (``directory`` None). Changes run under the log's lock; readers (OffsetForLeaderEpoch)
take none: the entry list is replaced whole, never changed in place.
"""

from __future__ import annotations

import threading
from pathlib import Path

import structlog

from kplane.broker.log.checkpoint_file import LeaderEpochCheckpointFile

log = structlog.get_logger(__name__)

CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    """(epoch, start offset) entries, epochs and offsets increasing; written on change."""

    def __init__(self, directory: Path | None) -> None:
        self._file = (
            None if directory is None else LeaderEpochCheckpointFile(directory / CHECKPOINT)
        )
        self._entries: list[tuple[int, int]] = [] if self._file is None else self._file.read()
        self._lock = threading.Lock()

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        """The latest epoch with an entry, -1 when there is none."""
        entries = self._entries
        return entries[-1][0] if entries else UNDEFINED_EPOCH

    def _write(self, entries: list[tuple[int, int]]) -> None:
        self._entries = entries
        if self._file is not None:
            self._file.write(entries)

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` begins at ``start_offset`` (Kafka's assign): nothing when
        ``epoch`` is the latest and starts no earlier; otherwise the entries it contradicts
        (an epoch at least as large, or a start at least as late) go first. A negative
        epoch (a batch no leader stamped) is ignored."""
        if epoch < 0 or start_offset < 0:
            return
        entries = self._entries
        if entries and entries[-1][0] == epoch and start_offset >= entries[-1][1]:
            return
        with self._lock:
            kept = list(self._entries)
            removed = []
            while kept and (kept[-1][0] >= epoch or kept[-1][1] >= start_offset):
                removed.append(kept.pop())
            if len(removed) > 1 or (removed and removed[0][1] != start_offset):
                log.warning(
                    "new leader epoch entry truncated conflicting entries",
                    entry=(epoch, start_offset),
                    removed=removed,
                )
            kept.append((epoch, start_offset))
            self._write(kept)

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """What OffsetForLeaderEpoch answers (Kafka's endOffsetFor): (the largest epoch at
        most ``epoch``, the start offset of the first epoch after it), with the log end for
        the latest epoch; for an epoch older than every entry, (``epoch``, the first entry's
        start offset); (-1, -1) for an undefined epoch, one newer than the latest, or an
        empty cache."""
        entries = self._entries
        if epoch == UNDEFINED_EPOCH or not entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if entries[-1][0] == epoch:
            return epoch, log_end_offset
        higher = next((i for i, e in enumerate(entries) if e[0] > epoch), None)
        if higher is None:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return epoch, entries[0][1]
        return entries[higher - 1][0], entries[higher][1]

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch the record at ``offset`` was written in, None when before every entry."""
        found = None
        for epoch, start in self._entries:
            if start > offset:
                break
            found = epoch
        return found

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs that begin at or past ``end_offset`` (the log was cut there)."""
        with self._lock:
            kept = [e for e in self._entries if e[1] < end_offset]
            if kept != self._entries:
                self._write(kept)

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset`` (Kafka's truncateFromStart): the entries
        beginning at or before it go, the last of them kept as starting there."""
        with self._lock:
            entries = self._entries
            below = [e for e in entries if e[1] <= start_offset]
            if not below or (len(below) == 1 and below[0][1] == start_offset):
                return
            self._write([(below[-1][0], start_offset), *entries[len(below) :]])

    def clear(self) -> None:
        """Forget every entry (the log was emptied)."""
        with self._lock:
            if self._entries or self._file is not None:
                self._write([])
