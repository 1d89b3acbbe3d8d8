"""Partition logs: the Log interface and its in-memory implementation.

Batches stay bytes: a log stores the patched batch bytes and serves slices of them. A log
also holds the producer state its batches built and the aborted transactions their markers
completed (see :mod:`broker.log.transaction_index`).
"""

from __future__ import annotations

import bisect
import struct
import threading
from abc import ABC, abstractmethod
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from broker.log.producer_state import CompletedTxn, ProducerStateManager
from broker.log.transaction_index import AbortedTxn, TransactionIndex
from protocol.fetch_response import Piece
from protocol.records import (
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    BatchHeader,
    EndTxnMarker,
    Record,
    iter_records,
    served_prefix,
)

PREFIX_SIZE = 16  # baseOffset, batchLength, partitionLeaderEpoch: see served_prefix
_PEEK = struct.Struct(">qi")  # baseOffset, batchLength
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_OFFSET_DELTA_POS = 23


@dataclass(slots=True)
class LogAppendInfo:
    """What an append did: the offsets it assigned."""

    first_offset: int
    last_offset: int
    log_append_time_ms: int
    log_start_offset: int


def first_at_or_after(
    records: Iterable[Record], timestamp_ms: int, start: int
) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record from offset ``start`` on whose timestamp is
    at least ``timestamp_ms`` (ListOffsets by timestamp)."""
    for record in records:
        ts = record.timestamp
        if ts is not None and ts >= timestamp_ms and record.offset >= start:
            return record.offset, ts
    return None


def next_offset_after(pieces: Sequence[Piece]) -> int | None:
    """The offset after the last whole batch in ``pieces`` (batches laid end to end, cut
    anywhere, as :meth:`Log.read` returns them); None when they hold no whole batch."""
    chunks = [memoryview(p).cast("B") for p in pieces]
    total = sum(len(c) for c in chunks)
    head_size = _LAST_OFFSET_DELTA_POS + _LAST_OFFSET_DELTA.size
    index = start = position = 0  # chunks[index] begins at byte ``start`` of the whole
    found = None
    while position + head_size <= total:
        while start + len(chunks[index]) <= position:
            start += len(chunks[index])
            index += 1
        head = bytearray()
        k, offset = index, position - start
        while len(head) < head_size:
            head += chunks[k][offset : offset + head_size - len(head)]
            k, offset = k + 1, 0
        base, length = _PEEK.unpack_from(head)
        size = LOG_OVERHEAD + length
        if length < MIN_BATCH_LENGTH or position + size > total:
            break
        (delta,) = _LAST_OFFSET_DELTA.unpack_from(head, _LAST_OFFSET_DELTA_POS)
        found = base + delta + 1
        position += size
    return found


def latest_of_max(records: Iterable[Record]) -> tuple[int, int] | None:
    """(offset, timestamp) of the last record with the largest timestamp (ListOffsets
    MAX_TIMESTAMP, KIP-734)."""
    best: tuple[int, int] | None = None
    for record in records:
        ts = record.timestamp if record.timestamp is not None else -1
        if best is None or ts >= best[1]:
            best = (record.offset, ts)
    return best


class Log(ABC):
    """An append-only sequence of record batches with offsets, the producer state its
    batches built, and the aborted transactions its markers completed."""

    producer_state: ProducerStateManager
    lock: threading.RLock
    """Serializes appends (and the producer state they update) with whatever else changes
    the log: rolls, retention, the cleaner's swaps. The Partition appends under it."""

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
    def append(self, buffer: bytes, batches: list[BatchHeader]) -> None:
        """Store ``batches`` of ``buffer``; their headers carry the assigned offsets."""

    def update_producer_state(
        self, batch: BatchHeader, marker: EndTxnMarker | None = None, now_ms: int | None = None
    ) -> CompletedTxn | None:
        """Record an appended batch in the producer state (``marker``: what a control batch
        says). The transaction a marker completes is indexed, when aborted, before it stops
        holding the last stable offset back (Kafka's order: a reader that sees the LSO move
        finds the index entry)."""
        completed = self.producer_state.update(batch, now_ms, marker)
        if completed is not None:
            if completed.is_aborted:
                self._txn_index_for(completed.last_offset).append(
                    AbortedTxn(
                        completed.producer_id,
                        completed.first_offset,
                        completed.last_offset,
                        completed.last_stable_offset,
                    )
                )
            self.producer_state.complete_txn(completed)
        return completed

    @abstractmethod
    def _txn_index_for(self, offset: int) -> TransactionIndex:
        """The transaction index that keeps an abort marker at ``offset``."""

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest ongoing transaction, at least the log start
        (Kafka's firstUnstableOffset); None when no transaction is ongoing."""
        first = self.producer_state.first_unstable_offset
        return None if first is None else max(first, self.log_start_offset)

    @abstractmethod
    def collect_aborted_transactions(
        self, start_offset: int, upper_bound_offset: int
    ) -> list[AbortedTxn]:
        """The aborted transactions whose marker is at or after ``start_offset`` and that
        began below ``upper_bound_offset`` (Kafka's collectAbortedTransactions)."""

    @abstractmethod
    def read(
        self, offset: int, max_bytes: int, min_one_batch: bool, max_offset: int | None = None
    ) -> list[Piece]:
        """Whole batches from the one holding ``offset``, up to ``max_bytes``, as pieces
        to write one after the other (a served prefix and the stored bytes per batch).

        With ``min_one_batch`` the first batch is returned even when larger (KIP-74). With
        ``max_offset`` (a batch boundary: the last stable offset) only batches below it.
        """

    @abstractmethod
    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with a timestamp >= ``timestamp_ms``."""

    @abstractmethod
    def max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp."""

    @abstractmethod
    def maybe_increment_log_start_offset(self, new_start: int) -> bool:
        """Move the log start offset forward to ``new_start`` (never back, never past the
        end): DeleteRecords and retention. Returns whether it moved."""

    def flush(self, up_to: int | None = None) -> None:  # noqa: B027 - nothing to flush
        """Make what was appended durable (up to ``up_to``)."""

    def close(self) -> None:  # noqa: B027 - nothing to release
        """Release the log's files after a last flush."""


class MemoryLog(Log):
    """A log held in memory: appended buffers, and per batch its place in them.

    Buffers are kept as the producer's request delivered them; each batch is served as
    its ``served_prefix`` (assigned offset and leader epoch) followed by its stored bytes
    from byte 16 on, so neither append nor read copies record data. Positions and
    offsets live in ``array`` columns, so a long log adds almost nothing for the garbage
    collector to walk.
    """

    def __init__(self, start_offset: int = 0) -> None:
        self.producer_state = ProducerStateManager()
        self.txn_index = TransactionIndex(None)
        self.lock = threading.RLock()
        self._start = start_offset
        self._end = start_offset
        self._buffers: list[bytes] = []
        self._prefixes: list[bytes] = []
        self._positions = array("q")
        self._sizes = array("q")
        self._lasts = array("q")
        self._max_ts = array("q")
        self._size = 0

    @property
    def log_start_offset(self) -> int:
        return self._start

    @property
    def log_end_offset(self) -> int:
        return self._end

    @property
    def size_bytes(self) -> int:
        return self._size

    def append(self, buffer: bytes, batches: list[BatchHeader]) -> None:
        with self.lock:
            for b in batches:
                self._buffers.append(buffer)
                self._prefixes.append(served_prefix(b))
                self._positions.append(b.position)
                self._sizes.append(b.size)
                self._max_ts.append(b.max_timestamp)
                # Last: readers take the count from this column.
                self._lasts.append(b.base_offset + b.last_offset_delta)
                self._size += b.size
            if batches:
                self._end = batches[-1].base_offset + batches[-1].last_offset_delta + 1

    def maybe_increment_log_start_offset(self, new_start: int) -> bool:
        """Reads below the new start are refused by the caller; the batches stay in memory
        (this engine serves test fixtures), so a read in progress never sees them move."""
        with self.lock:
            if new_start <= self._start:
                return False
            self._start = min(new_start, self._end)
            return True

    def _pieces(self, index: int) -> tuple[bytes, memoryview]:
        start = self._positions[index] + PREFIX_SIZE
        end = self._positions[index] + self._sizes[index]
        return self._prefixes[index], memoryview(self._buffers[index])[start:end]

    def _txn_index_for(self, offset: int) -> TransactionIndex:
        return self.txn_index

    def collect_aborted_transactions(
        self, start_offset: int, upper_bound_offset: int
    ) -> list[AbortedTxn]:
        return self.txn_index.collect(start_offset, upper_bound_offset)[0]

    def read(
        self, offset: int, max_bytes: int, min_one_batch: bool, max_offset: int | None = None
    ) -> list[Piece]:
        count = len(self._lasts)
        index = bisect.bisect_left(self._lasts, offset, 0, count)
        out: list[Piece] = []
        total = 0
        while index < count:
            if max_offset is not None and self._lasts[index] >= max_offset:
                break
            size = self._sizes[index]
            if total + size > max_bytes and not (min_one_batch and not out):
                break
            out.extend(self._pieces(index))
            total += size
            index += 1
        return out

    def _records(self, index: int) -> list[Record]:
        return list(iter_records(b"".join(self._pieces(index))))

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        for i in range(len(self._lasts)):
            if self._max_ts[i] >= timestamp_ms:
                found = first_at_or_after(self._records(i), timestamp_ms, self._start)
                if found is not None:
                    return found
        return None

    def max_timestamp(self) -> tuple[int, int] | None:
        count = len(self._lasts)
        if count == 0:
            return None
        return latest_of_max(self._records(max(range(count), key=self._max_ts.__getitem__)))
