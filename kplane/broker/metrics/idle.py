"""Idle-time meters for Kafka's ``*AvgIdlePercent`` gauges.

A thread reports how long it was idle (and, optionally, how long it was busy); the meter turns
that into the fraction of recent time spent idle, a number in ``[0, 1]`` (Kafka's
``AvgIdlePercent`` gauges are fractions too, despite the name).

How the fraction is computed
----------------------------
Time is cut into buckets (1 s by default) kept in a ring that covers a sliding window (30 s by
default). ``record_idle(ns)`` / ``record_busy(ns)`` credit the interval ``[now - ns, now]`` to
the buckets it overlaps, so a long idle period reported at once is not piled into the current
second. The fraction over the window is::

    idle / max(idle + busy, elapsed wall time covered by the window)

* **Idle-only reporting** (Kafka's way): a thread only reports idle nanoseconds; time it did not
  report counts as busy, so the result is ``idle / wall time``.
* **Idle and busy reporting**: the result is ``idle / (idle + busy)`` once both are reported.
* **A pool of threads** (``RequestHandlerAvgIdlePercent``): every thread of the pool reports to
  the same meter, which divides each report by ``pool_size`` -- exactly what Kafka's
  ``KafkaRequestHandler`` does with ``aggregateIdleMeter.mark(idleTime / totalHandlerThreads)``.
  The result is the pool's average idle fraction. ``pool_size`` can change at run time
  (``num.io.threads`` is dynamic).

Because unreported time counts as busy, a thread must not block for longer than a bucket or so
without reporting: block on queues and selectors with a timeout (Kafka uses 300 ms) and report
the idle time each time the wait returns.

All methods are thread-safe. ``record_*`` is cheap (one lock, usually one bucket touched).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["IdleMeter"]


class IdleMeter:
    """Sliding-window idle fraction, fed with nanosecond durations.

    ``clock`` returns monotonic nanoseconds (``time.monotonic_ns`` by default); tests pass a
    fake one.
    """

    __slots__ = (
        "_bucket_ns",
        "_busy",
        "_clock",
        "_created_ns",
        "_epoch",
        "_idle",
        "_lock",
        "_nbuckets",
        "_pool_size",
        "_scale",
    )

    def __init__(
        self,
        *,
        window_s: float = 30.0,
        bucket_s: float = 1.0,
        pool_size: int = 1,
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        if bucket_s <= 0 or window_s < bucket_s:
            raise ValueError(f"need 0 < bucket_s <= window_s, got {bucket_s=} {window_s=}")
        self._bucket_ns = int(bucket_s * 1_000_000_000)
        self._nbuckets = max(1, round(window_s / bucket_s))
        self._clock = clock
        self._lock = threading.Lock()
        # Slot i holds bucket number _epoch[i] (time // bucket_ns); -1 means never used.
        self._epoch = [-1] * self._nbuckets
        self._idle = [0.0] * self._nbuckets
        self._busy = [0.0] * self._nbuckets
        self._created_ns = clock()
        self._pool_size = 1
        self._scale = 1.0
        self.set_pool_size(pool_size)

    @property
    def pool_size(self) -> int:
        return self._pool_size

    def set_pool_size(self, pool_size: int) -> None:
        """Number of threads reporting to this meter; every report is divided by it."""
        if pool_size < 1:
            raise ValueError(f"pool_size must be >= 1, got {pool_size}")
        with self._lock:
            self._pool_size = pool_size
            self._scale = 1.0 / pool_size

    def record_idle(self, ns: float) -> None:
        """The calling thread was idle for the last ``ns`` nanoseconds."""
        if ns > 0:
            self._record(ns, self._idle)

    def record_busy(self, ns: float) -> None:
        """The calling thread was busy for the last ``ns`` nanoseconds (optional)."""
        if ns > 0:
            self._record(ns, self._busy)

    def _record(self, ns: float, target: list[float]) -> None:
        bucket_ns = self._bucket_ns
        n = self._nbuckets
        with self._lock:
            now = self._clock()
            idx = now // bucket_ns
            oldest = (idx - n + 1) * bucket_ns
            # Time before the window or before the meter existed is not counted.
            start = max(now - ns, oldest, self._created_ns)
            end: float = now
            scale = self._scale
            epoch = self._epoch
            while end > start:
                seg_start = max(start, idx * bucket_ns)
                slot = idx % n
                if epoch[slot] != idx:
                    epoch[slot] = idx
                    self._idle[slot] = 0.0
                    self._busy[slot] = 0.0
                target[slot] += (end - seg_start) * scale
                end = seg_start
                idx -= 1

    def totals(self) -> tuple[float, float, int]:
        """``(idle_ns, busy_ns, elapsed_ns)`` over the current window."""
        with self._lock:
            now = self._clock()
            idx = now // self._bucket_ns
            lo = idx - self._nbuckets + 1
            idle = 0.0
            busy = 0.0
            for slot, e in enumerate(self._epoch):
                if lo <= e <= idx:
                    idle += self._idle[slot]
                    busy += self._busy[slot]
            elapsed = now - max(lo * self._bucket_ns, self._created_ns)
        return idle, busy, elapsed

    def fraction(self) -> float:
        """Idle fraction over the window, in ``[0, 1]``; 0.0 before any time has passed."""
        idle, busy, elapsed = self.totals()
        denom = max(idle + busy, float(elapsed))
        if denom <= 0:
            return 0.0
        return min(1.0, max(0.0, idle / denom))
