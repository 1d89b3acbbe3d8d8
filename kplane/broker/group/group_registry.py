"""GroupRegistry: the coordinator's groups of every type by id, and the callbacks held back
until the group locks are released.

Every operation of the coordinator runs inside ``deferring()``; callbacks given to
``defer`` inside it run when the outermost block exits, after the locks taken inside were
released, so a callback may call back into the coordinator.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import structlog

from kplane.broker.group.group import Group

log = structlog.get_logger(__name__)

G = TypeVar("G", bound=Group)


class _Deferred(threading.local):
    def __init__(self) -> None:
        self.depth = 0
        self.calls: list[tuple[Callable[[Any], None], Any]] = []


class GroupRegistry:
    """Groups by id (one type each) and the deferred callbacks of the current thread."""

    def __init__(self) -> None:
        self._groups: dict[str, Group] = {}
        self._lock = threading.Lock()
        self._deferred = _Deferred()

    @contextmanager
    def deferring(self) -> Iterator[None]:
        """Collect callbacks made inside and run them when the outermost block exits."""
        state = self._deferred
        state.depth += 1
        try:
            yield
        finally:
            state.depth -= 1
            if state.depth == 0:
                while state.calls:
                    calls, state.calls = state.calls, []
                    for fn, arg in calls:
                        try:
                            fn(arg)
                        except Exception:
                            log.exception("group coordinator callback failed")

    def defer(self, fn: Callable[[Any], None] | None, arg: Any) -> None:
        if fn is None:
            return
        if self._deferred.depth > 0:
            self._deferred.calls.append((fn, arg))
        else:
            fn(arg)

    def get(self, group_id: str) -> Group | None:
        with self._lock:
            return self._groups.get(group_id)

    def get_or_create(self, group_id: str, factory: Callable[[str], G]) -> Group:
        """The group ``group_id`` of whatever type, or a new one from ``factory``."""
        with self._lock:
            group = self._groups.get(group_id)
            if group is None:
                group = self._groups[group_id] = factory(group_id)
            return group

    def replace(self, old: Group, new: Group) -> bool:
        """Put ``new`` in the place of ``old`` (a group converted to another type); False
        when ``old`` is no longer registered."""
        with self._lock:
            if self._groups.get(old.group_id) is not old:
                return False
            self._groups[old.group_id] = new
            return True

    def all(self) -> list[Group]:
        with self._lock:
            return list(self._groups.values())

    def ids(self) -> list[str]:
        with self._lock:
            return list(self._groups)

    def remove(self, group: Group) -> None:
        with self._lock:
            if self._groups.get(group.group_id) is group:
                del self._groups[group.group_id]
