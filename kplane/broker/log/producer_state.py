"""Producer state per partition: epochs, sequences, recent batches, and transactions.

Idempotence: each producer id's epoch and its last five batches (sequence ranges and their
offsets) find retries and refuse gaps. Transactions (KIP-98): a transactional batch from a
producer with none ongoing begins one at its first offset; the producer's transaction marker
(a control batch, ABORT or COMMIT) completes it. The smallest first offset of the ongoing
transactions is the partition's first unstable offset, which bounds the last stable offset
(LSO) a READ_COMMITTED consumer reads to. Markers carry no sequence: they move the epoch
and the coordinator epoch, never the sequence a producer continues from.

The state survives restarts as Kafka's does: :meth:`ProducerStateManager.snapshot` encodes
it and :func:`write_snapshot` stores it as ``<offset>.snapshot`` (20-digit zero-padded) in
the partition's log directory, where ``offset`` is the log end offset the state reflects
(every batch below it is recorded, none at or above it). On start-up the log loads the
newest snapshot at or below its recovered end (:func:`load_latest_snapshot`) and replays
the stored batches from the snapshot's offset on through :meth:`ProducerStateManager.update`.

Snapshot format, version 1 (big-endian)::

    version             int16   1
    crc                 uint32  CRC-32C of everything after this field
    producer_count      int32
    producer_count x:
        producer_id               int64
        producer_epoch            int16
        last_timestamp_ms         int64   wall clock of the producer's last append
        coordinator_epoch         int32   of the last marker, -1 before any
        current_txn_first_offset  int64   first offset of the ongoing transaction, or -1
        batch_count               int32   at most CACHED_BATCHES, oldest first
        batch_count x:
            first_seq     int32
            last_seq      int32
            first_offset  int64
            last_offset   int64
"""

from __future__ import annotations

import logging
import re
import struct
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import crc32c

from kplane.broker.utils.files import fsync_dir, write_atomically
from kplane.protocol.errors import ErrorCode, KafkaError
from kplane.protocol.records import BatchHeader, EndTxnMarker

log = logging.getLogger(__name__)

INT32_MAX = 2**31 - 1
CACHED_BATCHES = 5  # Kafka keeps the last five batches per producer for duplicate detection

SNAPSHOT_VERSION = 1
SNAPSHOT_SUFFIX = ".snapshot"
_SNAPSHOT_NAME = re.compile(r"[0-9]{20}")
_MAX_SNAPSHOT_OFFSET = 10**20 - 1

_HEADER = struct.Struct(">hI")  # version, crc
_COUNT = struct.Struct(">i")
_PRODUCER = struct.Struct(">qhqiqi")  # id, epoch, timestamp, coord epoch, txn first, batches
_BATCH = struct.Struct(">iiqq")  # first_seq, last_seq, first_offset, last_offset


class CorruptSnapshotError(ValueError):
    """A producer-state snapshot that cannot be trusted (truncated, bad CRC, unknown version)."""


@dataclass(slots=True)
class BatchMetadata:
    """Sequence range of an appended batch and the offsets it got."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass(slots=True)
class ProducerStateEntry:
    """What a partition remembers of one producer id."""

    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=CACHED_BATCHES))
    last_timestamp_ms: int = -1  # wall clock of the last append; for producer.id.expiration.ms
    coordinator_epoch: int = -1  # of the last transaction marker
    current_txn_first_offset: int = -1  # the ongoing transaction's first offset, or -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker completed (Kafka's CompletedTxn), with the LSO right after it
    (the first offset of the next ongoing transaction of another producer, else the offset
    after the marker)."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool
    last_stable_offset: int


@dataclass(frozen=True, slots=True)
class ProducerInfo:
    """One producer as DescribeProducers answers it (Kafka's ProducerState)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


def _next_seq(seq: int) -> int:
    return 0 if seq == INT32_MAX else seq + 1


def _last_seq(batch: BatchHeader) -> int:
    return (batch.base_sequence + batch.last_offset_delta) % (INT32_MAX + 1)


class ProducerStateManager:
    """Checks and records producers' sequence numbers and transactions.

    Not thread-safe: the partition calls it (and :meth:`snapshot`) under its append lock;
    only :attr:`first_unstable_offset` may be read without it.
    """

    def __init__(self, map_end_offset: int = 0) -> None:
        self._producers: dict[int, ProducerStateEntry] = {}
        self._ongoing: dict[int, int] = {}
        """first offset -> producer id of each ongoing transaction, in offset order (new
        transactions begin past every offset recorded, so insertion order is offset order)."""
        self.first_unstable_offset: int | None = None
        """The first offset of the oldest ongoing transaction (Kafka's firstUnstableOffset)."""
        self.map_end_offset = map_end_offset
        """The offset after the last batch recorded (Kafka's mapEndOffset)."""

    def producer_count(self) -> int:
        """How many producer ids have state here."""
        return len(self._producers)

    def entry(self, producer_id: int) -> ProducerStateEntry | None:
        """The state of ``producer_id``, if any (do not modify it)."""
        return self._producers.get(producer_id)

    def find_duplicate(self, batch: BatchHeader) -> BatchMetadata | None:
        """The earlier append of ``batch`` if it is a retry, else None.

        Raises KafkaError for a fenced epoch or a sequence gap.
        """
        if batch.producer_id < 0:
            return None
        entry = self._producers.get(batch.producer_id)
        if entry is None:
            return None
        if batch.producer_epoch < entry.epoch:
            raise KafkaError(
                ErrorCode.invalid_producer_epoch,
                f"producer {batch.producer_id} epoch {batch.producer_epoch} is older than "
                f"the current epoch {entry.epoch}",
            )
        if batch.producer_epoch > entry.epoch:
            if batch.base_sequence != 0:
                raise KafkaError(
                    ErrorCode.out_of_order_sequence_number,
                    f"new epoch {batch.producer_epoch} must start at sequence 0, "
                    f"got {batch.base_sequence}",
                )
        else:
            last = _last_seq(batch)
            for cached in entry.batches:
                if cached.first_seq == batch.base_sequence and cached.last_seq == last:
                    return cached
            if batch.base_sequence != _next_seq(entry.last_seq):
                raise KafkaError(
                    ErrorCode.out_of_order_sequence_number,
                    f"producer {batch.producer_id} sent sequence {batch.base_sequence}, "
                    f"expected {_next_seq(entry.last_seq)}",
                )
        if not batch.is_transactional and entry.current_txn_first_offset >= 0:
            raise KafkaError(
                ErrorCode.invalid_txn_state,
                f"expected a transactional write from producer {batch.producer_id}: its "
                f"transaction from offset {entry.current_txn_first_offset} is ongoing",
            )
        return None

    def check_end_txn_marker(
        self, producer_id: int, producer_epoch: int, coordinator_epoch: int
    ) -> None:
        """Refuse a marker from a fenced producer epoch (INVALID_PRODUCER_EPOCH) or an older
        coordinator (TRANSACTION_COORDINATOR_FENCED), as Kafka's appendEndTxnMarker does."""
        entry = self._producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.epoch:
            raise KafkaError(
                ErrorCode.invalid_producer_epoch,
                f"marker for producer {producer_id} has epoch {producer_epoch}, older than "
                f"the current epoch {entry.epoch}",
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise KafkaError(
                ErrorCode.transaction_coordinator_fenced,
                f"marker for producer {producer_id} has coordinator epoch {coordinator_epoch}, "
                f"older than {entry.coordinator_epoch}",
            )

    def update(
        self, batch: BatchHeader, now_ms: int | None = None, marker: EndTxnMarker | None = None
    ) -> CompletedTxn | None:
        """Record an appended batch (offsets already assigned); for a control batch,
        ``marker`` is what it says (None: none to act on). Returns the transaction a
        marker completes: the caller indexes it if aborted, then calls
        :meth:`complete_txn`.

        Also rebuilds the state from stored batches: a batch below :attr:`map_end_offset`
        is already in the state and is ignored, so replaying batches a snapshot covers
        changes nothing. ``now_ms`` (default: the wall clock) becomes the producer's
        last-update time.
        """
        if batch.base_offset < self.map_end_offset:
            return None
        self.map_end_offset = batch.next_offset
        if batch.producer_id < 0:
            return None
        now = int(time.time() * 1000) if now_ms is None else now_ms
        if batch.is_control:
            return None if marker is None else self._end_txn(batch, marker, now)
        entry = self._entry(batch.producer_id, batch.producer_epoch)
        entry.batches.append(
            BatchMetadata(
                batch.base_sequence,
                _last_seq(batch),
                batch.base_offset,
                batch.base_offset + batch.last_offset_delta,
            )
        )
        entry.last_timestamp_ms = now
        if batch.is_transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = batch.base_offset
            self._ongoing[batch.base_offset] = batch.producer_id
            if self.first_unstable_offset is None:
                self.first_unstable_offset = batch.base_offset
        return None

    def _entry(self, producer_id: int, epoch: int) -> ProducerStateEntry:
        """The producer's entry at ``epoch``: created, or its batches forgotten when the
        epoch moved."""
        entry = self._producers.get(producer_id)
        if entry is None:
            entry = ProducerStateEntry(epoch)
            self._producers[producer_id] = entry
        elif epoch != entry.epoch:
            entry.epoch = epoch
            entry.batches.clear()
        return entry

    def _end_txn(self, batch: BatchHeader, marker: EndTxnMarker, now_ms: int) -> CompletedTxn:
        entry = self._entry(batch.producer_id, batch.producer_epoch)
        first = entry.current_txn_first_offset
        entry.current_txn_first_offset = -1
        entry.coordinator_epoch = marker.coordinator_epoch
        entry.last_timestamp_ms = now_ms
        lso = next(
            (f for f, pid in self._ongoing.items() if pid != batch.producer_id),
            batch.base_offset + 1,
        )
        return CompletedTxn(
            batch.producer_id,
            first if first >= 0 else batch.base_offset,
            batch.base_offset,
            not marker.commit,
            lso,
        )

    def complete_txn(self, txn: CompletedTxn) -> None:
        """The transaction is indexed: it no longer holds the first unstable offset back."""
        if self._ongoing.get(txn.first_offset) == txn.producer_id:
            del self._ongoing[txn.first_offset]
            self.first_unstable_offset = next(iter(self._ongoing), None)

    def active_producers(self) -> list[ProducerInfo]:
        """Every producer with state here, as DescribeProducers lists them."""
        return [
            ProducerInfo(
                producer_id,
                entry.epoch,
                entry.last_seq,
                entry.last_timestamp_ms,
                entry.coordinator_epoch,
                entry.current_txn_first_offset,
            )
            for producer_id, entry in self._producers.items()
        ]

    # snapshots -----------------------------------------------------------------------------

    def snapshot(self) -> bytes:
        """The whole state in the versioned snapshot format (see the module docstring)."""
        body = bytearray(_COUNT.pack(len(self._producers)))
        for producer_id, entry in self._producers.items():
            body += _PRODUCER.pack(
                producer_id,
                entry.epoch,
                entry.last_timestamp_ms,
                entry.coordinator_epoch,
                entry.current_txn_first_offset,
                len(entry.batches),
            )
            for b in entry.batches:
                body += _BATCH.pack(b.first_seq, b.last_seq, b.first_offset, b.last_offset)
        return _HEADER.pack(SNAPSHOT_VERSION, crc32c.crc32c(body)) + bytes(body)

    @classmethod
    def from_snapshot(cls, data: bytes, offset: int = 0) -> ProducerStateManager:
        """The state :meth:`snapshot` encoded in ``data``, taken at log end ``offset``; the
        ongoing transactions are those of the entries with a first offset.

        Raises :class:`CorruptSnapshotError` for a truncated or corrupt snapshot, an unknown
        version, or counts the bytes present cannot hold.
        """
        view = memoryview(data)
        if len(view) < _HEADER.size:
            raise CorruptSnapshotError(
                f"snapshot is truncated: {len(view)} bytes, the header alone has {_HEADER.size}"
            )
        version, crc = _HEADER.unpack_from(view, 0)
        if version != SNAPSHOT_VERSION:
            raise CorruptSnapshotError(f"unknown snapshot version {version}")
        body = view[_HEADER.size :]
        if crc32c.crc32c(body) != crc:
            raise CorruptSnapshotError("snapshot CRC-32C does not match its contents")
        pos, end = 0, len(body)

        def take(fmt: struct.Struct, what: str) -> tuple[int, ...]:
            nonlocal pos
            if end - pos < fmt.size:
                raise CorruptSnapshotError(f"snapshot is truncated in {what} at byte {pos}")
            values = fmt.unpack_from(body, pos)
            pos += fmt.size
            return values

        (count,) = take(_COUNT, "the producer count")
        if count < 0 or count > (end - pos) // _PRODUCER.size:
            raise CorruptSnapshotError(
                f"snapshot claims {count} producers, more than its {end - pos} bytes can hold"
            )
        state = cls(offset)
        for _ in range(count):
            producer_id, epoch, timestamp, coord_epoch, txn_first, batches = take(
                _PRODUCER, "a producer entry"
            )
            if producer_id < 0 or producer_id in state._producers:
                raise CorruptSnapshotError(
                    f"snapshot has a bad or repeated producer id {producer_id}"
                )
            if batches < 0 or batches > (end - pos) // _BATCH.size:
                raise CorruptSnapshotError(
                    f"snapshot claims {batches} batches for producer {producer_id}, more than "
                    f"its remaining {end - pos} bytes can hold"
                )
            entry = ProducerStateEntry(epoch, last_timestamp_ms=timestamp)
            entry.coordinator_epoch = coord_epoch
            entry.current_txn_first_offset = txn_first
            for _ in range(batches):
                entry.batches.append(BatchMetadata(*take(_BATCH, "a batch entry")))
            state._producers[producer_id] = entry
        if pos != end:
            raise CorruptSnapshotError(f"snapshot has {end - pos} bytes after its last producer")
        ongoing = sorted(
            (e.current_txn_first_offset, pid)
            for pid, e in state._producers.items()
            if e.current_txn_first_offset >= 0
        )
        state._ongoing = dict(ongoing)
        state.first_unstable_offset = ongoing[0][0] if ongoing else None
        return state


# snapshot files ------------------------------------------------------------------------------


def snapshot_path(directory: Path, offset: int) -> Path:
    """``directory/<offset, 20 digits>.snapshot``."""
    if not 0 <= offset <= _MAX_SNAPSHOT_OFFSET:
        raise ValueError(f"snapshot offset out of range: {offset}")
    return Path(directory) / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def write_snapshot(directory: Path, offset: int, state: ProducerStateManager) -> Path:
    """Store ``state`` as of log end offset ``offset``, atomically (temp file, fsync,
    rename, directory fsync); replaces an existing snapshot at that offset."""
    path = snapshot_path(directory, offset)
    write_atomically(path, state.snapshot())
    return path


def list_snapshots(directory: Path) -> list[tuple[int, Path]]:
    """``(offset, path)`` of every ``<20 digits>.snapshot`` file in ``directory``, by offset.

    A missing directory has none.
    """
    found: list[tuple[int, Path]] = []
    try:
        paths = list(Path(directory).iterdir())
    except FileNotFoundError:
        return found
    for path in paths:
        if (
            path.suffix == SNAPSHOT_SUFFIX
            and _SNAPSHOT_NAME.fullmatch(path.stem)
            and path.is_file()
        ):
            found.append((int(path.stem), path))
    found.sort()
    return found


def latest_snapshot(directory: Path, at_most: int | None = None) -> tuple[int, Path] | None:
    """The newest snapshot, or the newest at or below offset ``at_most``; None if there is none."""
    candidates = [s for s in list_snapshots(directory) if at_most is None or s[0] <= at_most]
    return candidates[-1] if candidates else None


def load_latest_snapshot(
    directory: Path, at_most: int | None = None
) -> tuple[int, ProducerStateManager] | None:
    """The state of the newest readable snapshot at or below ``at_most`` (any, if None) and
    its offset. As Kafka does, a corrupt snapshot is logged and deleted and the next older one
    tried; None when none is left."""
    while (found := latest_snapshot(directory, at_most)) is not None:
        offset, path = found
        try:
            return offset, ProducerStateManager.from_snapshot(path.read_bytes(), offset)
        except CorruptSnapshotError as exc:
            log.warning("deleting corrupt producer-state snapshot %s: %s", path, exc)
            path.unlink(missing_ok=True)
    return None


def delete_snapshots(
    directory: Path, below: int | None = None, above: int | None = None, keep_below: int = 2
) -> list[Path]:
    """Delete snapshots at offsets above ``above`` (after the log is truncated to that end)
    and below ``below`` (after segments below it are deleted), except the newest
    ``keep_below`` of those below ``below``; returns the deleted paths."""
    snapshots = list_snapshots(directory)
    doomed: list[Path] = []
    if below is not None:
        older = [path for offset, path in snapshots if offset < below]
        doomed += older[: max(len(older) - keep_below, 0)]
    if above is not None:
        doomed += [path for offset, path in snapshots if offset > above]
    doomed = list(dict.fromkeys(doomed))
    for path in doomed:
        path.unlink(missing_ok=True)
    if doomed:
        fsync_dir(Path(directory))
    return doomed
