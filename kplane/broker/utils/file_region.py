"""Byte ranges of open files, sent as they are (Kafka's ``FileRecords`` slice).

A Fetch answered from the file log carries :class:`FileRegion` pieces rather than bytes:
on a plain TCP socket the Processor hands them to ``os.sendfile`` (the kernel copies the
page cache into the socket, nothing passes through Python), on TLS it reads them into
bytes with :func:`iter_bytes` as it writes.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator

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
    return any(isinstance(p, FileRegion) for p in pieces)


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
