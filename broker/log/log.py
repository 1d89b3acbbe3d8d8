"""Partition logs: the Log interface and its in-memory implementation.

Batches stay bytes: a log stores the patched batch bytes and serves slices of them.
"""

from __future__ import annotations

import bisect
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass

from protocol.records import BatchHeader, iter_records


@dataclass(slots=True)
class LogAppendInfo:
    """What an append did: the offsets it assigned."""

    first_offset: int
    last_offset: int
    log_append_time_ms: int
    log_start_offset: int


class Log(ABC):
    """An append-only sequence of record batches with offsets."""

    @property
    @abstractmethod
    def log_start_offset(self) -> int:
        """Offset of the first record still stored."""

    @property
    @abstractmethod
    def log_end_offset(self) -> int:
        """Offset the next appended record gets."""

    @property
    @abstractmethod
    def size_bytes(self) -> int:
        """Bytes stored."""

    @abstractmethod
    def append(self, buffer: bytearray, batches: list[BatchHeader]) -> None:
        """Store ``batches`` of ``buffer``, whose offsets are already assigned."""

    @abstractmethod
    def read(self, offset: int, max_bytes: int, min_one_batch: bool) -> list[memoryview]:
        """Whole batches from the one holding ``offset``, up to ``max_bytes``.

        With ``min_one_batch`` the first batch is returned even when larger (KIP-74).
        """

    @abstractmethod
    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with a timestamp >= ``timestamp_ms``."""

    @abstractmethod
    def max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp."""


class MemoryLog(Log):
    """A log held in memory: a list of batch slices indexed by base offset."""

    def __init__(self, start_offset: int = 0) -> None:
        self._start = start_offset
        self._end = start_offset
        self._bases: list[int] = []
        self._lasts: list[int] = []
        self._views: list[memoryview] = []
        self._max_ts: list[int] = []
        self._size = 0
        self._lock = threading.Lock()

    @property
    def log_start_offset(self) -> int:
        return self._start

    @property
    def log_end_offset(self) -> int:
        return self._end

    @property
    def size_bytes(self) -> int:
        return self._size

    def append(self, buffer: bytearray, batches: list[BatchHeader]) -> None:
        view = memoryview(buffer)
        with self._lock:
            for b in batches:
                self._views.append(view[b.position : b.position + b.size])
                self._lasts.append(b.base_offset + b.last_offset_delta)
                self._max_ts.append(b.max_timestamp)
                self._bases.append(b.base_offset)
                self._size += b.size
            if batches:
                self._end = batches[-1].base_offset + batches[-1].last_offset_delta + 1

    def read(self, offset: int, max_bytes: int, min_one_batch: bool) -> list[memoryview]:
        count = len(self._bases)
        index = bisect.bisect_left(self._lasts, offset, 0, count)
        out: list[memoryview] = []
        total = 0
        while index < count:
            view = self._views[index]
            if total + len(view) > max_bytes and not (min_one_batch and not out):
                break
            out.append(view)
            total += len(view)
            index += 1
        return out

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        count = len(self._bases)
        for i in range(count):
            if self._max_ts[i] >= timestamp_ms:
                for record in iter_records(self._views[i]):
                    if record.timestamp is not None and record.timestamp >= timestamp_ms:
                        return record.offset, record.timestamp
        return None

    def max_timestamp(self) -> tuple[int, int] | None:
        count = len(self._bases)
        if count == 0:
            return None
        i = max(range(count), key=self._max_ts.__getitem__)
        best: tuple[int, int] | None = None
        for record in iter_records(self._views[i]):
            ts = record.timestamp if record.timestamp is not None else -1
            if best is None or ts >= best[1]:
                best = (record.offset, ts)
        return best
