"""Idempotent producer state per partition: epochs, sequences, and recent batches.

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
        coordinator_epoch         int32   -1 (transactions, issue 15)
        current_txn_first_offset  int64   -1 (transactions, issue 15)
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

from broker.utils.files import fsync_dir, write_atomically
from protocol.errors import ErrorCode, KafkaError
from protocol.records import BatchHeader

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
    coordinator_epoch: int = -1  # transactions (issue 15): stored and loaded, not yet set
    current_txn_first_offset: int = -1  # transactions (issue 15): stored and loaded, not yet set

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


def _next_seq(seq: int) -> int:
    return 0 if seq == INT32_MAX else seq + 1


def _last_seq(batch: BatchHeader) -> int:
    return (batch.base_sequence + batch.last_offset_delta) % (INT32_MAX + 1)


class ProducerStateManager:
    """Checks and records the sequence numbers of idempotent producers.

    Not thread-safe: the partition calls it (and :meth:`snapshot`) under its append lock.
    """

    def __init__(self) -> None:
        self._producers: dict[int, ProducerStateEntry] = {}

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
            return None
        last = _last_seq(batch)
        for cached in entry.batches:
            if cached.first_seq == batch.base_sequence and cached.last_seq == last:
                return cached
        if entry.batches and batch.base_sequence != _next_seq(entry.last_seq):
            raise KafkaError(
                ErrorCode.out_of_order_sequence_number,
                f"producer {batch.producer_id} sent sequence {batch.base_sequence}, "
                f"expected {_next_seq(entry.last_seq)}",
            )
        return None

    def update(self, batch: BatchHeader, now_ms: int | None = None) -> None:
        """Record an appended batch (offsets already assigned).

        Also rebuilds the state from stored batches: a batch whose first offset is at or
        below the producer's last recorded offset is already in the state and is ignored,
        so replaying batches a snapshot covers changes nothing. ``now_ms`` (default: the
        wall clock) becomes the producer's last-update time.
        """
        if batch.producer_id < 0:
            return
        entry = self._producers.get(batch.producer_id)
        if (
            entry is not None
            and entry.batches
            and batch.base_offset <= entry.batches[-1].last_offset
        ):
            return
        if entry is None:
            entry = ProducerStateEntry(batch.producer_epoch)
            self._producers[batch.producer_id] = entry
        elif batch.producer_epoch != entry.epoch:
            entry.epoch = batch.producer_epoch
            entry.batches.clear()
        entry.batches.append(
            BatchMetadata(
                batch.base_sequence,
                _last_seq(batch),
                batch.base_offset,
                batch.base_offset + batch.last_offset_delta,
            )
        )
        entry.last_timestamp_ms = int(time.time() * 1000) if now_ms is None else now_ms

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
    def from_snapshot(cls, data: bytes) -> ProducerStateManager:
        """The state :meth:`snapshot` encoded in ``data``.

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
        state = cls()
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
            return offset, ProducerStateManager.from_snapshot(path.read_bytes())
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
