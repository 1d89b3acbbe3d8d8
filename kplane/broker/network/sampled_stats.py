"""Kafka's sampled stats for connection quotas (KIP-402): a ``Rate`` with a quota bound,
measured as Kafka measures it, and an ``Avg``. Not thread-safe: the caller locks."""

from __future__ import annotations

from collections import deque

QUOTA_SAMPLES = 11
"""Kafka's ``quota.window.num`` default: samples a quota's rate is measured over."""
QUOTA_WINDOW_S = 1.0
"""Kafka's ``quota.window.size.seconds`` default: the span of one sample, and the longest
throttle one connection gets."""


class _Samples:
    """Values summed per window of ``window_s``, the last ``samples`` windows kept."""

    def __init__(self, samples: int, window_s: float) -> None:
        self._samples = samples
        self._window_s = window_s
        self._windows: deque[list[float]] = deque()  # [start, total, events]

    def _add(self, now: float, value: float) -> None:
        self._purge(now)
        if not self._windows or now - self._windows[-1][0] >= self._window_s:
            self._windows.append([now, 0.0, 0])
        window = self._windows[-1]
        window[1] += value
        window[2] += 1

    def _purge(self, now: float) -> None:
        expired = now - self._samples * self._window_s
        while self._windows and self._windows[0][0] <= expired:
            self._windows.popleft()


class SampledRate(_Samples):
    """Events per second, as Kafka's ``Rate``: the total over the kept windows divided by
    the time they span, never less than ``samples - 1`` whole windows (so a burst at the
    start is measured over the full span)."""

    def __init__(self, samples: int = QUOTA_SAMPLES, window_s: float = QUOTA_WINDOW_S) -> None:
        super().__init__(samples, window_s)

    def record(self, now: float, value: float = 1.0) -> None:
        """Count ``value`` events at ``now`` (monotonic seconds)."""
        self._add(now, value)

    def measure(self, now: float) -> float:
        """Events per second now."""
        self._purge(now)
        return sum(w[1] for w in self._windows) / self._span(now)

    def record_and_throttle_ms(self, now: float, bound: float) -> float:
        """Record one event; when the rate is then above ``bound``, how long (ms) to delay
        so it comes back to it, as Kafka's QuotaUtils computes it, at most one window."""
        self.record(now)
        longest = self._window_s * 1000.0
        if bound <= 0:
            return longest if self.measure(now) > bound else 0.0
        return min(self.throttle_ms(now, bound), longest)

    def throttle_ms(self, now: float, bound: float) -> float:
        """How long (ms) without events brings the rate back to ``bound`` (> 0), as Kafka's
        ``QuotaUtils.throttleTime``: 0 within it."""
        rate = self.measure(now)
        if rate <= bound:
            return 0.0
        return (rate - bound) / bound * self._span(now) * 1000.0

    def _span(self, now: float) -> float:
        elapsed = now - self._windows[0][0] if self._windows else 0.0
        whole = int(elapsed / self._window_s)
        if whole < self._samples - 1:
            elapsed += (self._samples - 1 - whole) * self._window_s
        return max(elapsed, 0.001)


class SampledAverage(_Samples):
    """The mean of recorded values, as Kafka's ``Avg`` with its default metric config:
    two windows of 30 s."""

    def __init__(self, samples: int = 2, window_s: float = 30.0) -> None:
        super().__init__(samples, window_s)

    def record(self, now: float, value: float) -> None:
        self._add(now, value)

    def measure(self, now: float) -> float:
        """The mean over the kept windows; 0 when nothing was recorded."""
        self._purge(now)
        events = sum(w[2] for w in self._windows)
        return sum(w[1] for w in self._windows) / events if events else 0.0
