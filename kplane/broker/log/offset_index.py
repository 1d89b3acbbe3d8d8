"""A segment's sparse indexes, in Kafka's file formats.

``<base>.index``: 8-byte entries, (offset - base offset: int32, file position: int32), one per
``index.interval.bytes`` of appended batches, keyed by the last offset of the batch that
starts at the position. ``<base>.timeindex``: 12-byte entries, (timestamp: int64, offset -
base offset: int32), written with an offset-index entry when the segment's largest timestamp
grew. Both are held in ``array`` columns and appended to their file as they grow (no
preallocation, so a file holds exactly its entries).
"""

from __future__ import annotations

import bisect
import os
import struct
from array import array
from pathlib import Path

from kplane.broker.utils.files import write_atomically

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class _IndexFile:
    """The entries of one index file: appended as they come, rewritten on truncation."""

    entry: struct.Struct

    def __init__(self, path: Path, base_offset: int, max_bytes: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_bytes // self.entry.size)
        self._fd = -1

    def _write(self, data: bytes) -> None:
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(self._fd, data)

    def _rewrite(self, data: bytes) -> None:
        self.close()
        write_atomically(self.path, data)

    def _read(self) -> bytes:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return b""
        return data[: len(data) - len(data) % self.entry.size]

    def flush(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class OffsetIndex(_IndexFile):
    """Offset -> file position of the batch to start scanning from."""

    entry = _OFFSET_ENTRY

    def __init__(self, path: Path, base_offset: int, max_bytes: int) -> None:
        super().__init__(path, base_offset, max_bytes)
        self._offsets = array("q")
        self._positions = array("q")

    @property
    def entries(self) -> int:
        return len(self._offsets)

    @property
    def is_full(self) -> bool:
        return len(self._offsets) >= self.max_entries

    @property
    def last_offset(self) -> int:
        """The largest offset indexed, or the base offset when empty."""
        return self._offsets[-1] if self._offsets else self.base_offset

    def append(self, offset: int, position: int) -> None:
        """Index ``offset`` (the last offset of the batch at ``position``)."""
        self._write(_OFFSET_ENTRY.pack(offset - self.base_offset, position))
        self._offsets.append(offset)
        self._positions.append(position)

    def lookup(self, offset: int) -> int:
        """The position of the last indexed batch ending at or below ``offset`` (0 when
        none): scanning from there finds the batch holding ``offset``."""
        i = bisect.bisect_right(self._offsets, offset)
        return self._positions[i - 1] if i else 0

    def load(self, segment_size: int) -> bool:
        """Read the file; False (and nothing loaded) when it fails Kafka's sanity checks:
        offsets and positions increasing, positions inside the segment."""
        data = self._read()
        offsets, positions = array("q"), array("q")
        for relative, position in _OFFSET_ENTRY.iter_unpack(data):
            offset = self.base_offset + relative
            if relative < 0 or position < 0 or position >= max(segment_size, 1):
                return False
            if offsets and (offset <= offsets[-1] or position <= positions[-1]):
                return False
            offsets.append(offset)
            positions.append(position)
        self._offsets, self._positions = offsets, positions
        return True

    def truncate_to_position(self, position: int) -> None:
        """Drop the entries at or past ``position`` (the segment was cut there)."""
        keep = bisect.bisect_left(self._positions, position)
        if keep == len(self._positions):
            return
        del self._offsets[keep:]
        del self._positions[keep:]
        self._rewrite(
            b"".join(
                _OFFSET_ENTRY.pack(o - self.base_offset, p)
                for o, p in zip(self._offsets, self._positions, strict=True)
            )
        )

    def reset(self) -> None:
        """Empty the index (before a rebuild)."""
        self._offsets, self._positions = array("q"), array("q")
        self._rewrite(b"")


class TimeIndex(_IndexFile):
    """Timestamp -> the offset to start scanning from for the first record at or after it."""

    entry = _TIME_ENTRY

    def __init__(self, path: Path, base_offset: int, max_bytes: int) -> None:
        super().__init__(path, base_offset, max_bytes)
        self._timestamps = array("q")
        self._offsets = array("q")

    @property
    def last_timestamp(self) -> int:
        return self._timestamps[-1] if self._timestamps else -1

    @property
    def last_offset(self) -> int:
        return self._offsets[-1] if self._offsets else -1

    @property
    def is_full(self) -> bool:
        return len(self._offsets) >= self.max_entries

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add (timestamp, offset) when ``timestamp`` is larger than the last entry's."""
        if timestamp > self.last_timestamp and (
            not self._offsets or offset > self._offsets[-1]
        ):
            self._write(_TIME_ENTRY.pack(timestamp, offset - self.base_offset))
            self._timestamps.append(timestamp)
            self._offsets.append(offset)

    def lookup(self, timestamp: int) -> int:
        """The offset of the last entry whose timestamp is below ``timestamp`` (the base
        offset when none): every record up to it is older, so the scan for the first record
        at or after ``timestamp`` starts at the batch holding it."""
        i = bisect.bisect_left(self._timestamps, timestamp)
        return self._offsets[i - 1] if i else self.base_offset

    def load(self, next_offset: int) -> bool:
        """Read the file; False when an entry is out of order or past the segment."""
        data = self._read()
        timestamps, offsets = array("q"), array("q")
        for ts, relative in _TIME_ENTRY.iter_unpack(data):
            offset = self.base_offset + relative
            if relative < 0 or offset >= max(next_offset, self.base_offset + 1):
                return False
            if timestamps and (ts <= timestamps[-1] or offset < offsets[-1]):
                return False
            timestamps.append(ts)
            offsets.append(offset)
        self._timestamps, self._offsets = timestamps, offsets
        return True

    def truncate_to_offset(self, next_offset: int) -> None:
        """Drop the entries naming offsets at or past ``next_offset``."""
        keep = bisect.bisect_left(self._offsets, next_offset)
        if keep == len(self._offsets):
            return
        del self._timestamps[keep:]
        del self._offsets[keep:]
        self._rewrite(
            b"".join(
                _TIME_ENTRY.pack(t, o - self.base_offset)
                for t, o in zip(self._timestamps, self._offsets, strict=True)
            )
        )

    def reset(self) -> None:
        self._timestamps, self._offsets = array("q"), array("q")
        self._rewrite(b"")
