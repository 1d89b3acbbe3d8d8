"""MemoryPool: ``queued.max.request.bytes``, the bytes of requests read but not answered.

As Kafka's SimpleMemoryPool in non-strict mode, a frame is let in while any room is left
(so one frame larger than the pool still gets in, alone), and a Processor stops reading a
connection whose next frame found the pool empty until memory is released. Unlike Kafka,
a frame counts only the bytes that have arrived, not the size its prefix announces, and
frames still arriving (a slow sender's, say) hold at most half of the pool: past that,
a connection reads on into its frame only while the frame holds less than
``FRAME_ALLOWANCE``, or when its frame is the oldest unfinished one (so two large frames
never wait on each other). The other half stays for complete requests, so slow senders
cannot stop the broker answering others; ``connections.max.idle.ms`` ends their frames.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

UNFINISHED_SHARE = 0.5
"""The part of the pool that frames still arriving may hold together."""
FRAME_ALLOWANCE = 64 << 10
"""What a frame may hold whatever the others hold: a small request that arrives in
pieces is never made to wait for slow senders."""


class MemoryPool:
    """A count of free bytes shared by every Processor; thread-safe."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._available = size
        self._unfinished_limit = int(size * UNFINISHED_SHARE)
        self._unfinished = 0
        self._open: dict[FrameMemory, int] = {}  # frames being received, oldest first
        self._lock = threading.Lock()
        self._waiters: list[Callable[[], None]] = []

    @property
    def available(self) -> int:
        """Free bytes (negative while one oversized frame is in)."""
        return self._available

    @property
    def unfinished(self) -> int:
        """Bytes held by frames still arriving."""
        return self._unfinished

    def try_allocate(self, size: int) -> bool:
        """Take ``size`` bytes if any room is left."""
        with self._lock:
            return self._take(size)

    def _take(self, size: int) -> bool:
        if self._available <= 0:
            return False
        self._available -= size
        return True

    def release(self, size: int) -> None:
        """Give ``size`` bytes back and wake whoever waits for room."""
        if size <= 0:
            return
        with self._lock:
            self._available += size
            waiters, self._waiters = self._waiters, []
        for wake in waiters:
            wake()

    def wait(self, wake: Callable[[], None], frame: FrameMemory | None = None) -> None:
        """Call ``wake`` (once, from the releasing thread) when memory is next released or
        a frame completes; at once when ``frame`` (else a new frame) may go on already."""
        with self._lock:
            if not self._may_take(frame):
                self._waiters.append(wake)
                return
        wake()

    def _may_take(self, frame: FrameMemory | None) -> bool:
        held = self._open.get(frame) if frame is not None else None
        if held is None:  # a new frame
            return self._available > 0
        return next(iter(self._open)) is frame or (
            self._available > 0
            and (self._unfinished < self._unfinished_limit or held < FRAME_ALLOWANCE)
        )

    def _hold(self, frame: FrameMemory, size: int) -> bool:
        """Count ``size`` bytes that arrived for ``frame``; False when it must wait."""
        with self._lock:
            if frame not in self._open:
                if not self._take(size):
                    return False
                self._open[frame] = size
            elif self._may_take(frame):
                self._available -= size
                self._open[frame] += size
            else:
                return False
            self._unfinished += size
            return True

    def _complete(self, frame: FrameMemory) -> None:
        """``frame`` is complete (its bytes stay taken until released) or abandoned."""
        with self._lock:
            self._unfinished -= self._open.pop(frame, 0)
            waiters, self._waiters = self._waiters, []
        for wake in waiters:
            wake()


class FrameMemory:
    """One connection's frames in the pool: ``allocate`` and ``frame_complete`` for its
    ``ServerConnection``, ``wait`` when the pool refused."""

    __slots__ = ("_pool",)

    def __init__(self, pool: MemoryPool) -> None:
        self._pool = pool

    def allocate(self, size: int) -> bool:
        """Count ``size`` more bytes of the frame being received."""
        return self._pool._hold(self, size)

    def frame_complete(self) -> None:
        """The frame being received ended."""
        self._pool._complete(self)

    def wait(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` once this connection's frame (or next frame) may go on."""
        self._pool.wait(wake, self)
