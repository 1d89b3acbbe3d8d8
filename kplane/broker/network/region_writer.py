"""Writing a response that holds file regions to a plain TCP socket with ``sendfile``.

Kafka sends a Fetch's ``FileRecords`` with ``FileChannel.transferTo``: the kernel copies
the page cache into the socket and no record byte passes through the JVM. uvloop's
transports have no ``sendfile``, so a :class:`RegionWriter` writes such a response itself,
on a duplicate of the connection's descriptor: bytes with ``os.writev``, regions with
``os.sendfile``, and while the socket is full it waits for it on the event loop. The
transport keeps the original descriptor (it goes on reading); it must hold no unsent bytes
when the writer starts, and it writes nothing until the writer is done, which the
connection guarantees by staying muted (one response at a time, as Kafka's channels).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Sequence

from kplane.broker.utils.file_region import FileRegion, RegionTruncatedError, Transferable

IOV_MAX = 1024
"""Buffers one ``writev`` takes (Linux's ``IOV_MAX``)."""

Done = Callable[[OSError | None], None]


class RegionWriter:
    """Writes ``pieces`` to the socket ``sock_fd``, then calls ``done`` with None, or with
    the error that stopped it (the peer went away, a region's file was cut under it)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock_fd: int,
        pieces: Sequence[Transferable],
        done: Done,
    ) -> None:
        self._loop = loop
        self._pieces = pieces
        self._done = done
        self._index = 0  # the piece being written
        self._offset = 0  # bytes of it already written
        self._fd = os.dup(sock_fd)  # ours: never another socket's, whatever the transport does
        self._watching = False
        self.last_progress = time.monotonic()
        """When the socket last took bytes (a client that stops reading goes idle)."""

    def start(self) -> None:
        """Write what the socket takes now; the rest as it drains."""
        self._write()

    def abort(self) -> None:
        """Stop without calling ``done`` (the connection is closing)."""
        self._release()

    def _write(self) -> None:
        try:
            finished = self._push()
        except OSError as exc:
            self._release()
            self._done(exc)
            return
        if finished:
            self._release()
            self._done(None)
        elif not self._watching:
            self._watching = True
            self._loop.add_writer(self._fd, self._write)

    def _push(self) -> bool:
        """Write until every piece is out (True) or the socket is full (False)."""
        pieces = self._pieces
        while self._index < len(pieces):
            piece = pieces[self._index]
            if self._offset >= len(piece):  # an empty piece
                self._index, self._offset = self._index + 1, 0
                continue
            try:
                if isinstance(piece, FileRegion):
                    sent = self._send_region(piece)
                else:
                    sent = os.writev(self._fd, self._buffers())
            except BlockingIOError:
                return False
            self._advance(sent)
        return True

    def _send_region(self, region: FileRegion) -> int:
        left = region.length - self._offset
        sent = os.sendfile(self._fd, region.file.fd, region.position + self._offset, left)
        if sent == 0:
            raise RegionTruncatedError(f"file ended {left} bytes before the region's end")
        return sent

    def _buffers(self) -> list[memoryview]:
        """The in-memory pieces from the current one up to the next region."""
        out: list[memoryview] = []
        for i in range(self._index, min(len(self._pieces), self._index + IOV_MAX)):
            piece = self._pieces[i]
            if isinstance(piece, FileRegion):
                break
            view = memoryview(piece).cast("B")
            out.append(view[self._offset :] if i == self._index else view)
        return out

    def _advance(self, sent: int) -> None:
        self.last_progress = time.monotonic()
        pieces = self._pieces
        while sent and self._index < len(pieces):
            left = len(pieces[self._index]) - self._offset
            if sent < left:
                self._offset += sent
                return
            sent -= left
            self._index, self._offset = self._index + 1, 0

    def _release(self) -> None:
        if self._fd < 0:
            return
        if self._watching:
            self._loop.remove_writer(self._fd)
            self._watching = False
        os.close(self._fd)
        self._fd = -1
