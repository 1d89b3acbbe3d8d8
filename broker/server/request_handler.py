"""RequestHandlerPool: ``num.io.threads`` threads taking requests off a RequestChannel."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import structlog

from broker.network.request_channel import SHUTDOWN, Request, RequestChannel

log = structlog.get_logger(__name__)

IdleRecorder = Callable[[int, int], None]


class RequestHandlerPool:
    """Handler threads for one plane; each hands requests to ``handle`` (KafkaApis)."""

    def __init__(
        self,
        channel: RequestChannel,
        handle: Callable[[Request], None],
        num_threads: int,
        on_idle: IdleRecorder | None = None,
    ) -> None:
        self.channel = channel
        self._handle = handle
        self._on_idle = on_idle
        self._threads: list[threading.Thread] = []
        prefix = "data-plane" if channel.plane == "data" else "control-plane"
        for i in range(num_threads):
            thread = threading.Thread(
                target=self._run, name=f"{prefix}-kafka-request-handler-{i}", daemon=True
            )
            self._threads.append(thread)

    @property
    def size(self) -> int:
        """Number of handler threads."""
        return len(self._threads)

    def start(self) -> None:
        """Start every handler thread."""
        for thread in self._threads:
            thread.start()

    def _run(self) -> None:
        while True:
            wait_start = time.monotonic_ns()
            item = self.channel.receive_request(timeout=0.3)
            idle = time.monotonic_ns() - wait_start
            if item is SHUTDOWN:
                return
            busy_start = time.monotonic_ns()
            if isinstance(item, Request):
                try:
                    self._handle(item)
                except Exception:
                    log.exception("request handler failed", api_key=item.header.api_key)
                item.api_local_complete_ns = time.monotonic_ns()
            if self._on_idle is not None:
                self._on_idle(idle, idle + time.monotonic_ns() - busy_start)

    def shutdown(self) -> None:
        """Stop every thread after the requests already taken."""
        started = [t for t in self._threads if t.ident is not None]
        self.channel.send_shutdown(len(started))
        for thread in started:
            thread.join(timeout=5)
