"""GroupRegistry: the coordinator's groups of every type by id, and the callbacks held back
until the group locks are released.

A group this broker does not hold yet is looked up in the store first (``loader``): a
coordinator that takes a group over from another broker answers from the state that one
stored, whichever request comes first (Kafka loads a coordinator partition before it
answers for its groups).

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
        self.loader: Callable[[str], Group | None] = lambda _group_id: None
        """The stored group ``group_id`` (not registered), or None; may raise KafkaError
        (COORDINATOR_LOAD_IN_PROGRESS) when the store cannot be read."""
        self.on_loaded: Callable[[Group], None] = lambda _group: None
        """Called with a group once the loader's copy is registered (its timers start)."""
        self.on_replaced: Callable[[Group], None] = lambda _group: None
        """Called with a group :meth:`replace` took out (converted to another type)."""

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
        """The group ``group_id``: registered, or loaded from the store (then registered)."""
        with self._lock:
            group = self._groups.get(group_id)
        if group is not None:
            return group
        loaded = self.loader(group_id)
        if loaded is None:
            return None
        with self._lock:
            group = self._groups.setdefault(group_id, loaded)
        if group is loaded:
            self.on_loaded(group)
        return group

    def get_or_create(self, group_id: str, factory: Callable[[str], G]) -> Group:
        """The group ``group_id`` of whatever type (see :meth:`get`), or a new one from
        ``factory``."""
        group = self.get(group_id)
        if group is not None:
            return group
        with self._lock:
            group = self._groups.get(group_id)
            if group is None:
                group = self._groups[group_id] = factory(group_id)
            return group

    def registered(self, group_id: str) -> Group | None:
        """The group ``group_id`` if this broker holds it (the store is not read)."""
        with self._lock:
            return self._groups.get(group_id)

    def replace(self, old: Group, new: Group) -> bool:
        """Put ``new`` in the place of ``old`` (a group converted to another type); False
        when ``old`` is no longer registered."""
        with self._lock:
            if self._groups.get(old.group_id) is not old:
                return False
            self._groups[old.group_id] = new
        self.on_replaced(old)
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
