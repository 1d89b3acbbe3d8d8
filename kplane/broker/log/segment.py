"""LogSegment: one ``<base offset>.log`` file of record batches, its two indexes, and the
aborted transactions whose markers it holds (``.txnindex``, created with its first entry).

Batches are stored exactly as they are served (offsets and leader epoch written in), so a
read is one ``pread`` of a byte range. Positions of batches are found through the sparse
offset index and a short scan of batch headers from there.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from kplane.broker.log.offset_index import OffsetIndex, TimeIndex
from kplane.broker.log.transaction_index import TransactionIndex
from kplane.broker.utils.file_region import FileRegion, OpenFile
from kplane.protocol.fetch_codec import Piece
from kplane.protocol.records import (
    LOG_OVERHEAD,
    BatchHeader,
    read_partial_batches,
    scan_valid_prefix,
)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
"""A segment the log cleaner is writing (deleted on load: the cleaning was cut short)."""
SWAP_SUFFIX = ".swap"
"""A cleaned segment about to replace its originals (completed on load)."""
_PEEK = struct.Struct(">qi")  # baseOffset, batchLength
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_OFFSET_DELTA_POS = 23
_PEEK_SIZE = _LAST_OFFSET_DELTA_POS + 4
_MAX_TIMESTAMP = struct.Struct(">q")
_MAX_TIMESTAMP_POS = 35
RECOVERY_CHUNK = 8 * 1024 * 1024
IOV_MAX = 1024


def segment_name(base_offset: int) -> str:
    """Kafka's file stem: the base offset in 20 digits."""
    return f"{base_offset:020d}"


@dataclass(frozen=True, slots=True)
class BatchPosition:
    """Where a stored batch lies, and the offsets it holds."""

    position: int
    size: int
    base_offset: int
    last_offset: int


class LogSegment:
    """One segment: appends at its end, reads by position, its indexes kept beside it."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_bytes: int,
        created_ms: int,
        suffix: str = "",
    ) -> None:
        """``suffix`` follows each file's name (``.cleaned``, ``.swap``: Kafka's files of a
        cleaning under way); :meth:`change_file_suffixes` renames them later."""
        self.base_offset = base_offset
        stem = segment_name(base_offset)
        self.log_path = directory / f"{stem}{LOG_SUFFIX}{suffix}"
        self._file: OpenFile | None = OpenFile(
            os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        )
        self.size = os.fstat(self._fd).st_size
        self.offset_index = OffsetIndex(
            directory / f"{stem}{INDEX_SUFFIX}{suffix}", base_offset, max_index_bytes
        )
        self.time_index = TimeIndex(
            directory / f"{stem}{TIME_INDEX_SUFFIX}{suffix}", base_offset, max_index_bytes
        )
        for index in (self.offset_index, self.time_index):
            index.path.touch()  # Kafka creates both with the segment
        self.txn_index = TransactionIndex(directory / f"{stem}{TXN_INDEX_SUFFIX}{suffix}")
        self.index_interval_bytes = index_interval_bytes
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.created_ms = created_ms
        self.rolling_base_timestamp = -1
        self.roll_jitter_ms = 0
        self._since_index = 0

    # append ------------------------------------------------------------------------
    def append(self, headers: Sequence[BatchHeader], pieces: Sequence[Piece]) -> None:
        """Write ``pieces`` (the batches of ``headers`` as served, in order) at the end."""
        position = self.size
        _pwrite_all(self._fd, pieces, position)
        for header in headers:
            self._note(header, position)
            position += header.size
        self.size = position

    def _note(self, header: BatchHeader, position: int) -> None:
        """Account for a batch written at ``position``: offsets, timestamps, indexes."""
        if self.rolling_base_timestamp < 0:
            self.rolling_base_timestamp = header.max_timestamp
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = header.last_offset
        if self._since_index > self.index_interval_bytes:
            self.offset_index.append(header.last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._since_index = 0
        self._since_index += header.size
        self.next_offset = header.next_offset

    # read --------------------------------------------------------------------------
    def peek(self, position: int) -> BatchPosition | None:
        """The batch starting at ``position``, from its first 27 bytes."""
        head = os.pread(self._fd, _PEEK_SIZE, position)
        if len(head) < _PEEK_SIZE:
            return None
        base, length = _PEEK.unpack_from(head)
        (delta,) = _LAST_OFFSET_DELTA.unpack_from(head, _LAST_OFFSET_DELTA_POS)
        return BatchPosition(position, LOG_OVERHEAD + length, base, base + delta)

    def find(self, offset: int, limit: int | None = None) -> BatchPosition | None:
        """The batch holding ``offset`` (or the first after it), below byte ``limit``."""
        end = self.size if limit is None else limit
        position = self.offset_index.lookup(offset)
        while position < end:
            batch = self.peek(position)
            if batch is None:
                return None
            if batch.last_offset >= offset:
                return batch
            position += batch.size
        return None

    def _batch_size(self, position: int) -> int:
        batch = self.peek(position)
        return batch.size if batch is not None else 0

    def _larger_than(self, chunk: bytes, position: int, end: int) -> bool:
        """Whether the batch at ``position`` is whole in the file up to ``end`` but larger
        than ``chunk``, the bytes read from there (a length is never trusted further)."""
        return len(chunk) < self._batch_size(position) <= end - position

    def read(self, position: int, length: int) -> bytes:
        """``length`` bytes from ``position`` (fewer at the end of the file)."""
        return os.pread(self._fd, length, position)

    def region(self, position: int, length: int) -> FileRegion:
        """``length`` bytes from ``position``, to be sent or read later (a Fetch's slice);
        it keeps the file open after the segment is closed."""
        assert self._file is not None
        return FileRegion(self._file, position, length)

    def batches(self, position: int = 0, end: int | None = None) -> Iterator[BatchHeader]:
        """Headers of the whole batches from ``position`` on, read in chunks."""
        stop = self.size if end is None else end
        while position < stop:
            chunk = self.read(position, min(RECOVERY_CHUNK, stop - position))
            headers = read_partial_batches(chunk)
            if not headers:
                if not self._larger_than(chunk, position, stop):
                    return
                chunk = self.read(position, self._batch_size(position))
                headers = read_partial_batches(chunk)
                if not headers:
                    return
            for header in headers:
                header.position += position
                yield header
            position = headers[-1].position + headers[-1].size

    # load and recovery ---------------------------------------------------------------
    def load(self) -> bool:
        """Open a segment written before a clean stop: its indexes as stored and the state
        after its last indexed batch. False when the indexes fail their sanity checks."""
        if not self.offset_index.load(self.size):
            return False
        if not self.time_index.load(self.offset_index.last_offset + 1):
            return False
        self._restore_tail_state()
        return True

    def _restore_tail_state(self) -> None:
        """The state after the last batch (next offset, largest timestamp, bytes since the
        last index entry, the roll's base timestamp) from the indexes as they stand and a
        scan of the batches after the last indexed one."""
        self.next_offset = self.base_offset
        self.max_timestamp = self.offset_of_max_timestamp = self.rolling_base_timestamp = -1
        if self.time_index.last_timestamp >= 0:
            self.max_timestamp = self.time_index.last_timestamp
            self.offset_of_max_timestamp = self.time_index.last_offset
        first = self.peek(0)
        if first is not None:
            self.next_offset = first.last_offset + 1
        since = 0
        for header in self.batches(self.offset_index.lookup(self.offset_index.last_offset)):
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self.offset_of_max_timestamp = header.last_offset
            self.next_offset = header.next_offset
            since += header.size
        self._since_index = since
        head = self.read(0, _MAX_TIMESTAMP.size + _MAX_TIMESTAMP_POS)
        if len(head) == _MAX_TIMESTAMP.size + _MAX_TIMESTAMP_POS:
            (self.rolling_base_timestamp,) = _MAX_TIMESTAMP.unpack_from(head, _MAX_TIMESTAMP_POS)

    def truncate_to(self, offset: int, now_ms: int) -> int:
        """Cut the segment before the batch holding ``offset``, or the first batch after it
        (Kafka's LogSegment.truncateTo): the file, the index entries and the aborted
        transactions from there on go, the tail state is restored from what is left; an
        emptied segment counts as created at ``now_ms``. Returns the bytes cut."""
        batch = self.find(offset)
        if batch is None:
            self.txn_index.truncate_to(offset)
            return 0
        self.txn_index.truncate_to(min(offset, batch.base_offset))
        cut = self.size - batch.position
        os.ftruncate(self._fd, batch.position)
        self.size = batch.position
        self.offset_index.truncate_to_position(batch.position)
        self.time_index.truncate_to_offset(batch.base_offset)
        self._restore_tail_state()
        if self.size == 0:
            self.next_offset = self.base_offset
            self.created_ms = now_ms
        return cut

    def recover(self, on_batch: Callable[[BatchHeader], None]) -> tuple[int, str | None]:
        """Check every batch (length, magic, CRC), rebuild both indexes, and cut the file
        after the last valid batch. Returns (bytes cut, why) — (0, None) when intact."""
        self.offset_index.reset()
        self.time_index.reset()
        self.next_offset = self.base_offset
        self.max_timestamp = self.offset_of_max_timestamp = self.rolling_base_timestamp = -1
        self._since_index = 0
        position, reason = 0, None
        while position < self.size:
            chunk = self.read(position, min(RECOVERY_CHUNK, self.size - position))
            headers, reason = scan_valid_prefix(chunk)
            if reason is not None and headers and _cut_by_chunk(chunk, headers):
                reason = None  # the next read starts at the cut batch
            if not headers:
                if reason is None or not self._larger_than(chunk, position, self.size):
                    break
                whole = self.read(position, self._batch_size(position))  # over a chunk
                headers, reason = scan_valid_prefix(whole)
                if not headers:
                    break
            chunk_start = position
            for header in headers:
                if header.base_offset < self.next_offset and self.next_offset > self.base_offset:
                    reason = f"offset {header.base_offset} does not follow {self.next_offset - 1}"
                    break
                header.position += chunk_start
                self._note(header, header.position)
                on_batch(header)
                position = header.position + header.size
            if reason is not None:
                break
        cut = self.size - position
        if cut:
            self.truncate_to_position(position)
        return cut, reason if cut else None

    def truncate_to_position(self, position: int) -> None:
        """Cut the file (and the indexes) at ``position``."""
        os.ftruncate(self._fd, position)
        self.size = position
        self.offset_index.truncate_to_position(position)
        self.time_index.truncate_to_offset(self.next_offset)

    # lifecycle -----------------------------------------------------------------------
    def should_roll(
        self, incoming: int, now_ms: int, segment_bytes: int, roll_ms: int, last_offset: int
    ) -> bool:
        """Kafka's roll rule: full by size, older than ``roll_ms`` (from its first batch's
        timestamp), a full index, or offsets beyond int32 of the base."""
        if self.size == 0:
            return False
        if self.size + incoming > segment_bytes:
            return True
        base = self.rolling_base_timestamp if self.rolling_base_timestamp >= 0 else self.created_ms
        if now_ms - base > roll_ms:
            return True
        if self.offset_index.is_full or self.time_index.is_full:
            return True
        return last_offset - self.base_offset > 2**31 - 1

    def flush(self) -> None:
        """fsync the log and its indexes."""
        os.fsync(self._fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    @property
    def _fd(self) -> int:
        return self._file.fd if self._file is not None else -1

    def close(self) -> None:
        """Let go of the log file (closed once no region still reads it) and the indexes."""
        self._file = None
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()

    def files(self) -> list[Path]:
        """The segment's files (the transaction index may not exist yet)."""
        assert self.txn_index.path is not None
        return [self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path]

    def change_file_suffixes(self, old: str, new: str) -> None:
        """Rename the segment's files from ``<name><old>`` to ``<name><new>`` (Kafka's
        changeFileSuffixes: ``.cleaned`` -> ``.swap`` -> final); open descriptors stay valid."""
        for holder, attribute in (
            (self, "log_path"),
            (self.offset_index, "path"),
            (self.time_index, "path"),
            (self.txn_index, "path"),
        ):
            path: Path = getattr(holder, attribute)
            if not path.name.endswith(old):
                raise ValueError(f"{path.name} does not end with {old!r}")
            target = path.with_name(path.name[: len(path.name) - len(old)] + new)
            if path.exists():
                os.replace(path, target)
            setattr(holder, attribute, target)

    def index_sizes(self) -> tuple[int, int]:
        """Bytes of the offset index and of the time index (as the cleaner groups segments)."""
        sizes = []
        for path in (self.offset_index.path, self.time_index.path):
            try:
                sizes.append(path.stat().st_size)
            except FileNotFoundError:
                sizes.append(0)
        return sizes[0], sizes[1]

    @property
    def last_modified_ms(self) -> int:
        """The log file's modification time in ms (Kafka's segment lastModified)."""
        try:
            return os.stat(self.log_path).st_mtime_ns // 1_000_000
        except FileNotFoundError:
            return 0

    def set_last_modified_ms(self, ms: int) -> None:
        """Set the log file's modification time (a cleaned segment keeps its originals')."""
        os.utime(self.log_path, ns=(ms * 1_000_000, ms * 1_000_000))

    @property
    def largest_timestamp(self) -> int:
        """The newest record timestamp, else the file's modification time (Kafka's
        largestTimestamp, used by retention and the compaction lag)."""
        return self.max_timestamp if self.max_timestamp >= 0 else self.last_modified_ms

    def mark_deleted(self) -> list[Path]:
        """Rename the segment's files to ``*.deleted`` (Kafka's step before removal); the
        open descriptor keeps serving reads already started. Returns the new paths."""
        renamed = []
        for path in self.files():
            if path.exists():
                target = path.with_name(path.name + DELETED_SUFFIX)
                os.replace(path, target)
                renamed.append(target)
        return renamed


def _cut_by_chunk(chunk: bytes, headers: list[BatchHeader]) -> bool:
    """True when scanning stopped only because the chunk ends inside the next batch."""
    end = headers[-1].position + headers[-1].size
    rest = chunk[end:]
    if len(rest) < LOG_OVERHEAD:
        return True
    _, length = _PEEK.unpack_from(rest)
    return LOG_OVERHEAD + length > len(rest)


def _pwrite_all(fd: int, pieces: Sequence[Piece], position: int) -> None:
    views = [memoryview(p).cast("B") for p in pieces]
    while views:
        batch = views[:IOV_MAX]
        written = os.pwritev(fd, batch, position)
        position += written
        while batch and written >= len(batch[0]):
            written -= len(batch[0])
            batch.pop(0)
            views.pop(0)
        if written:
            views[0] = views[0][written:]
