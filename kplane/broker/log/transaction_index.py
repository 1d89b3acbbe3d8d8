"""Aborted transactions: Kafka's ``<base offset>.txnindex`` and the cleaner's view of them.

A READ_COMMITTED fetch answers, beside the records, the aborted transactions they may hold;
each segment keeps those whose abort marker it holds, in the order the markers were
written (Kafka's TransactionIndex). Entry format, 34 bytes, big-endian::

    version            int16   0
    producer_id        int64
    first_offset       int64   the transaction's first offset
    last_offset        int64   the offset of its abort marker
    last_stable_offset int64   the partition's LSO right after the marker was written

The file is created with its first entry. Loading checks every entry against the bytes
present: a torn tail, an unknown version, an impossible entry, or one whose marker does not
follow the one before, ends the index there (the rest is cut from the file, with one
warning).

:class:`CleanedTransactionMetadata` is how the log cleaner follows transactions through the
batches it reads (Kafka's CleanedTransactionMetadata): which data batches belong to aborted
transactions (dropped) and which markers may go.
"""

from __future__ import annotations

import heapq
import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import structlog

from kplane.broker.utils.files import write_atomically
from kplane.protocol.records import BatchHeader, EndTxnMarker

log = structlog.get_logger(__name__)

TXN_INDEX_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction (Kafka's AbortedTxn)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(
            TXN_INDEX_VERSION,
            self.producer_id,
            self.first_offset,
            self.last_offset,
            self.last_stable_offset,
        )


class TransactionIndex:
    """The aborted transactions of one segment (or of a whole in-memory log, ``path`` None),
    in marker order. Appends and truncations run under the log's lock; readers take none
    (the list is appended to, or replaced whole)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._fd = -1
        self._entries: list[AbortedTxn] = []
        if path is not None:
            self._load(path)

    def _load(self, path: Path) -> None:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return
        entries: list[AbortedTxn] = []
        position = 0
        while len(data) - position >= ENTRY_SIZE:
            version, producer_id, first, last, lso = _ENTRY.unpack_from(data, position)
            previous = entries[-1].last_offset if entries else -1
            if (
                version != TXN_INDEX_VERSION
                or producer_id < 0
                or not 0 <= first <= last
                or not 0 <= lso <= last + 1
                or last <= previous
            ):
                break
            entries.append(AbortedTxn(producer_id, first, last, lso))
            position += ENTRY_SIZE
        self._entries = entries
        if position != len(data):
            log.warning(
                "transaction index cut after its last valid entry",
                path=str(path),
                bytes_dropped=len(data) - position,
            )
            write_atomically(path, data[:position])

    @property
    def entries(self) -> list[AbortedTxn]:
        """The aborted transactions, in marker order (a snapshot: do not modify)."""
        return self._entries

    @property
    def last_offset(self) -> int | None:
        """The marker offset of the last entry."""
        entries = self._entries
        return entries[-1].last_offset if entries else None

    def append(self, txn: AbortedTxn) -> None:
        """Add ``txn``, whose marker must follow every marker already indexed."""
        last = self.last_offset
        if last is not None and txn.last_offset <= last:
            raise ValueError(
                f"aborted transaction at {txn.last_offset} does not follow the last one "
                f"indexed, at {last}"
            )
        if self.path is not None:
            if self._fd < 0:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.write(self._fd, txn.encode())
        self._entries.append(txn)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at ``offset`` or after (Kafka's truncateTo)."""
        kept = [t for t in self._entries if t.last_offset < offset]
        if len(kept) == len(self._entries):
            return
        self._entries = kept
        if self.path is not None:
            self.close()
            write_atomically(self.path, b"".join(t.encode() for t in kept))

    def collect(self, start_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """The transactions with a marker at or after ``start_offset`` that began below
        ``upper_bound_offset``, and whether the search is complete: an entry's LSO reached the
        upper bound, so no later segment can hold more (Kafka's collectAbortedTxns)."""
        found = []
        for txn in self._entries:
            if txn.last_offset >= start_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def flush(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


@dataclass(slots=True)
class _OngoingAborted:
    txn: AbortedTxn
    batch_seen: bool = False


class CleanedTransactionMetadata:
    """The transactions around the batches a cleaning reads, in offset order: a data batch
    of an aborted transaction may go; an abort marker stays (re-indexed in ``cleaned_index``)
    while this pass still met a batch of its transaction; a commit marker may go when this
    pass met none of its transaction's batches. A marker that may go still waits for its
    delete horizon (the caller's rule)."""

    def __init__(self, cleaned_index: TransactionIndex | None = None) -> None:
        self.cleaned_index = cleaned_index
        self._pending: list[tuple[int, int, AbortedTxn]] = []  # a heap by first offset
        self._ongoing_aborted: dict[int, _OngoingAborted] = {}
        self._ongoing_committed: set[int] = set()

    def add_aborted_transactions(self, txns: Iterable[AbortedTxn]) -> None:
        for txn in txns:
            heapq.heappush(self._pending, (txn.first_offset, txn.last_offset, txn))

    def _consume_up_to(self, offset: int) -> None:
        while self._pending and self._pending[0][0] <= offset:
            txn = heapq.heappop(self._pending)[2]
            self._ongoing_aborted.setdefault(txn.producer_id, _OngoingAborted(txn))

    def on_batch_read(self, batch: BatchHeader) -> bool:
        """Follow a data batch; True when it belongs to an aborted transaction."""
        self._consume_up_to(batch.last_offset)
        if not batch.is_transactional:
            return False
        aborted = self._ongoing_aborted.get(batch.producer_id)
        if aborted is not None:
            aborted.batch_seen = True
            return True
        self._ongoing_committed.add(batch.producer_id)
        return False

    def on_control_batch_read(self, batch: BatchHeader, marker: EndTxnMarker | None) -> bool:
        """Follow a control batch (``marker`` None: emptied, or another control type);
        True when it may go once its delete horizon has passed."""
        self._consume_up_to(batch.last_offset)
        if batch.record_count == 0:
            return True  # a marker already emptied by a cleaning
        if marker is None:
            return False
        producer_id = batch.producer_id
        if marker.commit:
            if producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(producer_id)
                return False
            return True
        aborted = self._ongoing_aborted.pop(producer_id, None)
        if aborted is not None and aborted.batch_seen:
            if self.cleaned_index is not None:
                self.cleaned_index.append(aborted.txn)
            return False
        return True
