"""IntervalWarning: a fault that may happen many times a second logged at most once per
interval, with how many times it happened since the last line."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import structlog

log = structlog.get_logger(__name__)

LOG_INTERVAL_S = 10.0


class IntervalWarning:
    """One warning line per ``interval_s`` at most: the first event at once, the events
    after it counted and logged with the details of the last one, by the next event past
    the interval or by ``flush`` (call it periodically). Thread-safe."""

    def __init__(
        self,
        event: str,
        interval_s: float = LOG_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.event = event
        self._interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._next = -float("inf")  # when the next line may be written
        self._count = 0  # events not logged yet
        self._details: dict[str, object] = {}

    def record(self, **details: object) -> None:
        """One more event, with the facts to log about it."""
        with self._lock:
            self._count += 1
            self._details = details
            line = self._take_line()
        if line is not None:
            log.warning(self.event, **line)

    def flush(self) -> None:
        """Log the events counted since the last line, once the interval has passed."""
        with self._lock:
            line = self._take_line() if self._count else None
        if line is not None:
            log.warning(self.event, **line)

    def _take_line(self) -> dict[str, object] | None:
        now = self._clock()
        if now < self._next:
            return None
        line = {**self._details, "count": self._count, "interval_s": self._interval_s}
        self._count = 0
        self._next = now + self._interval_s
        return line
