"""KafkaScheduler: background work (log retention, flushes, checkpoints, file removal) on one
thread, apart from the request handlers and from the timer that completes delayed requests."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable

import structlog

log = structlog.get_logger(__name__)


class KafkaScheduler:
    """Runs tasks once after a delay or periodically; a failing task logs one warning and,
    when periodic, runs again at its next period."""

    def __init__(self, name: str = "kafka-scheduler") -> None:
        self._queue: list[tuple[float, int, str, Callable[[], object], float | None]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._running = True
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def schedule(
        self, name: str, task: Callable[[], object], delay_ms: float, period_ms: float | None = None
    ) -> None:
        """Run ``task`` after ``delay_ms``, then every ``period_ms`` when given."""
        with self._cond:
            if not self._running:
                return
            due = time.monotonic() + delay_ms / 1000.0
            heapq.heappush(self._queue, (due, next(self._seq), name, task, period_ms))
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._running and (
                    not self._queue or self._queue[0][0] > time.monotonic()
                ):
                    timeout = self._queue[0][0] - time.monotonic() if self._queue else None
                    self._cond.wait(timeout)
                if not self._running:
                    return
                _, _, name, task, period = heapq.heappop(self._queue)
            try:
                task()
            except Exception as exc:  # a background task must not end the thread
                reason = f"{type(exc).__name__}: {exc}"
                log.warning("background task failed", task=name, reason=reason)
            if period is not None:
                self.schedule(name, task, period, period)

    def shutdown(self) -> None:
        """Stop: tasks not yet due do not run; one running is waited for."""
        with self._cond:
            self._running = False
            self._queue.clear()
            self._cond.notify()
        if self._thread is not threading.current_thread():
            self._thread.join()
