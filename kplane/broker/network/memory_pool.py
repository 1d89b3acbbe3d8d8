"""MemoryPool: ``queued.max.request.bytes``, the bytes of requests read but not answered.

As Kafka's SimpleMemoryPool in non-strict mode: an allocation succeeds while any room is
left (so one frame larger than the pool still gets in, alone), and a Processor stops
reading a connection whose next frame found the pool empty until memory is released.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class MemoryPool:
    """A count of free bytes shared by every Processor; thread-safe."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._available = size
        self._lock = threading.Lock()
        self._waiters: list[Callable[[], None]] = []

    @property
    def available(self) -> int:
        """Free bytes (negative while one oversized frame is in)."""
        return self._available

    def try_allocate(self, size: int) -> bool:
        """Take ``size`` bytes if any room is left."""
        with self._lock:
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

    def wait(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` (once, from the releasing thread) when memory is next released;
        at once when room is already left."""
        with self._lock:
            if self._available <= 0:
                self._waiters.append(wake)
                return
        wake()
