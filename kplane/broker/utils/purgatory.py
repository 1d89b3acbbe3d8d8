"""Delayed operations and their purgatory: fetch waits and group joins."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Hashable, Iterable

from kplane.broker.utils.timer import SystemTimer, TimerTask


class DelayedOperation(ABC):
    """An operation that completes when ``try_complete`` says so or when its delay expires."""

    def __init__(self, delay_ms: float) -> None:
        self.delay_ms = delay_ms
        self._completed = False
        self._lock = threading.Lock()
        self._timer_task: TimerTask | None = None

    @property
    def is_completed(self) -> bool:
        """True once ``on_complete`` ran (or is running)."""
        return self._completed

    def force_complete(self) -> bool:
        """Complete now unless already completed; returns whether this call completed it."""
        with self._lock:
            if self._completed:
                return False
            self._completed = True
        if self._timer_task is not None:
            self._timer_task.cancel()
        self.on_complete()
        return True

    def _expire(self) -> None:
        if self.force_complete():
            self.on_expiration()

    @abstractmethod
    def try_complete(self) -> bool:
        """Check the condition; call ``force_complete`` and return True when it holds."""

    @abstractmethod
    def on_complete(self) -> None:
        """Send the answer. Runs exactly once."""

    def on_expiration(self) -> None:  # noqa: B027 - optional hook
        """Called after ``on_complete`` when completion came from the delay expiring."""


class DelayedOperationPurgatory:
    """Watches delayed operations by key until they complete or expire."""

    def __init__(self, name: str, timer: SystemTimer) -> None:
        self.name = name
        self._timer = timer
        self._watchers: defaultdict[Hashable, list[DelayedOperation]] = defaultdict(list)
        self._lock = threading.Lock()

    def try_complete_else_watch(
        self, operation: DelayedOperation, keys: Iterable[Hashable]
    ) -> bool:
        """Complete ``operation`` now if it can; else watch it under ``keys`` until it can."""
        if operation.try_complete():
            return True
        keys = list(keys)
        with self._lock:
            for key in keys:
                self._watchers[key].append(operation)
        # A key may have been checked between try_complete and the watch: check once more.
        if operation.try_complete():
            return True
        operation._timer_task = self._timer.schedule(operation.delay_ms, operation._expire)
        if operation.is_completed:
            operation._timer_task.cancel()
        return False

    def check_and_complete(self, key: Hashable) -> int:
        """Try to complete every operation watching ``key``; returns how many completed."""
        with self._lock:
            ops = self._watchers.pop(key, None)
        if not ops:
            return 0
        done = 0
        pending = []
        for op in ops:
            if op.is_completed:
                continue
            if op.try_complete():
                done += 1
            else:
                pending.append(op)
        if pending:
            with self._lock:
                self._watchers[key].extend(pending)
        return done

    def complete_all(self) -> int:
        """Force every watched operation to complete now (at shutdown)."""
        with self._lock:
            ops = {id(op): op for ops in self._watchers.values() for op in ops}
            self._watchers.clear()
        return sum(1 for op in ops.values() if op.force_complete())

    @property
    def watched(self) -> int:
        """Operations currently watched (PurgatorySize), counting each key once."""
        with self._lock:
            return sum(1 for ops in self._watchers.values() for op in ops if not op.is_completed)
