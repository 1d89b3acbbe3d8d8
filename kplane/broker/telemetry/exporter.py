"""ClientMetricsExporter: the metrics clients pushed (KIP-714), on the broker's Prometheus
registry.

An OTLP metric ``org.apache.kafka.producer.node.request.latency.avg`` becomes the Prometheus
family ``org_apache_kafka_producer_node_request_latency_avg``: a gauge, or a non-monotonic
sum, is a gauge; a monotonic sum a counter (``_total``); a histogram a histogram. Every sample
is labelled with the pushing client's ``client_id``, ``client_instance_id``,
``client_software_name`` and ``client_software_version`` and with the data point's own
attributes (dots become underscores; one named like a client label is left out). A metric
whose name would be one of the broker's (``kafka_*``) is left out. Delta
points (the broker asks for delta temporality, as Kafka does) are added up, cumulative ones
replace the value. A client's series go when it terminates, or once three of its push
intervals pass without a push.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client.core import Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from kplane.broker.utils.interval_log import IntervalWarning
from kplane.protocol.otlp import Attributes, MetricKind, MetricsData

__all__ = ["CLIENT_LABELS", "MAX_SERIES_PER_CLIENT", "ClientMetricsExporter", "prometheus_name"]

CLIENT_LABELS = (
    "client_id",
    "client_instance_id",
    "client_software_name",
    "client_software_version",
)
MAX_SERIES_PER_CLIENT = 5000
"""Series kept per client instance; a push naming more has the rest left out (logged)."""
BROKER_PREFIX = "kafka_"
"""The broker's own metric names (``metric_name``): a pushed metric named so is left out
(logged), so that no client can add to or corrupt the broker's families."""

_INVALID = re.compile(r"[^a-zA-Z0-9_]")


def prometheus_name(otlp_name: str) -> str:
    """An OTLP metric or attribute name as a Prometheus name (``.`` and the like -> ``_``)."""
    name = _INVALID.sub("_", otlp_name)
    return "_" + name if name[:1].isdigit() else name


@dataclass
class _Histogram:
    bounds: tuple[float, ...]
    buckets: list[int]
    count: int
    sum: float


_SeriesKey = tuple[str, tuple[tuple[str, str], ...]]


@dataclass
class _Client:
    labels: dict[str, str]
    expires: float
    kinds: dict[str, str] = field(default_factory=dict)  # family -> prometheus type
    values: dict[_SeriesKey, float] = field(default_factory=dict)
    histograms: dict[_SeriesKey, _Histogram] = field(default_factory=dict)

    def series(self) -> int:
        return len(self.values) + len(self.histograms)


class ClientMetricsExporter(Collector):
    """The pushed metrics of every live client instance, collected at each scrape."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._clients: dict[str, _Client] = {}
        self._dropped = IntervalWarning("client metrics series left out")

    def record(
        self,
        instance_id: str,
        client_labels: Mapping[str, str],
        data: MetricsData,
        keep_s: float,
    ) -> None:
        """Add one push of ``instance_id``, whose series then live ``keep_s`` seconds."""
        labels = {k: client_labels.get(k, "") for k in CLIENT_LABELS}
        labels["client_instance_id"] = instance_id
        dropped = 0
        with self._lock:
            client = self._clients.get(instance_id)
            if client is None:
                client = self._clients[instance_id] = _Client(labels, 0.0)
            client.labels = labels
            client.expires = self._clock() + keep_s
            for metric in data.metrics():
                family = prometheus_name(metric.name)
                if family.startswith(BROKER_PREFIX):
                    dropped += len(metric.points) + len(metric.histogram_points)
                    continue
                if metric.kind is MetricKind.HISTOGRAM:
                    kind = "histogram"
                elif metric.kind is MetricKind.SUM and metric.monotonic:
                    kind = "counter"
                    family = family.removesuffix("_total")
                else:
                    kind = "gauge"
                if client.kinds.setdefault(family, kind) != kind:
                    continue  # the name changed kind: keep the first
                adds = metric.delta and metric.kind is not MetricKind.GAUGE
                for point in metric.points:
                    key = (family, _attributes(point.attributes))
                    if key not in client.values and client.series() >= MAX_SERIES_PER_CLIENT:
                        dropped += 1
                        continue
                    base = client.values.get(key, 0.0) if adds else 0.0
                    client.values[key] = base + point.value
                for hist in metric.histogram_points:
                    key = (family, _attributes(hist.attributes))
                    old = client.histograms.get(key)
                    if old is None and client.series() >= MAX_SERIES_PER_CLIENT:
                        dropped += 1
                        continue
                    if adds and old is not None and old.bounds == hist.bounds:
                        old.buckets = [
                            a + b for a, b in zip(old.buckets, hist.bucket_counts, strict=False)
                        ]
                        old.count += hist.count
                        old.sum += hist.sum or 0.0
                    else:
                        client.histograms[key] = _Histogram(
                            hist.bounds, list(hist.bucket_counts), hist.count, hist.sum or 0.0
                        )
        if dropped:
            self._dropped.record(
                client_instance_id=instance_id,
                series=dropped,
                reason=f"over {MAX_SERIES_PER_CLIENT} series, or named {BROKER_PREFIX}*",
            )

    def forget(self, instance_id: str) -> None:
        """Drop a client instance's series (it terminated or expired)."""
        with self._lock:
            self._clients.pop(instance_id, None)

    def clients(self) -> int:
        """Client instances whose series are exposed."""
        with self._lock:
            self._expire()
            return len(self._clients)

    def _expire(self) -> None:
        now = self._clock()
        for instance_id in [i for i, c in self._clients.items() if c.expires <= now]:
            del self._clients[instance_id]

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        with self._lock:
            self._expire()
            for client in self._clients.values():
                for (family, attrs), value in client.values.items():
                    kind = client.kinds[family]
                    metric = _family(families, family, kind)
                    if metric is None:
                        continue
                    sample = family + "_total" if kind == "counter" else family
                    metric.add_sample(sample, {**dict(attrs), **client.labels}, value)
                for (family, attrs), hist in client.histograms.items():
                    metric = _family(families, family, "histogram")
                    if metric is None:
                        continue
                    labels = {**dict(attrs), **client.labels}
                    running = 0
                    for bound, count in zip(
                        (*hist.bounds, float("inf")), hist.buckets, strict=False
                    ):
                        running += count
                        le = {**labels, "le": floatToGoString(bound)}
                        metric.add_sample(family + "_bucket", le, running)
                    metric.add_sample(family + "_count", labels, hist.count)
                    metric.add_sample(family + "_sum", labels, hist.sum)
        yield from families.values()


def _family(families: dict[str, Metric], name: str, kind: str) -> Metric | None:
    """The family ``name`` of this scrape; None when another client pushed it as another
    kind (the first one seen wins)."""
    metric = families.get(name)
    if metric is None:
        metric = families[name] = Metric(name, "Pushed by clients (KIP-714).", kind)
    return metric if metric.type == kind else None


def _attributes(attributes: Attributes) -> tuple[tuple[str, str], ...]:
    """A data point's attributes as label pairs, without those named like client labels."""
    out = {}
    for key, value in attributes:
        name = prometheus_name(key)
        if name and name not in CLIENT_LABELS and name != "le" and not name.startswith("__"):
            out[name] = value
    return tuple(sorted(out.items()))
