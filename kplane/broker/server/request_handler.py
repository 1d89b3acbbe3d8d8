"""RequestHandlerPool: ``num.io.threads`` threads taking requests off a RequestChannel."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable

import structlog

from kplane.broker.logging_setup import exception_reason
from kplane.broker.network.plane_priority import ControlPlanePriority
from kplane.broker.network.request_channel import SHUTDOWN, Request, RequestChannel, Response

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
        priority: ControlPlanePriority | None = None,
    ) -> None:
        self.channel = channel
        self._priority = priority  # the data plane's pool yields to control requests
        self._handle = handle
        self._on_idle = on_idle
        self._threads: list[threading.Thread] = []
        self._ids = itertools.count()
        self._started = False
        self._lock = threading.Lock()
        self._retiring: set[str] = set()
        self._add(num_threads)

    def _add(self, count: int) -> None:
        for _ in range(count):
            thread = threading.Thread(
                target=self._run,
                name=self.channel.plane.thread_name("request-handler", next(self._ids)),
                daemon=True,
            )
            self._threads.append(thread)
            if self._started:
                thread.start()

    @property
    def size(self) -> int:
        """Number of handler threads."""
        return len(self._threads)

    def start(self) -> None:
        """Start every handler thread."""
        with self._lock:
            self._started = True
            for thread in self._threads:
                thread.start()

    def resize(self, num_threads: int) -> None:
        """Grow or shrink to ``num_threads`` (KIP-226): new threads start at once; extra
        ones finish the request in hand and exit, the queue keeps every other request."""
        with self._lock:
            change = num_threads - len(self._threads)
            if change > 0:
                self._add(change)
            elif change < 0:
                leaving = self._threads[num_threads:]
                self._threads = self._threads[:num_threads]
                # Each leaving thread sees it is retired after its current request (or
                # within the 0.3 s receive timeout) and exits; no request is dropped.
                self._retiring.update(t.name for t in leaving)
        log.info("request handler pool resized", plane=self.channel.plane.name, threads=num_threads)

    def _run(self) -> None:
        name = threading.current_thread().name
        priority = self._priority
        if priority is not None:
            priority.enter_data_thread()
        while name not in self._retiring:
            wait_start = time.monotonic_ns()
            item = self.channel.receive_request(timeout=0.3)
            idle = time.monotonic_ns() - wait_start
            if item is SHUTDOWN:
                return
            busy_start = time.monotonic_ns()
            if isinstance(item, Request):
                if priority is not None:
                    priority.yield_to_control()  # data plane: a control request goes first
                try:
                    self._handle(item)
                except Exception as exc:  # past KafkaApis' own answer: close, never silence
                    log.warning(
                        "closing connection: request handler failed",
                        connection=item.connection_id,
                        api_key=item.header.api_key,
                        reason=exception_reason(exc),
                    )
                    log.debug("request handler failed: traceback", exc_info=exc)
                    self.channel.send_response(Response(item, None, close_connection=True))
                item.api_local_complete_ns = time.monotonic_ns()
            if self._on_idle is not None:
                self._on_idle(idle, idle + time.monotonic_ns() - busy_start)
        with self._lock:
            self._retiring.discard(name)

    def shutdown(self) -> None:
        """Stop every thread after the requests already taken."""
        started = [t for t in self._threads if t.ident is not None]
        self.channel.send_shutdown(len(started) + len(self._retiring))
        for thread in started:
            thread.join(timeout=5)
