"""Broker metric samples for ``kplane loadtest``: scrape ``/metrics`` now, parse afterwards.

The scraper thread only stores the raw exposition text with its time, so parsing costs nothing
while latencies are measured. ``parse_scrape`` keeps every kplane gauge (queue sizes, idle
fractions) and the cumulative ``_sum``/``_count`` of a few RequestMetrics histograms per
request and plane. Metrics are named by their Kafka MBean name (``RequestQueueSize``) with
their labels in Prometheus form: ``RequestQueueTimeMs_sum{plane="data",request="Produce"}``.
The gauges the load's clients pushed (KIP-714) are kept too, by the name the broker exposes
them under and their client id and own labels:
``org_apache_kafka_producer_request_latency_avg{client_id="kplane-loadtest-0"}``.
"""

from __future__ import annotations

import http.client
import threading
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from kplane.broker.metrics import metric_name

SCRAPE_INTERVAL_S = 1.0
"""The default: rendering the broker's metrics holds its interpreter for milliseconds, which a
controller request arriving meanwhile waits for (measured: every 100 ms doubled the
separated p99)."""
SCRAPE_TIMEOUT_S = 2.0
MBEANS = (
    ("network", "RequestChannel", "RequestQueueSize"),
    ("network", "RequestChannel", "ResponseQueueSize"),
    ("network", "RequestChannel", "ControlPlaneRequestQueueSize"),
    ("network", "RequestChannel", "ControlPlaneResponseQueueSize"),
    ("network", "SocketServer", "NetworkProcessorAvgIdlePercent"),
    ("network", "SocketServer", "ControlPlaneNetworkProcessorAvgIdlePercent"),
    ("server", "KafkaRequestHandlerPool", "RequestHandlerAvgIdlePercent"),
    ("server", "KafkaRequestHandlerPool", "ControlPlaneRequestHandlerAvgIdlePercent"),
    ("network", "RequestMetrics", "RequestQueueTimeMs"),
    ("network", "RequestMetrics", "LocalTimeMs"),
    ("network", "RequestMetrics", "TotalTimeMs"),
)
KAFKA_NAMES = {metric_name(*mbean): mbean[2] for mbean in MBEANS}
"""Prometheus name -> Kafka MBean name, for the metrics kept."""
HISTOGRAM_SUFFIXES = ("_sum", "_count")
CLIENT_METRIC_PREFIX = "org_apache_kafka_"
"""The metrics Kafka clients push (KIP-714), as the broker exposes them."""
CLIENT_LABELS_DROPPED = ("client_instance_id", "client_software_name", "client_software_version")


@dataclass(frozen=True)
class Sample:
    """One metric value at one time (unix seconds)."""

    time: float
    metric: str
    value: float


def parse_scrape(at: float, text: str, labels: Mapping[str, str] | None = None) -> list[Sample]:
    """The samples of one scrape taken at ``at``: gauges of ``KAFKA_NAMES`` and the
    ``_sum``/``_count`` of its histograms, and the clients' pushed gauges, with ``labels``
    added to their own (a cluster's ``broker``); everything else is dropped."""
    extra = dict(labels or {})
    samples = []
    for family in text_string_to_metric_families(text):
        if family.name.startswith(CLIENT_METRIC_PREFIX) and family.type == "gauge":
            for s in family.samples:
                own = {k: v for k, v in s.labels.items() if k not in CLIENT_LABELS_DROPPED}
                metric = family.name + _labels({**own, **extra})
                samples.append(Sample(at, metric, float(s.value)))
            continue
        kafka_name = KAFKA_NAMES.get(family.name)
        if kafka_name is None or family.type not in ("gauge", "histogram"):
            continue
        for s in family.samples:
            suffix = s.name[len(family.name) :]
            if family.type == "histogram" and suffix not in HISTOGRAM_SUFFIXES:
                continue
            name = kafka_name + suffix + _labels({**s.labels, **extra})
            samples.append(Sample(at, name, float(s.value)))
    return samples


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def split_metric(metric: str) -> tuple[str, dict[str, str]]:
    """``TotalTimeMs_sum{plane="data",request="Produce"}`` -> the name and its labels."""
    name, _, rest = metric.partition("{")
    labels = {}
    for item in rest.rstrip("}").split(","):
        key, sep, value = item.partition("=")
        if sep:
            labels[key] = value.strip('"')
    return name, labels


def scrape(url: str) -> str:
    """One scrape of a broker's ``/metrics`` (OSError or HTTPException when it fails)."""
    with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as response:
        return str(response.read().decode("utf-8"))


class Scraper:
    """A daemon thread fetching ``url`` about every ``interval`` seconds until ``stop``.

    Once a scrape is due it waits (at most one more interval) for ``nudge()``: the fake
    controller nudges half a period after each send, so when the broker answers in time a
    scrape's work in it falls between two controller requests instead of delaying one; when
    the answer is late the scrape does not wait for it (which would sample the request queue
    only just after it drained).
    """

    def __init__(self, url: str, interval: float = SCRAPE_INTERVAL_S) -> None:
        self.url = url
        self.interval = interval
        self.scrapes: list[tuple[float, str]] = []
        self.failures = 0
        self._stop = threading.Event()
        self._nudge = threading.Event()
        self._thread = threading.Thread(target=self._run, name="loadtest-scraper", daemon=True)

    def start(self) -> None:
        """Start scraping, unless already stopped."""
        if not self._stop.is_set():
            self._thread.start()

    def nudge(self) -> None:
        """A good moment: scrape now if a scrape is due."""
        self._nudge.set()

    def stop(self) -> list[Sample]:
        """Stop scraping; every sample taken, parsed now."""
        self._stop.set()
        self._nudge.set()
        if self._thread.ident is not None:
            self._thread.join(SCRAPE_TIMEOUT_S + 1.0)
        return [sample for at, text in self.scrapes for sample in parse_scrape(at, text)]

    def _run(self) -> None:
        due = time.monotonic()
        while not self._stop.is_set():
            self._stop.wait(due - time.monotonic())
            self._nudge.clear()
            self._nudge.wait(self.interval)
            if self._stop.is_set():
                return
            due = time.monotonic() + self.interval
            self._scrape()

    def _scrape(self) -> None:
        at = time.time()
        try:
            self.scrapes.append((at, scrape(self.url)))
        except (OSError, http.client.HTTPException):
            self.failures += 1
