"""LeaderEpochCache: which leader epoch began at which offset, kept in
``leader-epoch-checkpoint`` (Kafka's LeaderEpochFileCache; KIP-101 and KIP-320 read it)."""

from __future__ import annotations

import threading
from pathlib import Path

from broker.log.checkpoint_file import LeaderEpochCheckpointFile

CHECKPOINT = "leader-epoch-checkpoint"


class LeaderEpochCache:
    """(epoch, start offset) entries, epochs and offsets increasing; written on change."""

    def __init__(self, directory: Path) -> None:
        self._file = LeaderEpochCheckpointFile(directory / CHECKPOINT)
        self._entries: list[tuple[int, int]] = list(self._file.read())
        self._lock = threading.Lock()

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1][0] if self._entries else -1

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` begins at ``start_offset`` when it is newer than the latest."""
        if epoch < 0 or epoch <= self.latest_epoch:
            return
        with self._lock:
            self._entries.append((epoch, start_offset))
            self._file.write(self._entries)

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(the largest epoch <= ``epoch``, the offset where the epoch after it begins, or
        the log end for the latest): what OffsetForLeaderEpoch answers; (-1, -1) unknown."""
        entries = self._entries
        for i in range(len(entries) - 1, -1, -1):
            if entries[i][0] <= epoch:
                end = entries[i + 1][1] if i + 1 < len(entries) else log_end_offset
                return entries[i][0], end
        return -1, -1

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs that begin at or past ``end_offset`` (the log was cut there)."""
        with self._lock:
            kept = [e for e in self._entries if e[1] < end_offset]
            if kept != self._entries:
                self._entries = kept
                self._file.write(kept)
