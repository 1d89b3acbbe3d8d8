"""RequestChannel: the queue between Processors and RequestHandlers, and back.

Kafka's back-pressure lives here: ``send_request`` blocks the calling Processor while the
queue is full. Each Plane (KIP-291) has its own channel, sized by the plane, and the channel
registers the plane's queue gauges.

A plane may serve some APIs on its Processors (the data plane's Produce): their requests
are handled at once on the Processor's thread instead of queued. In Python the hand-off to a
handler thread and back (two thread switches and GIL hand-overs each way) costs more than
handling a small Produce; the control plane keeps its own Processor, queue and handler.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kplane.broker.config.endpoint import SecurityProtocol
from kplane.broker.metrics.registry import DATA_PLANE, BrokerMetrics
from kplane.broker.network.plane import Plane
from kplane.broker.utils.file_region import Transferable
from kplane.protocol.framing import RequestHeader

_DISCONNECT_LOCK = threading.Lock()


class ResponseSink(Protocol):
    """What a Processor offers handlers: a thread-safe way to hand a response back."""

    def enqueue_response(self, response: Response) -> None: ...

    def on_connection_close(self, connection_id: str, callback: Callable[[], object]) -> None:
        """Run ``callback`` once when the connection closes (see
        ``Request.on_connection_close``)."""
        ...


class PlaneProcessor(ResponseSink, Protocol):
    """A Processor as its channel's gauges see it."""

    response_queue_size: int
    idle_connections_killed: int


@dataclass(slots=True, eq=False)
class Request:
    """One request as it travels from a Processor to a handler, with its origin."""

    processor: ResponseSink
    connection_id: str
    listener_name: str
    security_protocol: SecurityProtocol
    principal: str
    client_host: str
    client_port: int
    header: RequestHeader
    frame: bytes
    plane: str = DATA_PLANE
    session: Any = None  # the connection's SaslSession on SASL listeners
    start_ns: int = field(default_factory=time.monotonic_ns)
    dequeue_ns: int = 0
    api_local_complete_ns: int = 0
    response_enqueue_ns: int = 0
    response_dequeue_ns: int = 0
    response_bytes: int = 0  # written to the client (0 for no answer)
    disconnected: bool = False  # the client closed its connection while this was in flight
    record_network_time: Callable[[int], None] | None = None
    """Set by the request quota: given the ns the network thread spent sending the
    response (Kafka's recordNetworkThreadTimeCallback)."""
    api_throttle_ms: Callable[[], int] | None = None
    """Set by a controller mutation quota (KIP-599): the throttle the request earned,
    asked when its response is made."""
    _on_disconnect: Callable[[], object] | None = None

    def on_disconnect(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` when the client closes the connection while this request is
        in flight (at once if it already has); a parked Fetch so lets go of it."""
        with _DISCONNECT_LOCK:
            if not self.disconnected:
                self._on_disconnect = callback
                return
        callback()

    def on_connection_close(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` once, on the network thread, when this request's connection
        closes for whatever reason (the client closed it, idle, an error, the broker's
        shutdown); at once, on the calling thread, if it already has. Kafka's
        ConnectionDisconnectListener, for the connections that ask: a share session or a
        telemetry client instance goes with its connection."""
        self.processor.on_connection_close(self.connection_id, callback)

    def mark_disconnected(self) -> None:
        """The client closed the connection: run the callback registered, if any."""
        with _DISCONNECT_LOCK:
            if self.disconnected:
                return
            self.disconnected = True
            callback, self._on_disconnect = self._on_disconnect, None
        if callback is not None:
            callback()


@dataclass(slots=True, eq=False)
class Response:
    """Frame pieces to write for ``request``; ``None`` writes nothing but unmutes."""

    request: Request
    pieces: list[Transferable] | None
    close_connection: bool = False
    throttle_ms: int = 0
    """A client quota's throttle (KIP-219): the connection reads nothing for this long
    after the response was handed over."""


class ResponseThrottler(Protocol):
    """Client quotas as the response path sees them (KIP-219)."""

    def throttle_time_ms(self, request: Request, body: Any, response_bytes: int) -> int:
        """Record what answering ``request`` (decoded as ``body``) with ``response_bytes``
        costs the client's quotas; the time (ms) the client is throttled for it."""
        ...


class _Shutdown:
    pass


SHUTDOWN = _Shutdown()


class RequestChannel:
    """A bounded request queue for one plane, and the path back to each Processor."""

    def __init__(self, plane: Plane) -> None:
        self.plane = plane
        self.queue_size = plane.queue_size
        self._queue: queue.Queue[Request | _Shutdown] = queue.Queue(maxsize=plane.queue_size)
        self.processors: list[PlaneProcessor] = []  # the plane's Processors, for the gauges
        self.throttler: ResponseThrottler | None = None
        """Client quotas, set on the data plane (the control plane is never throttled)."""
        self._on_processor: dict[int, Callable[[Request], None]] = {}
        self._on_processor_max_bytes = 0

    def serve_on_processors(
        self, api_keys: Iterable[int], handle: Callable[[Request], None], max_bytes: int
    ) -> None:
        """Handle requests of ``api_keys`` of at most ``max_bytes`` with ``handle`` on the
        Processor that read them (larger ones are queued)."""
        for key in api_keys:
            self._on_processor[key] = handle
        self._on_processor_max_bytes = max_bytes

    def register_gauges(self, metrics: BrokerMetrics) -> None:
        """The plane's KIP-291 gauges: its request queue, its Processors' response queues
        and the idle connections they closed."""
        name = self.plane.name
        metrics.register_gauge(
            self.plane.request_queue_size_metric,
            f"Requests waiting in the {name}-plane request queue",
            lambda: float(self.size),
        )
        metrics.register_gauge(
            self.plane.response_queue_size_metric,
            f"Responses waiting in the {name}-plane response queues",
            lambda: float(sum(p.response_queue_size for p in list(self.processors))),
        )
        metrics.register_gauge(
            self.plane.expired_connections_killed_metric,
            f"Idle connections the {name}-plane processors closed",
            lambda: float(sum(p.idle_connections_killed for p in list(self.processors))),
        )

    def send_request(self, request: Request) -> None:
        """Enqueue a request, blocking while the queue is full; one of an API served on the
        Processors, and small enough, is handled at once, on the calling thread."""
        handle = self._on_processor.get(request.header.api_key)
        if handle is None or len(request.frame) > self._on_processor_max_bytes:
            self._queue.put(request)
            return
        request.dequeue_ns = time.monotonic_ns()
        handle(request)

    def receive_request(self, timeout: float | None = None) -> Request | _Shutdown | None:
        """Next request, ``SHUTDOWN``, or ``None`` when ``timeout`` passed with nothing."""
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
        if isinstance(item, Request):
            item.dequeue_ns = time.monotonic_ns()
        return item

    def send_response(self, response: Response) -> None:
        """Hand a response to the Processor that owns the request's connection."""
        response.request.response_enqueue_ns = time.monotonic_ns()
        response.request.processor.enqueue_response(response)

    def send_shutdown(self, handlers: int) -> None:
        """Wake ``handlers`` handler threads with the shutdown marker."""
        for _ in range(handlers):
            self._queue.put(SHUTDOWN)

    @property
    def size(self) -> int:
        """Requests waiting in the queue (RequestQueueSize)."""
        return self._queue.qsize()
