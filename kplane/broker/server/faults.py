"""FaultInjector: the faults of librdkafka's mock cluster on a real broker, for client tests.

* ``push_request_errors(api, *errors)``: each next request of that API is answered with
  the next error, in every error field of a response shaped after the request (each topic
  and partition it named), as Kafka's own error responses are.
* ``set_rtt(ms, listener)``: responses on a listener (or every listener) come ``ms`` later.
* ``broker_down()`` / ``broker_up()``: every listener closed (its connections dropped) and
  reopened on the same port; ``drop_connections(listener)`` does both at once for one.

The request path pays one attribute check (``active``) while no fault is set.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

import structlog

from kplane.broker.config.endpoint import EndPoint
from kplane.broker.network.socket_server import SocketServer
from kplane.broker.network.tls import ServerTls
from kplane.protocol import api
from kplane.protocol.errors import ErrorCode

log = structlog.get_logger(__name__)

# A request's and its response's field for the same thing, where the names differ.
_SAME_FIELD = {
    "partition": ("partition_index", "index"),
    "partition_index": ("partition", "index"),
    "index": ("partition_index", "partition"),
    "topic": ("name",),
    "name": ("topic",),
}


def error_response(api_key: int, version: int, request: Any, error: ErrorCode) -> Any:
    """A response to ``request`` with ``error`` in its top-level error field (if it has
    one) and in each entry mirroring the request's topics, partitions or groups."""
    return _mirror(api.response_class(api_key, version), request, error)


def _mirror(cls: type, source: Any, error: ErrorCode) -> Any:
    values: dict[str, Any] = {}
    source_fields = _entity_fields(source)
    for field in dataclasses.fields(cls):
        if field.name == "error_code":
            values["error_code"] = error
            continue
        for name in (field.name, *_SAME_FIELD.get(field.name, ())):
            if name in source_fields and not _is_entity_tuple(source_fields[name]):
                values[field.name] = source_fields[name]
                break
        item_cls = _entity_item(cls, field.name)
        if item_cls is None:
            continue
        items = next((v for v in source_fields.values() if _is_entity_tuple(v)), None)
        if items:
            values[field.name] = tuple(_mirror(item_cls, item, error) for item in items)
    return api.make(cls, **values)


def _entity_fields(entity: Any) -> dict[str, Any]:
    if not dataclasses.is_dataclass(entity):
        return {}
    return {f.name: getattr(entity, f.name) for f in dataclasses.fields(entity)}


def _is_entity_tuple(value: Any) -> bool:
    return isinstance(value, tuple) and bool(value) and dataclasses.is_dataclass(value[0])


def _entity_item(cls: type, name: str) -> type | None:
    """The entity class of a ``tuple[Entity, ...]`` field, else None."""
    hint = _hints(cls).get(name)
    args = getattr(hint, "__args__", ())
    item = args[0] if args else None
    return item if isinstance(item, type) and dataclasses.is_dataclass(item) else None


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    found = _HINTS.get(cls)
    if found is None:
        import typing

        module = __import__(cls.__module__, fromlist=["_"])
        found = _HINTS[cls] = typing.get_type_hints(cls, vars(module))
    return found


class FaultInjector:
    """The faults set on one broker."""

    def __init__(self, socket_server: Callable[[], SocketServer]) -> None:
        self._socket_server = socket_server
        self._lock = threading.Lock()
        self._errors: dict[int, deque[ErrorCode]] = {}
        self._rtt_s: dict[str | None, float] = {}
        self._down: list[tuple[EndPoint, ServerTls | None]] = []
        self.active = False
        """Whether any request-path fault is set (the one check the request path pays)."""

    def _refresh(self) -> None:
        self.active = bool(self._errors) or any(v > 0 for v in self._rtt_s.values())

    # request errors ------------------------------------------------------------------
    def push_request_errors(self, api_key: int, *errors: ErrorCode | int) -> None:
        """Answer the next ``len(errors)`` requests of ``api_key`` with these errors."""
        with self._lock:
            self._errors.setdefault(int(api_key), deque()).extend(ErrorCode(e) for e in errors)
            self._refresh()

    def injected_error_count(self, api_key: int) -> int:
        """Errors still queued for ``api_key``."""
        with self._lock:
            return len(self._errors.get(int(api_key), ()))

    def queued(self) -> dict[int, int]:
        """Api key -> errors still queued for it."""
        with self._lock:
            return {key: len(queue) for key, queue in self._errors.items()}

    def take_error(self, api_key: int) -> ErrorCode | None:
        """The next queued error of ``api_key``, removed; None when none is queued."""
        with self._lock:
            queue = self._errors.get(api_key)
            if not queue:
                return None
            error = queue.popleft()
            if not queue:
                del self._errors[api_key]
            self._refresh()
            return error

    # round-trip time -----------------------------------------------------------------
    def set_rtt(self, ms: float, listener: str | None = None) -> None:
        """Delay every response on ``listener`` (None: every listener) by ``ms``."""
        with self._lock:
            self._rtt_s[listener] = max(0.0, ms) / 1000.0
            self._refresh()

    def rtt_s(self, listener: str) -> float:
        """The delay of responses on ``listener``."""
        return self._rtt_s.get(listener, self._rtt_s.get(None, 0.0))

    def clear(self) -> None:
        """No queued error, no delay."""
        with self._lock:
            self._errors.clear()
            self._rtt_s.clear()
            self._refresh()

    # listeners -----------------------------------------------------------------------
    def broker_down(self, listeners: list[str] | None = None) -> None:
        """Close ``listeners`` (all by default): no new connection, open ones dropped."""
        server = self._socket_server()
        with self._lock:
            for name in listeners or list(server.bound):
                endpoint = server.bound[name]
                tls = server.tls_of(name)
                server.remove_listener(name)
                self._down.append((endpoint, tls))
        names = [e.listener_name for e, _ in self._down]
        log.info("fault injected: listeners down", listeners=names)

    def broker_up(self) -> None:
        """Reopen every listener ``broker_down`` closed, on the same ports."""
        server = self._socket_server()
        with self._lock:
            down, self._down = self._down, []
        for endpoint, tls in down:
            server.add_listener(endpoint, tls)
        log.info("fault injected: listeners up", listeners=[e.listener_name for e, _ in down])

    def drop_connections(self, listener: str) -> None:
        """Drop every connection of ``listener``; it accepts again at once."""
        self.broker_down([listener])
        self.broker_up()
