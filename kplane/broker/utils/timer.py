"""SystemTimer: one thread that runs callbacks after a delay (Kafka's timing wheel, simply)."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable

import structlog

log = structlog.get_logger(__name__)


class TimerTask:
    """A scheduled callback; ``cancel`` keeps it from running."""

    __slots__ = ("cancelled", "deadline", "fn")

    def __init__(self, deadline: float, fn: Callable[[], None]) -> None:
        self.deadline = deadline
        self.fn = fn
        self.cancelled = False

    def cancel(self) -> None:
        """Keep the callback from running (no effect once it ran)."""
        self.cancelled = True


class SystemTimer:
    """Runs each scheduled callback once on the timer thread, after its delay."""

    def __init__(self, name: str = "kafka-timer") -> None:
        self._heap: list[tuple[float, int, TimerTask]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._running = True
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def schedule(self, delay_ms: float, fn: Callable[[], None]) -> TimerTask:
        """Run ``fn`` after ``delay_ms`` milliseconds."""
        task = TimerTask(time.monotonic() + delay_ms / 1000.0, fn)
        with self._cond:
            heapq.heappush(self._heap, (task.deadline, next(self._seq), task))
            if self._heap[0][2] is task:
                self._cond.notify()
        return task

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._running:
                    now = time.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        break
                    wait = self._heap[0][0] - now if self._heap else None
                    self._cond.wait(wait)
                if not self._running:
                    return
                _, _, task = heapq.heappop(self._heap)
            if task.cancelled:
                continue
            try:
                task.fn()
            except Exception:
                log.exception("timer task failed")

    def shutdown(self) -> None:
        """Stop the thread; pending tasks are dropped."""
        with self._cond:
            self._running = False
            self._cond.notify()
        self._thread.join(timeout=5)
