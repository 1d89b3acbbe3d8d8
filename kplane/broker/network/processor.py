"""Processor: a thread with its own uvloop event loop that owns many connections.

Each connection is a ``KafkaConnection``, an asyncio BufferedProtocol adapting the sans-IO
``ServerConnection`` (``protocol/connection.py``: frames, headers, the SASL gate, muting):
the socket is read where it says (the Processor's read buffer, or a large frame's own
bytes), each request it yields goes on the RequestChannel, the responses handlers hand
back are written, and reading pauses when it asks.

A request the Processor handles itself (Produce) is answered within the pass that read
it, and the connection's next request is taken in the same pass: a pipelining client's
requests are handled back to back, up to ``RESPONSES_PER_PASS``, and their responses
written together when the pass ends, one write a connection.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import itertools
import math
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar, cast

import structlog
import uvloop

from kplane.broker.config.endpoint import EndPoint
from kplane.broker.network.connection_quotas import ConnectionQuotas, client_host
from kplane.broker.network.memory_pool import FrameMemory, MemoryPool
from kplane.broker.network.plane_priority import ControlPlanePriority
from kplane.broker.network.region_writer import RegionWriter
from kplane.broker.network.request_channel import Request, RequestChannel, Response
from kplane.broker.network.tls import ServerTls
from kplane.broker.security.principal_mapping import ANONYMOUS, NoMatchingRuleError
from kplane.broker.security.sasl import PRE_AUTH_APIS, SASL_PROTOCOLS, SaslSession
from kplane.broker.utils.file_region import has_regions, iter_bytes, materialize
from kplane.broker.utils.interval_log import IntervalWarning
from kplane.protocol.connection import CONNECTION_CLOSED, Close, RequestReady, ServerConnection

log = structlog.get_logger(__name__)
CLOSE_GRACE_S = 0.01
"""How long a stopping Processor's loop runs on after closing its connections (their last
writes and closes go out)."""

T = TypeVar("T")
RequestObserver = Callable[[Request, int], None]
IdleObserver = Callable[[int, int], None]

WRITE_BUFFER_HIGH = 1 << 20
"""Unsent response bytes past which a connection takes no new request (Kafka mutes a
channel until its send completes); it takes requests again below ``WRITE_BUFFER_LOW``."""
WRITE_BUFFER_LOW = 1 << 18
READ_BUFFER_SIZE = 256 << 10
"""A Processor's read buffer, shared by its connections (as uvloop's own read buffer is)."""
RESPONSES_PER_PASS = 16
"""Responses to requests handled on the Processor's own thread that one pass sends before
it yields to the loop's other work; the rest go in passes of their own."""


class KafkaConnection(asyncio.BufferedProtocol):
    """One client connection: an asyncio BufferedProtocol driving a sans-IO
    ``ServerConnection`` (framing, the SASL gate, muting, end of stream) and acting on its
    events."""

    def __init__(self, processor: Processor, connection_id: str, peer: tuple[str, int]) -> None:
        self.processor = processor
        self.connection_id = connection_id
        self.peer = peer
        self.transport: asyncio.Transport | None = None
        pool = processor.memory_pool
        self.memory = FrameMemory(pool) if pool is not None else None
        sasl = processor.endpoint.security_protocol in SASL_PROTOCOLS
        self.connection = ServerConnection(
            processor.max_request_size,
            processor.is_known_api,
            allocate=self.memory.allocate if self.memory is not None else None,
            frame_complete=self.memory.frame_complete if self.memory is not None else None,
            pre_auth_apis=PRE_AUTH_APIS if sasl else None,
            pre_auth_max_size=processor.sasl_max_receive_size,
        )
        self.in_flight: Request | None = None
        self.last_active = time.monotonic()
        self.frame_since: float | None = None  # when the unfinished frame began to arrive
        self._frame: int | None = None  # which frame that is
        self.closing = False
        self.principal = ANONYMOUS
        self.session = SaslSession() if sasl else None
        self._reading_paused = False
        self.watched_fd: int | None = None
        self.writer: RegionWriter | None = None  # sending a response with file regions
        self.paced: tuple[Iterator[bytes | memoryview], Response] | None = None
        self.throttled = False  # muted for a client quota's throttle time (KIP-219)
        self.unwritten: list[bytes | memoryview] = []
        """Responses sent during the Processor's pass, written when it ends."""
        self.close_callbacks: list[Callable[[], object]] | None = None
        """Run once when the connection is forgotten (``Processor.on_connection_close``)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH, low=WRITE_BUFFER_LOW)  # type: ignore[attr-defined]
        priority = self.processor.control_priority
        if priority is not None:  # data-plane threads yield while this socket has bytes
            self.watched_fd = transport.get_extra_info("socket").fileno()
            priority.watch(self.watched_fd)
        tls = self.processor.tls
        if tls is not None:
            try:
                self.principal = tls.principal_of(transport.get_extra_info("ssl_object"))
            except NoMatchingRuleError as exc:
                log.warning(
                    "closing connection: SSL authentication failed",
                    connection=self.connection_id,
                    listener=self.processor.endpoint.listener_name,
                    reason=str(exc),
                )
                self.close()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.connection.get_buffer(self.processor.read_buffer)

    def buffer_updated(self, nbytes: int) -> None:
        self.processor.yield_to_control()
        self.processor.run_pass(self._read, nbytes)

    def _read(self, nbytes: int) -> None:
        self.last_active = time.monotonic()
        if self.session is not None:
            self.connection.authenticated = self.session.authenticated
        self.connection.buffer_updated(self.processor.read_buffer, nbytes)
        self._received()

    def _received(self) -> None:
        """Act on what came in; when the memory pool refused the frame's bytes, wait for
        room."""
        self._track_frame()
        if self.memory is not None and self.connection.awaiting_memory:
            self.memory.wait(self._memory_released)
        self.dispatch()

    def _track_frame(self, restart: bool = False) -> None:
        """Start the clock of a frame that has begun to arrive (``restart``: again, for
        one the connection did not read while a request was in flight)."""
        frame = self.connection.unfinished_frame
        if frame is None:
            self.frame_since = None
        elif restart or frame != self._frame or self.frame_since is None:
            self.frame_since = time.monotonic()
        self._frame = frame

    def _memory_released(self) -> None:
        """Called from whichever thread released memory: retry on this loop."""
        with contextlib.suppress(RuntimeError):  # the Processor has stopped
            self.processor.loop.call_soon_threadsafe(self._retry_frame)

    def _retry_frame(self) -> None:
        if self.transport is None or self.closing or not self.connection.awaiting_memory:
            return
        self.connection.retry_frame()
        self._received()

    def pause_writing(self) -> None:
        """The transport holds more unsent bytes than ``WRITE_BUFFER_HIGH``."""
        self.connection.pause_writing()

    def resume_writing(self) -> None:
        """The client read enough: go on with a paced response, or take the next request."""
        self.connection.resume_writing()
        if self.paced is not None:
            self._write_paced()
        else:
            self.dispatch()

    def eof_received(self) -> bool:
        """The client closed its side: requests it already sent are still processed (an
        acks=0 Produce is never dropped), then the connection closes. A request parked
        in a purgatory for the client's sake (a long-poll Fetch) is let go at once."""
        self.connection.receive_data(b"")
        if self.in_flight is not None:
            self.in_flight.mark_disconnected()
        if self.processor.tls is not None:
            return False  # TLS has no half-close: connection_lost finishes the queued requests
        return not self.connection.idle

    def dispatch(self) -> None:
        """Act on the connection's next event: send a request to the RequestChannel,
        close, or wait; stop reading while complete frames wait, so a pipelining client
        is held back."""
        if self.closing or self.processor.draining:
            return
        if self.throttled:
            self._pace_reading()
            return
        event = self.connection.next_event()
        if type(event) is RequestReady:
            self.in_flight = request = self._request(event)
            if self.processor.control_priority is not None:
                self.processor.control_priority.begin()
            self.processor.channel.send_request(request)
        elif type(event) is Close:
            log.warning(
                "closing connection: " + event.reason,
                connection=self.connection_id,
                listener=self.processor.endpoint.listener_name,
                **event.details,
            )
            self.close()
            return
        elif event is CONNECTION_CLOSED:
            self.close()
            return
        self._pace_reading()

    def _request(self, event: RequestReady) -> Request:
        session = self.session
        endpoint = self.processor.endpoint
        return Request(
            processor=self.processor,
            connection_id=self.connection_id,
            listener_name=endpoint.listener_name,
            security_protocol=endpoint.security_protocol,
            principal=session.principal if session is not None else self.principal,
            session=session,
            client_host=self.peer[0],
            client_port=self.peer[1],
            header=event.header,
            frame=event.frame,
            plane=self.processor.channel.plane.name,
        )

    def _pace_reading(self) -> None:
        if self.transport is None:
            return
        hold = self.connection.wants_reading_paused or self.throttled
        if hold and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()
        elif not hold and self._reading_paused:
            self._reading_paused = False
            self.transport.resume_reading()
        else:
            return
        priority = self.processor.control_priority
        if priority is not None and self.watched_fd is not None:
            priority.pause_watch(self.watched_fd, self._reading_paused)

    def send(self, response: Response) -> None:
        """Write a response for the in-flight request (at the end of the pass, unless it
        holds file regions, is paced or waits behind unsent bytes), then unmute."""
        if response.request is not self.in_flight:
            return
        request = response.request
        request.response_dequeue_ns = time.monotonic_ns()
        pieces = response.pieces
        if pieces and self.transport is not None and not self.closing:
            request.response_bytes = sum(map(len, pieces))
            regions = has_regions(pieces)
            paced = self.processor.tls is not None and request.response_bytes > WRITE_BUFFER_HIGH
            if regions or paced:
                self.flush()  # what the pass holds goes first
            if regions and self._can_sendfile():
                self.writer = RegionWriter(
                    self.processor.loop,
                    self.transport.get_extra_info("socket").fileno(),
                    pieces,
                    functools.partial(self._written, response),
                )
                self.writer.start()
                return
            if paced:
                self.paced = (iter_bytes(pieces), response)
                self._write_paced()
                return
            try:
                data = materialize(pieces) if regions else cast(list[bytes | memoryview], pieces)
            except OSError as exc:
                self._written(response, exc)
                return
            if not self.unwritten and self.transport.get_write_buffer_size():
                # behind unsent bytes the transport only queues it, and says at once
                # (pause_writing) when the bound is passed, before the next request
                self.transport.writelines(data)
            else:
                if not self.unwritten:
                    self.processor.unwritten.append(self)
                self.unwritten += data
        self._sent(response)

    def flush(self) -> None:
        """Write the responses the pass held back (dropped when the socket is gone)."""
        if self.unwritten:
            if self.transport is not None:
                self.transport.writelines(self.unwritten)
            self.unwritten = []

    def _write_paced(self) -> None:
        """Hand a large TLS response to the transport a piece at a time, while it is below
        ``WRITE_BUFFER_HIGH``; ``resume_writing`` goes on. (uvloop's TLS transport encrypts
        whatever it is given at once, into a buffer as large as all of it, zeroed as it
        grows: a 50 MB Fetch would cost a fresh 50 MB twice.) File regions are read as
        they are reached."""
        assert self.paced is not None and self.transport is not None
        pieces, response = self.paced
        self.last_active = time.monotonic()
        try:
            for piece in pieces:
                self.transport.write(piece)
                if self.connection.writing_paused:
                    return
        except OSError as exc:
            self.paced = None
            self._written(response, exc)
            return
        self.paced = None
        self._sent(response)

    def frame_overdue(self, deadline: float) -> bool:
        """A frame began to arrive before ``deadline`` and is still not whole, while the
        connection was reading (no request in flight)."""
        return (
            self.frame_since is not None
            and self.frame_since < deadline
            and self.in_flight is None
            and not self.closing
        )

    def idle_since(self) -> float:
        """Since when nothing moved on this connection (monotonic seconds): never while a
        handler holds its request, but a response the client stopped reading counts."""
        if self.writer is not None:
            return self.writer.last_progress
        if self.in_flight is not None and self.paced is None:
            return math.inf
        return self.last_active

    def _can_sendfile(self) -> bool:
        """A plain socket with nothing of the transport's still unsent."""
        assert self.transport is not None
        return self.processor.tls is None and self.transport.get_write_buffer_size() == 0

    def _written(self, response: Response, exc: OSError | None) -> None:
        self.writer = None
        if exc is None:
            self._sent(response)
            return
        if isinstance(exc, ConnectionError):  # the client went away mid-response
            log.info(
                "connection closed by the client during a response",
                connection=self.connection_id,
                listener=self.processor.endpoint.listener_name,
            )
            self.close()
            return
        log.warning(
            "closing connection: could not send a response",
            connection=self.connection_id,
            listener=self.processor.endpoint.listener_name,
            api_key=response.request.header.api_key,
            error=str(exc) or type(exc).__name__,
        )
        self.close()

    def _drop_response(self) -> None:
        """Give up the response being written by a writer or paced (the connection is
        closing)."""
        self.paced = None
        if self.writer is not None:
            self.writer.abort()
            self.writer = None

    def _sent(self, response: Response) -> None:
        self.processor.observe(response.request)
        self.last_active = time.monotonic()
        self.in_flight = None
        self.connection.response_sent()
        self._track_frame(restart=True)
        if response.close_connection:
            self.close()
            return
        if self.session is not None:
            self.connection.authenticated = self.session.authenticated
        if response.throttle_ms > 0:
            self._throttle(response)
        self.dispatch()

    def _throttle(self, response: Response) -> None:
        """Mute the connection until the throttle time, counted from when the response was
        handed over, has passed (Kafka's ThrottledChannel)."""
        until_ns = response.request.response_enqueue_ns + response.throttle_ms * 1_000_000
        delay_s = (until_ns - time.monotonic_ns()) / 1e9
        if delay_s <= 0:
            return
        self.throttled = True
        self.processor.loop.call_later(delay_s, self._end_throttling)

    def _end_throttling(self) -> None:
        self.throttled = False
        self.last_active = time.monotonic()
        if self.transport is not None and not self.closing:
            self.dispatch()

    def close(self, abort: bool = False) -> None:
        """Close the connection (pending bytes already written are flushed first, unless
        ``abort``: dropped, as for a client that stopped reading); the frames not handed
        to a handler give their memory back."""
        self.closing = True
        if abort:
            self.unwritten = []
        else:
            self.flush()
        self._drop_response()
        self.processor.release(self.connection.drop_unread())
        if self.transport is None:
            self.processor.forget(self)
        elif abort:
            self.transport.abort()
        else:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        priority = self.processor.control_priority
        if priority is not None and self.watched_fd is not None:
            priority.unwatch(self.watched_fd)
            self.watched_fd = None
        self.transport = None
        self._drop_response()
        self.connection.receive_data(b"")
        if self.in_flight is not None:
            self.in_flight.mark_disconnected()
        if self.closing or self.connection.idle:
            self.processor.release(self.connection.drop_unread())
            self.processor.forget(self)


class Processor:
    """A network thread: runs connections of one listener on its own event loop."""

    def __init__(
        self,
        processor_id: int,
        endpoint: EndPoint,
        channel: RequestChannel,
        max_request_size: int,
        connections_max_idle_ms: int,
        is_known_api: Callable[[int], bool],
        on_response_sent: RequestObserver | None = None,
        on_idle: IdleObserver | None = None,
        tls: ServerTls | None = None,
        priority: ControlPlanePriority | None = None,
        memory_pool: MemoryPool | None = None,
        sasl_max_receive_size: int = 524288,
        quotas: ConnectionQuotas | None = None,
    ) -> None:
        self.id = processor_id
        self.memory_pool = memory_pool
        self.quotas = quotas
        self.sasl_max_receive_size = sasl_max_receive_size
        self.tls = tls
        # The control plane's Processor announces its requests; data-plane ones yield to them.
        control = channel.plane.is_control
        self.control_priority = priority if control else None
        self.data_priority = None if control else priority
        self.endpoint = endpoint
        self.channel = channel
        self.max_request_size = max_request_size
        self.connections_max_idle_ms = connections_max_idle_ms
        self.is_known_api = is_known_api
        self._on_response_sent = on_response_sent
        self._on_idle = on_idle
        self.connections: dict[str, KafkaConnection] = {}
        self._arriving: collections.deque[tuple[socket.socket, tuple[str, int]]]
        self._arriving = collections.deque()  # accepted, not yet registered on the loop
        self._closed = False  # the loop ended: nothing more is registered
        self._count = 0
        self._count_lock = threading.Lock()
        self._frame_overdue = IntervalWarning(
            "closing connection: request frame not completed within connections.max.idle.ms"
        )
        self._over_limit = IntervalWarning(
            "closing connection: broker-wide max.connections exceeded"
        )
        self._index = itertools.count()
        self.busy_ns = 0
        self.idle_connections_killed = 0
        self.response_queue_size = 0  # responses handed over, not yet written (thread-safe)
        self._in_pass = False
        self._ready: collections.deque[Response] = collections.deque()
        """Responses to requests this thread handled during the pass, still to send."""
        self.unwritten: list[KafkaConnection] = []
        """Connections with responses held back until the pass ends."""
        self.draining = False
        self.loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        self.read_buffer = memoryview(bytearray(READ_BUFFER_SIZE))
        """Where this loop's connections read, unless into a large frame's own bytes."""
        self._thread = threading.Thread(
            target=self._run,
            name=channel.plane.thread_name(
                "network-thread", f"{endpoint.listener_name}-{processor_id}"
            ),
            daemon=True,
        )
        self._stopped = threading.Event()

    @property
    def connection_count(self) -> int:
        """Connections owned or being handed over (for least-loaded selection)."""
        return self._count

    def start(self) -> None:
        """Start the thread and its loop."""
        self._thread.start()

    def _run(self) -> None:
        if self.data_priority is not None:
            self.data_priority.enter_data_thread()
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._tick, time.monotonic_ns())
        try:
            self.loop.run_forever()
        finally:
            self._release_all()
            self.loop.close()
            self._stopped.set()

    def _release_all(self) -> None:
        """The loop ended: the connections it did not forget, and those accepted but not
        registered, give their slots back."""
        with self._count_lock:
            self._closed = True
            arriving, self._arriving = list(self._arriving), collections.deque()
        for conn in list(self.connections.values()):
            self.forget(conn)
        for sock, addr in arriving:
            sock.close()
            self._release_slot(addr[0])

    def _tick(self, last_ns: int) -> None:
        now_ns = time.monotonic_ns()
        if self._on_idle is not None:
            elapsed = now_ns - last_ns
            self._on_idle(max(0, elapsed - self.busy_ns), elapsed)
        self.busy_ns = 0
        self._close_idle_connections()
        self._close_excess_connection()
        self._frame_overdue.flush()
        self._over_limit.flush()
        self.loop.call_later(1.0, self._tick, now_ns)

    def _close_idle_connections(self) -> None:
        """Close connections idle for ``connections.max.idle.ms``, and those whose request
        frame has not arrived whole that long after its first byte (a trickle keeps a
        connection from being idle, not its frame from being late)."""
        if self.connections_max_idle_ms <= 0:
            return
        deadline = time.monotonic() - self.connections_max_idle_ms / 1000.0
        for conn in list(self.connections.values()):
            if conn.idle_since() < deadline:
                log.debug("closing idle connection", connection=conn.connection_id)
                self.idle_connections_killed += 1
                conn.close(abort=True)
            elif conn.frame_overdue(deadline):
                received, size = conn.connection.frame_progress
                self._frame_overdue.record(
                    connection=conn.connection_id,
                    listener=self.endpoint.listener_name,
                    received=received,
                    size=size,
                    limit_ms=self.connections_max_idle_ms,
                )
                self.idle_connections_killed += 1
                conn.close(abort=True)

    def _close_excess_connection(self) -> None:
        """Kafka's closeExcessConnections: past ``max.connections`` because an exempt
        listener took a connection, close this thread's least recently used one."""
        listener = self.endpoint.listener_name
        if self.quotas is None or not self.quotas.max_connections_exceeded(listener):
            return
        open_ = [c for c in self.connections.values() if not c.closing]
        if open_:
            conn = min(open_, key=lambda c: c.last_active)
            self._over_limit.record(connection=conn.connection_id, listener=listener)
            conn.close()

    def accept(self, sock: socket.socket, addr: tuple[str, int]) -> None:
        """Adopt an accepted socket (called from the Acceptor thread); the Processor now
        owns its connection slot."""
        with self._count_lock:
            closed = self._closed
            if not closed:
                self._count += 1
                self._arriving.append((sock, addr))
        if closed:
            sock.close()
            self._release_slot(addr[0])
            return
        with contextlib.suppress(RuntimeError):  # stopping: _release_all has it
            self.loop.call_soon_threadsafe(self._register_arriving)

    def _register_arriving(self) -> None:
        while True:
            with self._count_lock:
                if not self._arriving:
                    return
                sock, addr = self._arriving.popleft()
            self._register(sock, addr)

    def _release_slot(self, host: str) -> None:
        if self.quotas is not None:
            self.quotas.dec(self.endpoint.listener_name, client_host(host))

    def _register(self, sock: socket.socket, addr: tuple[str, int]) -> None:
        local = sock.getsockname()
        connection_id = f"{local[0]}:{local[1]}-{addr[0]}:{addr[1]}-{next(self._index)}"
        conn = KafkaConnection(self, connection_id, (addr[0], addr[1]))
        self.connections[connection_id] = conn

        async def adopt() -> None:
            try:
                await self.loop.connect_accepted_socket(
                    lambda: conn, sock, ssl=self.tls.context if self.tls else None
                )
            except (OSError, ssl.SSLError) as exc:
                log.warning(
                    "closing connection: TLS handshake failed"
                    if self.tls is not None
                    else "could not adopt connection",
                    connection=connection_id,
                    listener=self.endpoint.listener_name,
                    error=str(exc) or type(exc).__name__,
                )
                self.forget(conn)
                sock.close()

        self.loop.create_task(adopt())

    def forget(self, conn: KafkaConnection) -> None:
        """Drop a closed connection, give its slot back and run its close callbacks."""
        with self._count_lock:
            if self.connections.pop(conn.connection_id, None) is None:
                return
            self._count -= 1
            callbacks, conn.close_callbacks = conn.close_callbacks, None
        self._release_slot(conn.peer[0])
        for callback in callbacks or ():
            try:
                callback()
            except Exception as exc:  # one listener's fault neither stops the others nor us
                log.warning(
                    "connection close callback failed",
                    connection=conn.connection_id,
                    listener=self.endpoint.listener_name,
                    reason=f"{type(exc).__name__}: {exc}",
                )

    def on_connection_close(self, connection_id: str, callback: Callable[[], object]) -> None:
        """Run ``callback`` once, on this thread, when the connection is forgotten (closed
        for whatever reason, or the Processor stopped); at once, on the calling thread
        (any), when it already was. Nothing is kept for connections that ask nothing."""
        with self._count_lock:
            conn = self.connections.get(connection_id)
            if conn is not None:
                if conn.close_callbacks is None:
                    conn.close_callbacks = []
                conn.close_callbacks.append(callback)
                return
        callback()

    def enqueue_response(self, response: Response) -> None:
        """Hand a response to this Processor (thread-safe; from its own thread, for a
        request it handled itself: sent within the pass, or in the loop's next one)."""
        with self._count_lock:
            self.response_queue_size += 1
        if threading.get_ident() == self._thread.ident:
            if self._in_pass:
                self._ready.append(response)
            else:
                self.loop.call_soon(self._send_response, response)
            return
        # A closed loop means the connection is gone with its Processor.
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self._send_response, response)

    def release(self, size: int) -> None:
        """Give the memory of a request frame back to the pool."""
        if self.memory_pool is not None:
            self.memory_pool.release(size)

    def run_pass(self, action: Callable[[T], None], arg: T) -> None:
        """Run ``action(arg)`` as one pass of this loop: send the responses to the requests
        it handled on this thread, and to those their sending took on (a pipelining
        client's next ones), up to ``RESPONSES_PER_PASS``; then write each connection's at
        once. A pass within a pass is part of it."""
        if self._in_pass:
            action(arg)
            return
        self._in_pass = True
        started = time.monotonic_ns()
        try:
            action(arg)
            ready = self._ready
            for _ in range(RESPONSES_PER_PASS):
                if not ready:
                    break
                self._send(ready.popleft())
        finally:
            self._in_pass = False
            unwritten, self.unwritten = self.unwritten, []
            for conn in unwritten:
                conn.flush()
            while self._ready:
                self.loop.call_soon(self._send_response, self._ready.popleft())
            self.busy_ns += time.monotonic_ns() - started

    def _send_response(self, response: Response) -> None:
        self.run_pass(self._send, response)

    def _send(self, response: Response) -> None:
        with self._count_lock:
            self.response_queue_size -= 1
        self.release(len(response.request.frame))
        self.yield_to_control()
        conn = self.connections.get(response.request.connection_id)
        if conn is not None:
            conn.send(response)
        if self.control_priority is not None:
            self.control_priority.end()

    def yield_to_control(self) -> None:
        """A data-plane Processor pauses while a control-plane request is in flight."""
        if self.data_priority is not None:
            self.data_priority.yield_to_control()

    def observe(self, request: Request) -> None:
        """Report a completed request to the metrics observer (and its network time to the
        request quota)."""
        now_ns = time.monotonic_ns()
        if request.record_network_time is not None:
            request.record_network_time(now_ns - request.response_dequeue_ns)
        if self._on_response_sent is not None:
            self._on_response_sent(request, now_ns)

    def in_flight(self) -> int:
        """Requests of this Processor's connections waiting for an answer."""
        return sum(1 for c in list(self.connections.values()) if c.in_flight is not None)

    def stop_reading(self) -> None:
        """Take no new requests off any connection (shutdown drains what is in flight)."""

        def pause_all() -> None:
            self.draining = True
            for conn in self.connections.values():
                if conn.transport is not None and not conn.closing:
                    conn.transport.pause_reading()

        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(pause_all)

    def shutdown(self) -> None:
        """Close every connection and stop the loop."""
        self.begin_shutdown()
        self.await_shutdown()

    def begin_shutdown(self) -> None:
        """Ask the loop to close every connection and stop; returns at once."""
        if self.loop.is_closed():
            return

        def close_all() -> None:
            for conn in list(self.connections.values()):
                conn.close()
            self.loop.call_later(CLOSE_GRACE_S, self.loop.stop)

        try:
            self.loop.call_soon_threadsafe(close_all)
        except RuntimeError:
            return

    def await_shutdown(self, timeout_s: float = 5.0) -> None:
        """Wait for the loop that ``begin_shutdown`` stopped."""
        if not self.loop.is_closed():
            self._stopped.wait(timeout=timeout_s)
