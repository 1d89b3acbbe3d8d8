"""Acceptor: one thread per listener that accepts sockets and hands them to Processors.

Each accepted socket is counted by ``ConnectionQuotas`` first, which may make the Acceptor
wait (``max.connections``, the creation rates) or refuse it (``max.connections.per.ip``).
A connection over its address's creation rate (KIP-612) is closed once its throttle time
has passed, as Kafka's Acceptor delays it (the client does not reconnect at once); the
Acceptor keeps accepting meanwhile.
Out of descriptors or kernel memory, ``accept`` fails and the socket stays in the listen
backlog: the Acceptor pauses ``ACCEPT_BACKOFF_S`` before trying again instead of spinning,
and logs the failures once per interval with their count.
"""

from __future__ import annotations

import contextlib
import errno
import heapq
import itertools
import selectors
import socket
import threading
import time

from kplane.broker.config.endpoint import EndPoint
from kplane.broker.network.connection_quotas import (
    AcceptorStopped,
    ConnectionQuotas,
    ConnectionThrottled,
    TooManyConnections,
    client_host,
)
from kplane.broker.network.processor import Processor
from kplane.broker.utils.interval_log import IntervalWarning

ACCEPT_BACKOFF_S = 1.0
"""How long an Acceptor pauses when ``accept`` fails for want of a resource."""
OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_SELECT_TIMEOUT_S = 1.0


def bind_listener(endpoint: EndPoint, backlog: int = 512) -> socket.socket:
    """Bind and listen on ``endpoint``; an empty host binds every interface."""
    host = endpoint.host or ""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, endpoint.port))
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


class Acceptor:
    """Accepts connections on one listener and picks the least-loaded Processor for each."""

    def __init__(
        self,
        endpoint: EndPoint,
        sock: socket.socket,
        processors: list[Processor],
        thread_name: str,
        send_buffer_bytes: int = -1,
        receive_buffer_bytes: int = -1,
        quotas: ConnectionQuotas | None = None,
    ) -> None:
        self.endpoint = endpoint
        self._sock = sock
        self.processors = processors  # replaced whole (never mutated) on a resize
        self._send_buffer_bytes = send_buffer_bytes
        self._receive_buffer_bytes = receive_buffer_bytes
        self._quotas = quotas
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._sock, selectors.EVENT_READ)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._stopping = threading.Event()
        self._accept_failed = IntervalWarning("accept failed")
        self._refused = IntervalWarning("closing connection: too many connections from its address")
        self._setup_failed = IntervalWarning("closing connection: socket set-up failed")
        self._ip_throttled = IntervalWarning(
            "closing connection after its throttle: over its address's connection creation rate"
        )
        self._throttled: list[tuple[float, int, socket.socket]] = []  # (close at, seq, socket)
        self._seq = itertools.count()
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)

    @property
    def bound_port(self) -> int:
        """The port actually bound (differs from the config when it asked for port 0)."""
        return int(self._sock.getsockname()[1])

    def start(self) -> None:
        """Start accepting."""
        self._thread.start()

    def _running(self) -> bool:
        return not self._stopping.is_set()

    def _run(self) -> None:
        while self._running():
            ready = self._selector.select(timeout=self._select_timeout())
            out_of_resources = any(key.fileobj is self._sock for key, _ in ready) and (
                self._accept_all()
            )
            self._close_throttled(time.monotonic())
            for warning in (
                self._accept_failed,
                self._refused,
                self._setup_failed,
                self._ip_throttled,
            ):
                warning.flush()
            if out_of_resources:
                self._stopping.wait(ACCEPT_BACKOFF_S)
        self._selector.close()
        self._close_throttled(float("inf"))

    def _select_timeout(self) -> float:
        """Until the next throttled connection is due to close, at most a second."""
        if not self._throttled:
            return _SELECT_TIMEOUT_S
        return min(_SELECT_TIMEOUT_S, max(0.0, self._throttled[0][0] - time.monotonic()))

    def _close_throttled(self, now: float) -> None:
        """Close the throttled connections whose throttle time has passed (Kafka's
        closeThrottledConnections); all of them when the Acceptor stops."""
        while self._throttled and self._throttled[0][0] <= now:
            heapq.heappop(self._throttled)[2].close()

    def _accept_all(self) -> bool:
        """Accept every waiting connection; True when ``accept`` failed for want of a
        resource (the Acceptor pauses before trying again)."""
        listener = self.endpoint.listener_name
        while self._running():
            try:
                conn, addr = self._sock.accept()
            except BlockingIOError:
                return False
            except OSError as exc:
                out_of_resources = exc.errno in OUT_OF_RESOURCES
                self._accept_failed.record(
                    listener=listener,
                    error=str(exc),
                    paused_ms=int(ACCEPT_BACKOFF_S * 1000) if out_of_resources else 0,
                )
                return out_of_resources
            self._admit(conn, addr)
        return False

    def _admit(self, conn: socket.socket, addr: tuple[str, int]) -> None:
        """Count the connection (waiting for a slot), set it up, hand it to a Processor."""
        listener = self.endpoint.listener_name
        host = client_host(addr[0])
        if self._quotas is not None:
            try:
                self._quotas.inc(listener, host, self._running)
            except ConnectionThrottled as exc:
                self._ip_throttled.record(
                    listener=listener,
                    client_host=host,
                    connection_creation_rate=exc.limit,
                    throttle_ms=round(exc.throttle_ms),
                )
                close_at = time.monotonic() + exc.throttle_ms / 1000.0
                heapq.heappush(self._throttled, (close_at, next(self._seq), conn))
                return
            except TooManyConnections as exc:
                self._refused.record(listener=listener, client_host=host, limit=exc.limit)
                conn.close()
                return
            except AcceptorStopped:
                conn.close()
                return
        try:
            self._configure(conn)
        except OSError as exc:  # reset before it was set up
            self._setup_failed.record(listener=listener, client_host=host, error=str(exc))
            conn.close()
            if self._quotas is not None:
                self._quotas.dec(listener, host)
            return
        processor = min(self.processors, key=lambda p: p.connection_count)
        processor.accept(conn, addr)

    def _configure(self, conn: socket.socket) -> None:
        conn.setblocking(False)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._send_buffer_bytes > 0:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._send_buffer_bytes)
        if self._receive_buffer_bytes > 0:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._receive_buffer_bytes)

    def shutdown(self) -> None:
        """Stop accepting (a wait for a connection slot too) and close the listening
        socket."""
        self._stopping.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._quotas is not None:
            self._quotas.wake()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._sock.close()
        self._wake_r.close()
        self._wake_w.close()
