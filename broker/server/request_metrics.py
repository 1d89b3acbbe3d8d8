"""Turns a completed Request's timestamps into Kafka's request metrics."""

from __future__ import annotations

from functools import cache

from broker.metrics import BrokerMetrics
from broker.network.request_channel import Request
from protocol.api import API_NAMES

NS_PER_MS = 1_000_000.0


@cache
def request_name(api_key: int) -> str:
    """Kafka's request name for metrics, e.g. ``ApiVersions`` for key 18."""
    raw = API_NAMES.get(api_key)
    if raw is None:
        return f"Unknown{api_key}"
    return "".join(part.capitalize() for part in raw.split("_"))


class RequestMetricsObserver:
    """Records RequestQueueTimeMs ... TotalTimeMs per API and plane for each request."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self.metrics = metrics

    def on_response_sent(self, request: Request, sent_ns: int) -> None:
        """Called by the Processor once the response was written."""
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
