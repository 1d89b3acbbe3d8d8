"""Byte ranges of open files, sent as they are (Kafka's ``FileRecords`` slice).

A Fetch answered from the file log carries :class:`FileRegion` pieces rather than bytes:
on a plain TCP socket the Processor hands them to ``os.sendfile`` (the kernel copies the
page cache into the socket, nothing passes through Python), on TLS it reads them into
bytes with :func:`iter_bytes` as it writes.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import os
from collections.abc import Iterable, Iterator, Sequence

READ_PIECE_BYTES = 1 << 20
"""A region is read in pieces of at most this size: glibc serves a buffer this large from
its heap and reuses it, where one of tens of MB is a fresh mapping whose page faults cost
more than the copy itself."""


class OpenFile:
    """A file descriptor closed when its last holder lets go: a segment closed or deleted
    while a response still sends from it keeps its file until then, as Kafka's slices keep
    their ``FileChannel``."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __del__(self) -> None:
        with contextlib.suppress(OSError, TypeError):  # TypeError: os gone at exit
            os.close(self.fd)


class RegionTruncatedError(OSError):
    """The file ended before the region did (its log was truncated under a read)."""


class FileRegion:
    """``length`` bytes of ``file`` from ``position``."""

    __slots__ = ("file", "length", "position")

    def __init__(self, file: OpenFile, position: int, length: int) -> None:
        self.file = file
        self.position = position
        self.length = length

    def __len__(self) -> int:
        return self.length

    def pread(self, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes from ``offset`` within the region (fewer past its end)."""
        length = max(0, min(length, self.length - offset))
        return os.pread(self.file.fd, length, self.position + offset)

    def iter_pieces(self) -> Iterator[bytes]:
        """The whole region, read in pieces of at most ``READ_PIECE_BYTES`` as they are
        taken."""
        done = 0
        while done < self.length:
            piece = self.pread(done, READ_PIECE_BYTES)
            if not piece:
                raise RegionTruncatedError(
                    f"file ended {self.length - done} bytes before the region's end"
                )
            yield piece
            done += len(piece)


Transferable = bytes | memoryview | FileRegion
"""A piece of a response: bytes in memory, or a region of a file (Kafka's
``TransferableRecords``)."""


def has_regions(pieces: Iterable[Transferable]) -> bool:
    """Whether any piece is a file region."""
    for piece in pieces:  # noqa: SIM110 (a loop: no generator for a response's few pieces)
        if isinstance(piece, FileRegion):
            return True
    return False


def iter_bytes(pieces: Iterable[Transferable]) -> Iterator[bytes | memoryview]:
    """The pieces with every file region read into bytes as it is reached, in pieces of at
    most ``READ_PIECE_BYTES`` (raises :class:`RegionTruncatedError` when a file was cut
    under it)."""
    for piece in pieces:
        if isinstance(piece, FileRegion):
            yield from piece.iter_pieces()
        else:
            yield piece


def materialize(pieces: Iterable[Transferable]) -> list[bytes | memoryview]:
    """The pieces with every file region read into bytes."""
    return list(iter_bytes(pieces))


class PiecesEndToEnd:
    """Pieces laid end to end (a log read: whole batches, the last maybe cut short), read
    at a position and cut into ranges that are pieces of the same bytes or files."""

    __slots__ = ("pieces", "size", "starts")

    def __init__(self, pieces: Sequence[Transferable]) -> None:
        self.pieces = pieces
        self.starts = list(itertools.accumulate((len(p) for p in pieces), initial=0))
        self.size = self.starts.pop()

    def read(self, position: int, size: int) -> bytes:
        """``size`` bytes from ``position`` (fewer at the end, or where a file was cut)."""
        index = bisect.bisect_right(self.starts, position) - 1
        out = bytearray()
        while len(out) < size and index < len(self.pieces):
            piece = self.pieces[index]
            offset = position + len(out) - self.starts[index]
            want = min(size - len(out), len(piece) - offset)
            if isinstance(piece, FileRegion):
                chunk = piece.pread(offset, want)
                out += chunk
                if len(chunk) < want:
                    break
            else:
                out += memoryview(piece).cast("B")[offset : offset + want]
            index += 1
        return bytes(out)

    def cut(self, start: int, end: int) -> list[Transferable]:
        """Bytes ``start`` to ``end`` as pieces of the same bytes or files."""
        out: list[Transferable] = []
        index = bisect.bisect_right(self.starts, start) - 1
        while index < len(self.pieces) and self.starts[index] < end:
            piece, at = self.pieces[index], self.starts[index]
            lo, hi = max(start - at, 0), min(end - at, len(piece))
            if lo == 0 and hi == len(piece):
                out.append(piece)
            elif isinstance(piece, FileRegion):
                out.append(FileRegion(piece.file, piece.position + lo, hi - lo))
            else:
                out.append(memoryview(piece).cast("B")[lo:hi])
            index += 1
        return out
