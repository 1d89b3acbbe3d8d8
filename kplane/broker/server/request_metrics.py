"""Turns a completed Request's timestamps into Kafka's request metrics."""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import cache

from kplane.broker.metrics import BrokerMetrics, metric_name
from kplane.broker.network.request_channel import Request
from kplane.protocol.api import API_NAMES

NS_PER_MS = 1_000_000.0


@cache
def request_name(api_key: int) -> str:
    """Kafka's request name for metrics, e.g. ``ApiVersions`` for key 18."""
    raw = API_NAMES.get(api_key)
    if raw is None:
        return f"Unknown{api_key}"
    return "".join(part.capitalize() for part in raw.split("_"))


INCOMING_BYTE_TOTAL = metric_name("server", "socket-server-metrics", "incoming-byte-total")
OUTGOING_BYTE_TOTAL = metric_name("server", "socket-server-metrics", "outgoing-byte-total")
FRAME_PREFIX = 4  # a request frame's size field


def _reader(counts: list[int], index: int) -> Callable[[], float]:
    return lambda: float(counts[index])


class RequestMetricsObserver:
    """Records RequestQueueTimeMs ... TotalTimeMs per API and plane for each request, and
    the bytes of requests and responses per listener (Kafka's socket-server-metrics
    incoming-byte-total and outgoing-byte-total): replication on the inter-broker listener,
    clients on theirs, the controller on its own."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self.metrics = metrics
        self._bytes: dict[str, list[int]] = {}
        self._lock = threading.Lock()

    def _count_bytes(self, listener: str, incoming: int, outgoing: int) -> None:
        with self._lock:
            counts = self._bytes.get(listener)
            if counts is None:
                counts = self._bytes[listener] = [0, 0]
                labels = {"listener": listener}
                for index, (name, doc) in enumerate(
                    (
                        (INCOMING_BYTE_TOTAL, "Bytes of requests read on the listener."),
                        (OUTGOING_BYTE_TOTAL, "Bytes of responses written on the listener."),
                    )
                ):
                    self.metrics.register_gauge(name, doc, _reader(counts, index), labels)
            counts[0] += incoming
            counts[1] += outgoing

    def on_response_sent(self, request: Request, sent_ns: int) -> None:
        """Called by the Processor once the response was written."""
        self._count_bytes(
            request.listener_name, len(request.frame) + FRAME_PREFIX, request.response_bytes
        )
        dequeue = request.dequeue_ns or request.start_ns
        enqueue = request.response_enqueue_ns or dequeue
        local_done = min(request.api_local_complete_ns or enqueue, enqueue)
        response_dequeue = request.response_dequeue_ns or enqueue
        self.metrics.record_request(
            request_name(request.header.api_key),
            request.plane,
            (dequeue - request.start_ns) / NS_PER_MS,
            (local_done - dequeue) / NS_PER_MS,
            (enqueue - local_done) / NS_PER_MS,
            (response_dequeue - enqueue) / NS_PER_MS,
            (sent_ns - response_dequeue) / NS_PER_MS,
            (sent_ns - request.start_ns) / NS_PER_MS,
        )
