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

import structlog

from kplane.broker.log.leader_epoch_cache import LeaderEpochCache
from kplane.broker.log.producer_state import CompletedTxn, ProducerStateManager
from kplane.broker.log.transaction_index import AbortedTxn, TransactionIndex
from kplane.broker.utils.file_region import PiecesEndToEnd, Transferable
from kplane.protocol.errors import ErrorCode, KafkaError
from kplane.protocol.records import (
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    BatchHeader,
    Buffer,
    EndTxnMarker,
    InvalidRecordError,
    Record,
    end_txn_marker,
    iter_records,
    scan_batches,
    served_prefix,
)

log = structlog.get_logger(__name__)

PREFIX_SIZE = 16  # baseOffset, batchLength, partitionLeaderEpoch: see served_prefix
_PEEK = struct.Struct(">qi")  # baseOffset, batchLength
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_OFFSET_DELTA_POS = 23


class UnexpectedAppendOffsetError(KafkaError):
    """A follower append whose batches do not continue the log (Kafka's
    UnexpectedAppendOffsetException, and its OffsetsOutOfOrderException): a kept batch
    begins below the log end offset, or below the end of the batch before it. Nothing was
    appended. ``first_offset``/``last_offset``: the offsets of the appended range."""

    def __init__(self, message: str, first_offset: int, last_offset: int) -> None:
        super().__init__(ErrorCode.unknown_server_error, message)
        self.first_offset = first_offset
        self.last_offset = last_offset


def control_marker(batch: Buffer, header: BatchHeader, **context: str) -> EndTxnMarker | None:
    """What a whole stored control batch says (None: emptied, another control type, or
    unreadable). An unreadable one is logged, with ``context``, and read as no marker: a
    replay ignores it, the cleaner keeps it as it is."""
    try:
        return end_txn_marker(batch)
    except InvalidRecordError as exc:
        log.warning(
            "control batch read as no marker: not a readable transaction marker",
            offset=header.base_offset,
            reason=exc.message,
            **context,
        )
        return None


def replay_into(
    state: ProducerStateManager, batch: BatchHeader, marker: EndTxnMarker | None
) -> None:
    """Rebuild ``state`` from a stored batch (Kafka's loadProducersFromRecords): what an
    append did to it, without the transaction index, which already holds what its markers
    completed."""
    completed = state.update(batch, batch.max_timestamp, marker)
    if completed is not None:
        state.complete_txn(completed)


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


def next_offset_after(pieces: Sequence[Transferable]) -> int | None:
    """The offset after the last whole batch in ``pieces`` (batches laid end to end, cut
    anywhere, as :meth:`Log.read` returns them); None when they hold no whole batch."""
    laid = PiecesEndToEnd(pieces)
    total = laid.size
    head_size = _LAST_OFFSET_DELTA_POS + _LAST_OFFSET_DELTA.size
    position = 0
    found = None
    while position + head_size <= total:
        head = laid.read(position, head_size)
        if len(head) < head_size:
            break  # a file region cut under the read
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
    leader_epochs: LeaderEpochCache
    """Which leader epoch began at which offset (appends assign it from the batches)."""
    lock: threading.RLock
    """Serializes appends (and the producer state they update) with whatever else changes
    the log: rolls, retention, the cleaner's swaps, truncation. The Partition appends
    under it."""

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
    def append(self, buffer: bytes | memoryview, batches: list[BatchHeader]) -> None:
        """Store ``batches`` of ``buffer``; their headers carry the assigned offsets and
        leader epoch, which the leader epoch cache takes when newer."""

    def append_as_follower(self, buffer: bytes, batches: list[BatchHeader]) -> None:
        """Store batches as a leader's fetch response carries them: their offsets and
        leader epochs as given (Kafka's appendAsFollower). Leading batches wholly below the
        log end offset (a range fetched again) are skipped; every batch kept must begin at
        or past the log end and past the batch before it (a gap, as compaction leaves, is
        kept), else :class:`UnexpectedAppendOffsetError` and nothing is appended. The
        producer state is updated as a replay does (markers complete transactions, aborted
        ones indexed) and the leader epoch cache takes each batch's epoch.

        The caller holds :attr:`lock` and has checked the batches' CRCs."""
        with self.lock:
            end = self.log_end_offset
            skip = 0
            while skip < len(batches) and batches[skip].next_offset <= end:
                skip += 1
            kept = batches[skip:]
            if not kept:
                return
            expected = end
            for batch in kept:
                if batch.base_offset < expected:
                    raise UnexpectedAppendOffsetError(
                        f"follower append: batch at offset {batch.base_offset} does not "
                        f"follow offset {expected - 1} (log end offset {end})",
                        kept[0].base_offset,
                        kept[-1].last_offset,
                    )
                expected = batch.next_offset
            view = memoryview(buffer)
            markers = [
                control_marker(view[b.position : b.position + b.size], b)
                if b.is_control and b.producer_id >= 0
                else None
                for b in kept
            ]
            self.append(buffer, kept)
            for batch, marker in zip(kept, markers, strict=True):
                self.update_producer_state(batch, marker, now_ms=batch.max_timestamp)

    @abstractmethod
    def truncate_to(self, offset: int) -> bool:
        """Remove every batch at and after ``offset`` (Kafka's truncateTo; a batch holding
        ``offset`` goes whole), then cut the leader epoch cache there, rebuild the producer
        state to the new end and keep the recovery point at most the end. With ``offset``
        at or past the log end, only the epoch cache is cut (at the log end) and False is
        returned. The log start offset becomes at most the new end; an ``offset`` before
        the first stored batch empties the log as :meth:`truncate_fully_and_start_at`."""

    @abstractmethod
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every batch, the producer state and the leader epochs, and start the log
        empty at ``offset`` (log start = log end = ``offset``): a follower whose log ended
        below its leader's log start (Kafka's truncateFullyAndStartAt)."""

    # leader epochs -----------------------------------------------------------------------
    @property
    def latest_epoch(self) -> int:
        """The latest leader epoch the log holds an entry for, -1 when none."""
        return self.leader_epochs.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(leader epoch, end offset) for OffsetForLeaderEpoch (Kafka's endOffsetForEpoch):
        the largest epoch at most ``epoch`` and where the next one begins, the log end for
        the latest; (-1, -1) when unknown."""
        return self.leader_epochs.end_offset_for(epoch, self.log_end_offset)

    def maybe_assign_epoch_start_offset(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` begins at ``start_offset`` (a new leader: its log end)."""
        with self.lock:
            self.leader_epochs.assign(epoch, start_offset)

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
    ) -> list[Transferable]:
        """Whole batches from the one holding ``offset``, up to ``max_bytes``, as pieces
        to write one after the other: the stored bytes, or a region of a segment file.

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


class _Columns:
    """A memory log's batches, one column per field. Appends extend the columns (the
    ``lasts`` column last: readers take the count from it); a truncation builds new
    columns and replaces them whole, so a reader holding one set sees it unchanged."""

    __slots__ = ("buffers", "lasts", "max_ts", "positions", "prefixes", "sizes")

    def __init__(self) -> None:
        self.buffers: list[bytes | memoryview] = []
        self.prefixes: list[bytes] = []
        self.positions = array("q")
        self.sizes = array("q")
        self.lasts = array("q")
        self.max_ts = array("q")

    def head(self, count: int) -> _Columns:
        """New columns holding the first ``count`` batches."""
        cut = _Columns()
        cut.buffers = self.buffers[:count]
        cut.prefixes = self.prefixes[:count]
        cut.positions = self.positions[:count]
        cut.sizes = self.sizes[:count]
        cut.lasts = self.lasts[:count]
        cut.max_ts = self.max_ts[:count]
        return cut

    def base_offset(self, index: int) -> int:
        offset: int = _PEEK.unpack_from(self.prefixes[index])[0]
        return offset

    def pieces(self, index: int) -> tuple[bytes, memoryview]:
        start = self.positions[index] + PREFIX_SIZE
        end = self.positions[index] + self.sizes[index]
        return self.prefixes[index], memoryview(self.buffers[index])[start:end]


class MemoryLog(Log):
    """A log held in memory: appended buffers, and per batch its place in them.

    Buffers are kept as the producer's request delivered them: a view of the request's
    frame, copied only when less than half of it (a view keeps the whole frame alive).
    Each batch is served as its ``served_prefix`` (assigned offset and leader epoch)
    followed by its stored bytes from byte 16 on, so a read copies no record data.
    Positions and offsets live in ``array`` columns, so a long log adds almost nothing
    for the garbage collector to walk. The leader epoch cache is kept without a checkpoint file.
    """

    def __init__(self, start_offset: int = 0) -> None:
        self.producer_state = ProducerStateManager(start_offset)
        self.txn_index = TransactionIndex(None)
        self.leader_epochs = LeaderEpochCache(None)
        self.lock = threading.RLock()
        self._start = start_offset
        self._end = start_offset
        self._cols = _Columns()
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

    def append(self, buffer: bytes | memoryview, batches: list[BatchHeader]) -> None:
        if isinstance(buffer, memoryview) and 2 * buffer.nbytes < memoryview(buffer.obj).nbytes:
            buffer = buffer.tobytes()  # a view keeps its whole frame alive: not for a small part
        with self.lock:
            cols = self._cols
            for b in batches:
                self.leader_epochs.assign(b.partition_leader_epoch, b.base_offset)
                cols.buffers.append(buffer)
                cols.prefixes.append(served_prefix(b))
                cols.positions.append(b.position)
                cols.sizes.append(b.size)
                cols.max_ts.append(b.max_timestamp)
                # Last: readers take the count from this column.
                cols.lasts.append(b.base_offset + b.last_offset_delta)
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
            self.leader_epochs.truncate_from_start(self._start)
            return True

    def truncate_to(self, offset: int) -> bool:
        if offset < 0:
            raise ValueError(f"cannot truncate a log to a negative offset ({offset})")
        with self.lock:
            if offset >= self._end:
                self.leader_epochs.truncate_from_end(self._end)
                return False
            cols = self._cols
            count = len(cols.lasts)
            if count == 0 or cols.base_offset(0) > offset:
                self.truncate_fully_and_start_at(offset)
                return True
            keep = bisect.bisect_left(cols.lasts, offset, 0, count)  # first batch ending >= it
            end = offset if keep == count else min(offset, cols.base_offset(keep))
            kept = cols.head(keep)
            self._cols = kept
            self._size = sum(kept.sizes)
            self._end = end
            self._start = min(self._start, end)
            self.txn_index.truncate_to(end)
            self.leader_epochs.truncate_from_end(end)
            state = ProducerStateManager(end)
            if self.producer_state.producer_count():
                state = ProducerStateManager()
                for index in range(keep):
                    self._replay_batch(state, kept, index)
                state.map_end_offset = end
            self.producer_state = state
            return True

    def _replay_batch(self, state: ProducerStateManager, cols: _Columns, index: int) -> None:
        data = b"".join(cols.pieces(index))
        (header,) = scan_batches(data, verify_crc=False)
        marker = None
        if header.is_control and header.producer_id >= 0:
            marker = control_marker(data, header)
        replay_into(state, header, marker)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        with self.lock:
            self._cols = _Columns()
            self._size = 0
            self._start = self._end = offset
            self.txn_index.truncate_to(-1)
            self.leader_epochs.clear()
            self.producer_state = ProducerStateManager(offset)

    def _txn_index_for(self, offset: int) -> TransactionIndex:
        return self.txn_index

    def collect_aborted_transactions(
        self, start_offset: int, upper_bound_offset: int
    ) -> list[AbortedTxn]:
        return self.txn_index.collect(start_offset, upper_bound_offset)[0]

    def read(
        self, offset: int, max_bytes: int, min_one_batch: bool, max_offset: int | None = None
    ) -> list[Transferable]:
        cols = self._cols
        lasts, sizes = cols.lasts, cols.sizes
        count = len(lasts)
        index = bisect.bisect_left(lasts, offset, 0, count)
        out: list[Transferable] = []
        total = 0
        while index < count:
            if max_offset is not None and lasts[index] >= max_offset:
                break
            size = sizes[index]
            if total + size > max_bytes and not (min_one_batch and not out):
                break
            out.extend(cols.pieces(index))
            total += size
            index += 1
        return out

    def _records(self, cols: _Columns, index: int) -> list[Record]:
        return list(iter_records(b"".join(cols.pieces(index))))

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        cols = self._cols
        for i in range(len(cols.lasts)):
            if cols.max_ts[i] >= timestamp_ms:
                found = first_at_or_after(self._records(cols, i), timestamp_ms, self._start)
                if found is not None:
                    return found
        return None

    def max_timestamp(self) -> tuple[int, int] | None:
        cols = self._cols
        count = len(cols.lasts)
        if count == 0:
            return None
        return latest_of_max(self._records(cols, max(range(count), key=cols.max_ts.__getitem__)))
