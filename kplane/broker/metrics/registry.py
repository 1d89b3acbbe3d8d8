"""One metrics registry per broker, with Kafka's metric names, for Prometheus.

Naming rule
-----------
A Kafka (Yammer) MBean ``kafka.<domain>:type=<Type>,name=<Name>[,key=value...]`` becomes the
Prometheus metric ``kafka_<domain>_<type>_<name>``, lowercased, with the remaining MBean keys as
labels -- what jmx_exporter's usual Kafka rules (``lowercaseOutputName: true``) produce::

    kafka.network:type=RequestMetrics,name=TotalTimeMs,request=Produce
        -> kafka_network_requestmetrics_totaltimems{request="Produce",plane="data"}
    kafka.network:type=RequestChannel,name=RequestQueueSize
        -> kafka_network_requestchannel_requestqueuesize
    kafka.server:type=KafkaRequestHandlerPool,name=RequestHandlerAvgIdlePercent
        -> kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent
    kafka.network:type=SocketServer,name=NetworkProcessorAvgIdlePercent,networkProcessor=0
        -> kafka_network_socketserver_networkprocessoravgidlepercent{networkProcessor="0",...}

``metric_name(domain, type_, name)`` applies the rule; every metric name in kplane goes through
it. Kafka's kinds map to Prometheus kinds as follows:

* Kafka *histograms* of milliseconds (``RequestQueueTimeMs`` ...) are Prometheus histograms with
  ``_bucket{le=...}``/``_sum``/``_count`` (buckets ``MS_BUCKETS``, 0.1 ms .. 30 s), rather than
  jmx_exporter's percentile gauges; use ``histogram_quantile()`` for percentiles.
* Kafka *meters* (``RequestsPerSec``, ``ErrorsPerSec``) are Prometheus counters, exposed with the
  ``_total`` suffix (jmx_exporter exports the meter's ``Count``); use ``rate()`` for the per-second
  value.
* Kafka *gauges* are gauges. ``*AvgIdlePercent`` gauges are fractions in ``[0, 1]``, as in Kafka.

Labels on request metrics: ``request`` (Kafka's API name: ``Produce``, ``Fetch``, ``Metadata``,
``LeaderAndIsr`` ...) and ``plane`` (``data`` or ``control``, KIP-291).

Use
---
One ``BrokerMetrics`` per broker. Several brokers run in one test process, so nothing here
touches prometheus_client's global default registry; ``BrokerMetrics.registry`` is the broker's
own ``CollectorRegistry`` (other code may register further prometheus_client metrics on it).
"""

from __future__ import annotations

import bisect
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from kplane.broker.metrics.idle import IdleMeter

__all__ = [
    "ACCEPTOR_BLOCKED_PERCENT",
    "BROKER_CONNECTION_ACCEPT_RATE",
    "CONNECTION_ACCEPT_RATE",
    "CONNECTION_ACCEPT_THROTTLE_TIME",
    "CONNECTION_COUNT",
    "CONNECTION_CREATION_TOTAL",
    "CONTROL_PLANE",
    "CONTROL_PLANE_ACCEPTOR_BLOCKED_PERCENT",
    "CONTROL_PLANE_EXPIRED_CONNECTIONS_KILLED_COUNT",
    "CONTROL_PLANE_NETWORK_PROCESSOR_AVG_IDLE_PERCENT",
    "CONTROL_PLANE_REQUEST_HANDLER_AVG_IDLE_PERCENT",
    "CONTROL_PLANE_REQUEST_QUEUE_SIZE",
    "CONTROL_PLANE_RESPONSE_QUEUE_SIZE",
    "DATA_PLANE",
    "ERRORS_PER_SEC",
    "MS_BUCKETS",
    "NETWORK_PROCESSOR_AVG_IDLE_PERCENT",
    "REQUESTS_PER_SEC",
    "REQUEST_HANDLER_AVG_IDLE_PERCENT",
    "REQUEST_QUEUE_SIZE",
    "REQUEST_TIME_METRICS",
    "RESPONSE_QUEUE_SIZE",
    "BrokerMetrics",
    "IdleMeter",
    "known_doc",
    "metric_name",
]

log = logging.getLogger(__name__)

_INVALID = re.compile(r"[^a-zA-Z0-9_]")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def metric_name(domain: str, type_: str, name: str) -> str:
    """Prometheus name of the Kafka MBean ``kafka.<domain>:type=<type_>,name=<name>``.

    ``domain`` may be given with or without the ``kafka.`` prefix; characters that Prometheus
    does not allow become ``_``.

    >>> metric_name("network", "RequestMetrics", "TotalTimeMs")
    'kafka_network_requestmetrics_totaltimems'
    >>> metric_name("kafka.server", "KafkaRequestHandlerPool", "RequestHandlerAvgIdlePercent")
    'kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent'
    """
    parts = []
    for part in (domain.removeprefix("kafka."), type_, name):
        if not part:
            raise ValueError(f"empty part in metric name {(domain, type_, name)!r}")
        parts.append(_INVALID.sub("_", part))
    return "kafka_" + "_".join(parts).lower()


DATA_PLANE = "data"
CONTROL_PLANE = "control"

# Milliseconds, 0.1 ms .. 30 s (+Inf is implicit).
MS_BUCKETS: tuple[float, ...] = (
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0,
    250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 30000.0,
)  # fmt: skip

# Kafka's RequestMetrics histograms, in record_request's argument order.
REQUEST_TIME_METRICS: tuple[tuple[str, str], ...] = tuple(
    (metric_name("network", "RequestMetrics", mbean), doc)
    for mbean, doc in (
        ("RequestQueueTimeMs", "Time the request waited in the request queue (ms)."),
        ("LocalTimeMs", "Time the request was processed at the leader (ms)."),
        ("RemoteTimeMs", "Time the request waited for other brokers or purgatory (ms)."),
        ("ResponseQueueTimeMs", "Time the response waited in the response queue (ms)."),
        ("ResponseSendTimeMs", "Time to send the response (ms)."),
        ("TotalTimeMs", "Total time from receiving the request to sending the response (ms)."),
    )
)
REQUESTS_PER_SEC = metric_name("network", "RequestMetrics", "RequestsPerSec")
ERRORS_PER_SEC = metric_name("network", "RequestMetrics", "ErrorsPerSec")

REQUEST_QUEUE_SIZE = metric_name("network", "RequestChannel", "RequestQueueSize")
RESPONSE_QUEUE_SIZE = metric_name("network", "RequestChannel", "ResponseQueueSize")
CONTROL_PLANE_REQUEST_QUEUE_SIZE = metric_name(
    "network", "RequestChannel", "ControlPlaneRequestQueueSize"
)
CONTROL_PLANE_RESPONSE_QUEUE_SIZE = metric_name(
    "network", "RequestChannel", "ControlPlaneResponseQueueSize"
)
NETWORK_PROCESSOR_AVG_IDLE_PERCENT = metric_name(
    "network", "SocketServer", "NetworkProcessorAvgIdlePercent"
)
CONTROL_PLANE_NETWORK_PROCESSOR_AVG_IDLE_PERCENT = metric_name(
    "network", "SocketServer", "ControlPlaneNetworkProcessorAvgIdlePercent"
)
REQUEST_HANDLER_AVG_IDLE_PERCENT = metric_name(
    "server", "KafkaRequestHandlerPool", "RequestHandlerAvgIdlePercent"
)
CONTROL_PLANE_REQUEST_HANDLER_AVG_IDLE_PERCENT = metric_name(
    "server", "KafkaRequestHandlerPool", "ControlPlaneRequestHandlerAvgIdlePercent"
)
EXPIRED_CONNECTIONS_KILLED_COUNT = metric_name(
    "network", "SocketServer", "ExpiredConnectionsKilledCount"
)
CONTROL_PLANE_EXPIRED_CONNECTIONS_KILLED_COUNT = metric_name(
    "network", "SocketServer", "ControlPlaneExpiredConnectionsKilledCount"
)

# Connections per listener (Kafka's socket-server-metrics, tagged listener) and the
# connection quotas of KIP-402 (ConnectionQuotas).
CONNECTION_COUNT = metric_name("server", "socket-server-metrics", "connection-count")
CONNECTION_CREATION_TOTAL = metric_name(
    "server", "socket-server-metrics", "connection-creation-total"
)
CONNECTION_ACCEPT_RATE = metric_name("server", "socket-server-metrics", "connection-accept-rate")
BROKER_CONNECTION_ACCEPT_RATE = metric_name(
    "server", "socket-server-metrics", "broker-connection-accept-rate"
)
CONNECTION_ACCEPT_THROTTLE_TIME = metric_name(
    "server", "socket-server-metrics", "connection-accept-throttle-time"
)
ACCEPTOR_BLOCKED_PERCENT = metric_name("network", "Acceptor", "AcceptorBlockedPercent")
CONTROL_PLANE_ACCEPTOR_BLOCKED_PERCENT = metric_name(
    "network", "Acceptor", "ControlPlaneAcceptorBlockedPercent"
)

_KNOWN_DOCS: dict[str, str] = {
    REQUEST_QUEUE_SIZE: "Requests waiting in the data-plane request queue.",
    RESPONSE_QUEUE_SIZE: "Responses waiting in the data-plane response queues.",
    CONTROL_PLANE_REQUEST_QUEUE_SIZE: "Requests waiting in the control-plane request queue.",
    CONTROL_PLANE_RESPONSE_QUEUE_SIZE: "Responses waiting in the control-plane response queue.",
    NETWORK_PROCESSOR_AVG_IDLE_PERCENT: "Idle fraction (0..1) of a data-plane network processor.",
    CONTROL_PLANE_NETWORK_PROCESSOR_AVG_IDLE_PERCENT: (
        "Idle fraction (0..1) of the control-plane network processor."
    ),
    REQUEST_HANDLER_AVG_IDLE_PERCENT: (
        "Average idle fraction (0..1) of the data-plane request handler pool."
    ),
    CONTROL_PLANE_REQUEST_HANDLER_AVG_IDLE_PERCENT: (
        "Idle fraction (0..1) of the control-plane request handler."
    ),
    CONNECTION_COUNT: "Open connections of the listener.",
    CONNECTION_CREATION_TOTAL: "Connections the listener accepted.",
    CONNECTION_ACCEPT_RATE: "Connections accepted per second on the listener (KIP-402).",
    BROKER_CONNECTION_ACCEPT_RATE: (
        "Connections accepted per second on the listeners the broker-wide rate holds (KIP-402)."
    ),
    CONNECTION_ACCEPT_THROTTLE_TIME: (
        "Average delay (ms) of the listener's throttled connections, out of non-zero delays."
    ),
    ACCEPTOR_BLOCKED_PERCENT: (
        "Fraction (0..1) of the last 30 s the listener's Acceptor waited for a connection "
        "slot or the creation rate."
    ),
    CONTROL_PLANE_ACCEPTOR_BLOCKED_PERCENT: (
        "Fraction (0..1) of the last 30 s the control-plane Acceptor waited for a connection "
        "slot or the creation rate."
    ),
}


def known_doc(name: str) -> str:
    """The help text of one of the metric names above."""
    return _KNOWN_DOCS[name]


_NB = len(MS_BUCKETS) + 1  # buckets per histogram, +Inf last
_LE = [floatToGoString(b) for b in MS_BUCKETS] + ["+Inf"]


class _RequestStats:
    """Counts for one (request, plane): six histograms and a request counter, one lock."""

    __slots__ = ("counts", "lock", "requests", "sums")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts = [[0] * _NB for _ in REQUEST_TIME_METRICS]  # per-bucket, not cumulative
        self.sums = [0.0] * len(REQUEST_TIME_METRICS)
        self.requests = 0


class _RequestMetricsCollector(Collector):
    """RequestMetrics histograms, RequestsPerSec and ErrorsPerSec.

    Kept outside prometheus_client's Histogram objects because the hot path is cheaper with
    one lock and one ``bisect`` per histogram than with a lock per bucket increment.
    """

    def __init__(self) -> None:
        self.stats: dict[tuple[str, str], _RequestStats] = {}
        self.errors: dict[tuple[str, str], int] = {}
        self.lock = threading.Lock()  # guards creation in ``stats`` and all of ``errors``

    def stats_for(self, api: str, plane: str) -> _RequestStats:
        key = (api, plane)
        with self.lock:
            s = self.stats.get(key)
            if s is None:
                s = self.stats[key] = _RequestStats()
            return s

    def collect(self) -> Iterator[Metric]:
        with self.lock:
            items = sorted(self.stats.items())
            errors = sorted(self.errors.items())
        snap = []
        for key, s in items:
            with s.lock:
                snap.append((key, [list(c) for c in s.counts], list(s.sums), s.requests))
        for i, (name, doc) in enumerate(REQUEST_TIME_METRICS):
            fam = HistogramMetricFamily(name, doc, labels=("request", "plane"))
            for key, counts, sums, _ in snap:
                cumulative = 0
                buckets = []
                for le, c in zip(_LE, counts[i], strict=True):
                    cumulative += c
                    buckets.append((le, float(cumulative)))
                fam.add_metric(key, buckets, sums[i])
            yield fam
        req = CounterMetricFamily(
            REQUESTS_PER_SEC, "Requests handled (Kafka meter RequestsPerSec).",
            labels=("request", "plane"),
        )  # fmt: skip
        for key, _, _, n in snap:
            req.add_metric(key, float(n))
        yield req
        err = CounterMetricFamily(
            ERRORS_PER_SEC, "Responses with an error code (Kafka meter ErrorsPerSec).",
            labels=("request", "error"),
        )  # fmt: skip
        for ekey, n in errors:
            err.add_metric(ekey, float(n))
        yield err


class _GaugeFamily:
    __slots__ = ("doc", "fns", "labelnames")

    def __init__(self, doc: str, labelnames: tuple[str, ...]) -> None:
        self.doc = doc
        self.labelnames = labelnames
        self.fns: dict[tuple[str, ...], Callable[[], float]] = {}


class _CallbackGaugeCollector(Collector):
    """Gauges whose values are read from callables at scrape time."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.families: dict[str, _GaugeFamily] = {}

    def collect(self) -> Iterator[Metric]:
        with self.lock:
            snap = [
                (name, fam.doc, fam.labelnames, list(fam.fns.items()))
                for name, fam in sorted(self.families.items())
            ]
        for name, doc, labelnames, fns in snap:
            out = GaugeMetricFamily(name, doc, labels=labelnames)
            for values, fn in fns:
                try:
                    value = float(fn())
                except Exception:
                    log.exception("gauge %s%r failed; sample left out", name, values)
                    continue
                out.add_metric(values, value)
            yield out


class BrokerMetrics:
    """All metrics of one broker, on its own ``CollectorRegistry``."""

    def __init__(self, *, clock: Callable[[], int] = time.monotonic_ns) -> None:
        """``clock`` (monotonic nanoseconds) drives the idle meters; tests pass a fake one."""
        self.registry = CollectorRegistry()
        self._clock = clock
        self._requests = _RequestMetricsCollector()
        self._gauges = _CallbackGaugeCollector()
        self._idle_meters: dict[tuple[str, tuple[tuple[str, str], ...]], IdleMeter] = {}
        self._idle_lock = threading.Lock()
        # Hot-path cache; dict reads are atomic under the GIL, misses go through the lock.
        self._stats: dict[tuple[str, str], _RequestStats] = {}
        self._reserved = {name for name, _ in REQUEST_TIME_METRICS}
        self._reserved |= {REQUESTS_PER_SEC, ERRORS_PER_SEC}
        self.registry.register(self._requests)
        self.registry.register(self._gauges)

    # -- request metrics (hot path) ------------------------------------------------------------

    def record_request(
        self,
        api: str,
        plane: str,
        request_queue_ms: float,
        local_ms: float,
        remote_ms: float,
        response_queue_ms: float,
        response_send_ms: float,
        total_ms: float,
    ) -> None:
        """Record one completed request: Kafka's RequestMetrics for ``api`` on ``plane``."""
        s = self._stats.get((api, plane))
        if s is None:
            s = self._stats[(api, plane)] = self._requests.stats_for(api, plane)
        b = MS_BUCKETS
        bl = bisect.bisect_left  # Prometheus buckets are ``le``: first bound >= value
        with s.lock:
            s.requests += 1
            c0, c1, c2, c3, c4, c5 = s.counts
            c0[bl(b, request_queue_ms)] += 1
            c1[bl(b, local_ms)] += 1
            c2[bl(b, remote_ms)] += 1
            c3[bl(b, response_queue_ms)] += 1
            c4[bl(b, response_send_ms)] += 1
            c5[bl(b, total_ms)] += 1
            sums = s.sums
            sums[0] += request_queue_ms
            sums[1] += local_ms
            sums[2] += remote_ms
            sums[3] += response_queue_ms
            sums[4] += response_send_ms
            sums[5] += total_ms

    def record_error(self, api: str, error_name: str) -> None:
        """Count a response of ``api`` carrying ``error_name`` (e.g. ``NOT_LEADER_OR_FOLLOWER``)."""
        key = (api, error_name)
        c = self._requests
        with c.lock:
            c.errors[key] = c.errors.get(key, 0) + 1

    # -- gauges --------------------------------------------------------------------------------

    def register_gauge(
        self,
        name: str,
        doc: str,
        fn: Callable[[], float],
        labels: Mapping[str, str] | None = None,
    ) -> None:
        """Export ``fn()`` as gauge ``name{labels}``, read at every scrape.

        Several callables may share a name with different label values; all of them must use
        the same label names. Registering the same name and labels again replaces the callable.
        ``fn`` runs on the scrape thread: keep it cheap and thread-safe. If it raises, that
        sample is left out of the scrape (and logged).
        """
        labels = dict(labels or {})
        self._check_name(name)
        for key in labels:
            if not _LABEL_NAME.match(key) or key.startswith("__"):
                raise ValueError(f"invalid label name {key!r} for {name}")
        labelnames = tuple(sorted(labels))
        values = tuple(str(labels[k]) for k in labelnames)
        g = self._gauges
        with g.lock:
            fam = g.families.get(name)
            if fam is None:
                fam = g.families[name] = _GaugeFamily(doc, labelnames)
            elif fam.labelnames != labelnames:
                raise ValueError(
                    f"gauge {name} has labels {list(fam.labelnames)}, got {list(labelnames)}"
                )
            fam.fns[values] = fn

    def unregister_gauge(self, name: str, labels: Mapping[str, str] | None = None) -> bool:
        """Remove the gauge ``name{labels}`` (an idle meter too); True if it existed."""
        labels = dict(labels or {})
        labelnames = tuple(sorted(labels))
        values = tuple(str(labels[k]) for k in labelnames)
        with self._idle_lock:
            self._idle_meters.pop((name, tuple(zip(labelnames, values, strict=True))), None)
        g = self._gauges
        with g.lock:
            fam = g.families.get(name)
            if fam is None or fam.labelnames != labelnames or values not in fam.fns:
                return False
            del fam.fns[values]
            if not fam.fns:
                del g.families[name]
            return True

    def idle_meter(
        self,
        name: str,
        labels: Mapping[str, str] | None = None,
        *,
        pool_size: int | None = None,
        doc: str | None = None,
    ) -> IdleMeter:
        """The idle meter exported as gauge ``name{labels}`` (created on first use).

        Every caller with the same name and labels gets the same meter, so each thread of a
        request-handler pool can call this and report to the shared meter; ``pool_size``
        (when given) sets how many threads share it, see ``IdleMeter``.
        """
        labels = dict(labels or {})
        key = (name, tuple(sorted((k, str(v)) for k, v in labels.items())))
        with self._idle_lock:
            meter = self._idle_meters.get(key)
            if meter is None:
                meter = IdleMeter(pool_size=pool_size or 1, clock=self._clock)
                self.register_gauge(
                    name,
                    doc or _KNOWN_DOCS.get(name, "Idle fraction (0..1) over the last 30 s."),
                    meter.fraction,
                    labels,
                )
                self._idle_meters[key] = meter
            elif pool_size is not None:
                meter.set_pool_size(pool_size)
            return meter

    def _check_name(self, name: str) -> None:
        if not re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", name):
            raise ValueError(f"invalid metric name {name!r}")
        if name in self._reserved:
            raise ValueError(f"metric name {name} is already used by request metrics")

    # -- introspection (tests, tools) ----------------------------------------------------------

    def request_count(self, api: str, plane: str) -> int:
        """RequestsPerSec count recorded so far for (api, plane)."""
        s = self._requests.stats.get((api, plane))
        if s is None:
            return 0
        with s.lock:
            return s.requests

    def apis(self) -> Iterable[tuple[str, str]]:
        """(api, plane) pairs recorded so far."""
        with self._requests.lock:
            return sorted(self._requests.stats)
