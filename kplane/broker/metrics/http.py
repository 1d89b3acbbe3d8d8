"""Prometheus exposition of one broker's metrics over HTTP.

``GET /metrics`` answers with the text exposition format (or OpenMetrics when the scraper asks
for it in ``Accept``); every other path is a 404. The server runs ``serve_forever`` on a daemon
thread and handles each scrape on its own daemon thread; ``stop()`` shuts it down and closes the
listening socket, so tests can start and stop many of them.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric

from kplane.broker.metrics.registry import BrokerMetrics

__all__ = ["MetricsHttpServer"]

log = logging.getLogger(__name__)

METRICS_PATH = "/metrics"


class _YieldingRegistry(CollectorRegistry):
    """``registry`` as an encoder reads it, calling ``pause`` before every metric family: a
    scrape renders for milliseconds, and a control-plane request should not wait for it."""

    def __init__(self, registry: CollectorRegistry, pause: Callable[[], None]) -> None:
        super().__init__(auto_describe=False)
        self._registry = registry
        self._pause = pause

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            self._pause()
            yield family


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        registry: CollectorRegistry,
        pause: Callable[[], None] | None,
    ) -> None:
        host = address[0]
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.registry = registry if pause is None else _YieldingRegistry(registry, pause)
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = 10  # seconds a scraper may take to send its request
    server_version = "kplane-metrics"

    def do_GET(self) -> None:
        self._respond(with_body=True)

    def do_HEAD(self) -> None:
        self._respond(with_body=False)

    def _respond(self, *, with_body: bool) -> None:
        path = urlsplit(self.path).path
        if path.rstrip("/") != METRICS_PATH:
            self._send(404, "text/plain; charset=utf-8", b"not found; try /metrics\n", with_body)
            return
        try:
            encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
            body = encoder(self.server.registry)
        except Exception:
            log.exception("metrics scrape failed")
            self._send(500, "text/plain; charset=utf-8", b"scrape failed\n", with_body)
            return
        self._send(200, content_type, body, with_body)

    def _send(self, code: int, content_type: str, body: bytes, with_body: bool) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if with_body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("metrics http %s: " + format, self.address_string(), *args)


class MetricsHttpServer:
    """Serves ``metrics`` at ``http://host:port/metrics``; port 0 picks a free port.
    ``pause`` (the control plane's ``yield_to_control``) runs between metric families."""

    def __init__(
        self,
        metrics: BrokerMetrics,
        host: str = "127.0.0.1",
        port: int = 0,
        pause: Callable[[], None] | None = None,
    ) -> None:
        self.metrics = metrics
        self._pause = pause
        self.host = host
        self._requested_port = port
        self._bound_port: int | None = None
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def port(self) -> int:
        """The bound port once started (the requested port before)."""
        return self._bound_port if self._bound_port is not None else self._requested_port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{METRICS_PATH}"

    def start(self) -> None:
        with self._lock:
            if self._server is not None:
                raise RuntimeError("metrics HTTP server already started")
            server = _Server((self.host, self._requested_port), self.metrics.registry, self._pause)
            thread = threading.Thread(
                target=server.serve_forever,
                kwargs={"poll_interval": 0.05},
                name=f"metrics-http-{server.server_address[1]}",
                daemon=True,
            )
            thread.start()
            self._server, self._thread = server, thread
            self._bound_port = server.server_address[1]

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving and close the socket; safe to call twice or before ``start``."""
        with self._lock:
            server, thread = self._server, self._thread
            self._server = self._thread = None
        if server is None:
            return
        server.shutdown()  # returns once serve_forever has exited
        server.server_close()
        if thread is not None:
            thread.join(timeout)

    def __enter__(self) -> MetricsHttpServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
