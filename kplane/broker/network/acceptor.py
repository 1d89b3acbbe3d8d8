"""Acceptor: one thread per listener that accepts sockets and hands them to Processors."""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading

import structlog

from kplane.broker.config.endpoint import EndPoint
from kplane.broker.network.processor import Processor

log = structlog.get_logger(__name__)


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
    ) -> None:
        self.endpoint = endpoint
        self._sock = sock
        self.processors = processors  # replaced whole (never mutated) on a resize
        self._send_buffer_bytes = send_buffer_bytes
        self._receive_buffer_bytes = receive_buffer_bytes
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._sock, selectors.EVENT_READ)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._running = True
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)

    @property
    def bound_port(self) -> int:
        """The port actually bound (differs from the config when it asked for port 0)."""
        return int(self._sock.getsockname()[1])

    def start(self) -> None:
        """Start accepting."""
        self._thread.start()

    def _run(self) -> None:
        while self._running:
            for key, _ in self._selector.select(timeout=1.0):
                if key.fileobj is self._wake_r:
                    continue
                self._accept_all()
        self._selector.close()

    def _accept_all(self) -> None:
        while self._running:
            try:
                conn, addr = self._sock.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                log.warning("accept failed", listener=self.endpoint.listener_name, error=str(exc))
                return
            self._configure(conn)
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
        """Stop accepting and close the listening socket."""
        self._running = False
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._sock.close()
        self._wake_r.close()
        self._wake_w.close()
