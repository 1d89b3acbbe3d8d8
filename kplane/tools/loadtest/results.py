"""What ``kplane loadtest`` writes: requests.parquet, samples.parquet and summary.json.

Column contract (read by ``kplane report``):

* ``requests.parquet``: scenario string, plane string (``control`` | ``data`` |
  ``propagation``), api string (``UpdateMetadata``, ``LeaderAndIsr``, ``Produce``,
  ``AlterPartitionReassignments``, ``ElectLeaders``), send_time double (unix s), latency_ms
  double, error string (null when it succeeded). Control rows are every controller request
  (in a cluster scenario, as the receiving broker's TotalTimeMs measured it); data rows are
  the sampled Produce messages; propagation rows are a cluster scenario's leader moves, from
  the request to the controller until every broker's Metadata shows it.
* ``samples.parquet``: scenario string, time double (unix s), metric string, value double
  (a cluster's metrics carry a ``broker`` label).

pyarrow (the ``report`` extra) is imported only when the files are written.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kplane.tools.loadtest.controller import ControlResult
from kplane.tools.loadtest.metrics import CLIENT_METRIC_PREFIX, Sample, split_metric
from kplane.tools.loadtest.producers import LoadResult
from kplane.tools.loadtest.scenarios import Target

REQUEST_COLUMNS = ("scenario", "plane", "api", "send_time", "latency_ms", "error")
SAMPLE_COLUMNS = ("scenario", "time", "metric", "value")
QUEUE_METRICS = (
    "RequestQueueSize",
    "ControlPlaneRequestQueueSize",
    "ResponseQueueSize",
    "ControlPlaneResponseQueueSize",
)
IDLE_MARK = "AvgIdlePercent"
QUEUE_TIME_PREFIX = "RequestQueueTimeMs"
TOTAL_TIME_PREFIX = "TotalTimeMs"
PROPAGATION_PLANE = "propagation"
HEADLINES = (
    ("shared", "separated"),
    ("separated", "idle"),
    ("cluster-shared", "cluster-separated"),
)
API_HEADLINES = ((("cluster-shared", "cluster-separated"), "LeaderAndIsr"),)
"""Pairs whose ratio is also given for one API's p50 and p99."""
TARGETS = {  # summary key -> (numerator, denominator, comparison, bound) of a p99 ratio
    "separated_control_p99_at_most_2x_idle": ("separated", "idle", "<=", 2.0),
    "shared_control_p99_at_least_20x_separated": ("shared", "separated", ">=", 20.0),
}


@dataclass
class ScenarioRun:
    """Everything measured in one scenario."""

    name: str
    target: Target
    versions: dict[str, int]
    duration_s: float
    control: list[ControlResult] = field(default_factory=list)
    connect_failures: int = 0
    load: LoadResult | None = None
    samples: list[Sample] = field(default_factory=list)
    scrape_failures: int = 0
    brokers: tuple[Target, ...] = ()
    """A cluster's brokers (``target`` is its controller)."""
    propagation: list[ControlResult] = field(default_factory=list)
    moves: dict[str, Any] | None = None
    """A cluster scenario's leader moves (``leader_moves.MoveCounts``)."""
    client_telemetry: str = "not subscribed: no librdkafka load"
    """Whether the load's Producers were subscribed to push their metrics (KIP-714)."""


def request_rows(runs: Iterable[ScenarioRun]) -> dict[str, list[Any]]:
    """The columns of requests.parquet."""
    cols: dict[str, list[Any]] = {name: [] for name in REQUEST_COLUMNS}
    for run in runs:
        for c in run.control:
            _append(cols, run.name, "control", c.api, c.send_time, c.latency_ms, c.error)
        for c in run.propagation:
            _append(cols, run.name, PROPAGATION_PLANE, c.api, c.send_time, c.latency_ms, c.error)
        if run.load is not None:
            load = run.load
            for row in zip(load.send_times, load.latencies_ms, load.errors, strict=True):
                _append(cols, run.name, "data", "Produce", *row)
    return cols


def _append(cols: dict[str, list[Any]], *values: Any) -> None:
    for name, value in zip(REQUEST_COLUMNS, values, strict=True):
        cols[name].append(value)


def sample_rows(runs: Iterable[ScenarioRun]) -> dict[str, list[Any]]:
    """The columns of samples.parquet."""
    cols: dict[str, list[Any]] = {name: [] for name in SAMPLE_COLUMNS}
    for run in runs:
        for s in run.samples:
            for name, value in zip(
                SAMPLE_COLUMNS, (run.name, s.time, s.metric, s.value), strict=True
            ):
                cols[name].append(value)
    return cols


def request_schema() -> Any:
    """The Arrow schema of requests.parquet (the contract ``kplane report`` reads)."""
    import pyarrow as pa

    return pa.schema(
        [
            ("scenario", pa.string()),
            ("plane", pa.string()),
            ("api", pa.string()),
            ("send_time", pa.float64()),
            ("latency_ms", pa.float64()),
            ("error", pa.string()),
        ]
    )


def sample_schema() -> Any:
    """The Arrow schema of samples.parquet."""
    import pyarrow as pa

    return pa.schema(
        [
            ("scenario", pa.string()),
            ("time", pa.float64()),
            ("metric", pa.string()),
            ("value", pa.float64()),
        ]
    )


def write_parquet(out: Path, runs: Sequence[ScenarioRun]) -> list[Path]:
    """Write requests.parquet and samples.parquet into ``out``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    paths = [out / "requests.parquet", out / "samples.parquet"]
    pq.write_table(pa.table(request_rows(runs), schema=request_schema()), paths[0])
    pq.write_table(pa.table(sample_rows(runs), schema=sample_schema()), paths[1])
    return paths


def write_summary(out: Path, summary: Mapping[str, Any]) -> Path:
    path = out / "summary.json"
    path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return path


def latency_stats(latencies_ms: Sequence[float]) -> dict[str, float] | None:
    """p50, p99 (numpy's linear interpolation), max and mean; None without values."""
    if not latencies_ms:
        return None
    values = np.asarray(latencies_ms, dtype=float)
    p50, p99 = np.percentile(values, [50, 99])
    return {
        "p50": float(p50),
        "p99": float(p99),
        "max": float(values.max()),
        "mean": float(values.mean()),
    }


def summarize(runs: Sequence[ScenarioRun], options: Mapping[str, Any]) -> dict[str, Any]:
    """summary.json: per scenario counts and statistics, the headline ratios, the options."""
    scenarios = {run.name: scenario_summary(run) for run in runs}
    p99 = {
        name: s["control"]["latency_ms"]["p99"]
        for name, s in scenarios.items()
        if s["control"]["latency_ms"] is not None
    }
    ratios = {
        f"{top}_control_p99/{bottom}_control_p99": p99[top] / p99[bottom]
        for top, bottom in HEADLINES
        if top in p99 and bottom in p99 and p99[bottom] > 0
    }
    for (top, bottom), api in API_HEADLINES:
        if top in scenarios and bottom in scenarios:
            ratios.update(_api_ratios(scenarios[top], scenarios[bottom], top, bottom, api))
    targets = {}
    for key, (top, bottom, op, bound) in TARGETS.items():
        ratio = ratios.get(f"{top}_control_p99/{bottom}_control_p99")
        if ratio is not None:
            targets[key] = ratio <= bound if op == "<=" else ratio >= bound
    return {
        "scenarios": scenarios,
        "ratios": ratios,
        "targets": targets,
        "notes": {
            "control": "every controller request; latency from send to response, one in flight",
            "data": (
                f"every {options.get('sample_every')}th Produce message is a row of "
                "requests.parquet; its latency is produce() to delivery report as librdkafka "
                "measures it; messages_per_s counts every delivered message"
            ),
        },
        "options": dict(options),
    }


def _api_ratios(
    top: Mapping[str, Any], bottom: Mapping[str, Any], top_name: str, bottom_name: str, api: str
) -> dict[str, float]:
    """``<top>_<api>_p50/<bottom>_<api>_p50`` and the same for p99, where both have some."""
    a = top["control"]["per_api"].get(api, {}).get("latency_ms")
    b = bottom["control"]["per_api"].get(api, {}).get("latency_ms")
    if a is None or b is None:
        return {}
    return {
        f"{top_name}_{api}_{q}/{bottom_name}_{api}_{q}": a[q] / b[q]
        for q in ("p50", "p99")
        if b[q] > 0
    }


def scenario_summary(run: ScenarioRun) -> dict[str, Any]:
    """One scenario's part of summary.json."""
    errors = Counter(c.error for c in run.control if c.error is not None)
    per_api = {
        api: {"requests": len(lat), "latency_ms": latency_stats(lat)}
        for api, lat in _by_api(run.control).items()
    }
    return {
        "broker": {
            "control_endpoint": f"{run.target.control.listener}://"
            f"{run.target.control.host}:{run.target.control.port}",
            "listeners": [e.listener for e in run.target.endpoints],
            "versions": run.versions,
        },
        "duration_s": run.duration_s,
        "control": {
            "requests": len(run.control),
            "errors": sum(errors.values()),
            "error_names": dict(errors),
            "connect_failures": run.connect_failures,
            "latency_ms": latency_stats([c.latency_ms for c in run.control]),
            "per_api": per_api,
        },
        "data": None if run.load is None else data_summary(run.load),
        "cluster": None if not run.brokers else cluster_summary(run),
        "queues": {
            name: stats
            for name in QUEUE_METRICS
            if (stats := queue_stats([s.value for s in run.samples if _base(s.metric) == name]))
        },
        "idle_fraction_mean": mean_idle_fractions(run.samples),
        # Inside the broker: time in the request queue, and from read to response written.
        "request_queue_time_ms_mean": mean_broker_times(run.samples, QUEUE_TIME_PREFIX),
        "total_time_ms_mean": mean_broker_times(run.samples, TOTAL_TIME_PREFIX),
        # What the Producers measured themselves and pushed (KIP-714), over every client.
        "client_metrics": client_metric_stats(run.samples),
        "client_telemetry": run.client_telemetry,
        "scrapes": len({s.time for s in run.samples}),
        "scrape_failures": run.scrape_failures,
    }


def cluster_summary(run: ScenarioRun) -> dict[str, Any]:
    """A cluster scenario's brokers, leader moves and their propagation times."""
    errors = Counter(c.error for c in run.propagation if c.error is not None)
    return {
        "brokers": {
            str(t.broker_id): {
                "data_endpoint": f"{t.data.host}:{t.data.port}",
                "control_endpoint": f"{t.control.listener}://{t.control.host}:{t.control.port}",
                "metrics_url": t.metrics_url,
            }
            for t in run.brokers
        },
        "controller": run.target.broker_id,
        "moves": run.moves,
        "propagation": {
            "steps": len(run.propagation),
            "errors": sum(errors.values()),
            "error_names": dict(errors),
            "latency_ms": latency_stats([c.latency_ms for c in run.propagation]),
            "per_api": {
                api: {"steps": len(lat), "latency_ms": latency_stats(lat)}
                for api, lat in _by_api(run.propagation).items()
            },
        },
    }


def _base(metric: str) -> str:
    """A sample's metric name without its labels."""
    return metric.partition("{")[0]


def _by_api(control: Iterable[ControlResult]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for c in control:
        out.setdefault(c.api, []).append(c.latency_ms)
    return out


def data_summary(load: LoadResult) -> dict[str, Any]:
    """Counts, throughput and sampled latency of the data load."""
    rate = load.delivered / load.seconds if load.seconds > 0 else 0.0
    return {
        "produced": load.produced,
        "delivered": load.delivered,
        "failed": load.failed,
        "undelivered": load.undelivered,
        "seconds": load.seconds,
        "messages_per_s": rate,
        "sampled": len(load.latencies_ms),
        "sampled_errors": sum(e is not None for e in load.errors),
        "latency_ms": latency_stats(load.latencies_ms),
    }


def queue_stats(values: Sequence[float]) -> dict[str, float] | None:
    """Mean, median, max and the fraction of samples above zero; None without samples."""
    if not values:
        return None
    a = np.asarray(values, dtype=float)
    return {
        "samples": len(a),
        "mean": float(a.mean()),
        "p50": float(np.percentile(a, 50)),
        "max": float(a.max()),
        "nonzero_fraction": float((a > 0).mean()),
    }


def client_metric_stats(samples: Iterable[Sample]) -> dict[str, dict[str, float]]:
    """Each pushed client metric (its name without labels) -> samples, mean and max over
    the scenario's scrapes and clients."""
    values: dict[str, list[float]] = {}
    for s in samples:
        if s.metric.startswith(CLIENT_METRIC_PREFIX):
            values.setdefault(_base(s.metric), []).append(s.value)
    return {
        metric: {"samples": len(v), "mean": float(np.mean(v)), "max": float(np.max(v))}
        for metric, v in sorted(values.items())
    }


def mean_idle_fractions(samples: Iterable[Sample]) -> dict[str, float]:
    """``*AvgIdlePercent`` metric (with labels) -> its mean over the scenario's scrapes."""
    values: dict[str, list[float]] = {}
    for s in samples:
        if IDLE_MARK in s.metric:
            values.setdefault(s.metric, []).append(s.value)
    return {metric: float(np.mean(v)) for metric, v in sorted(values.items())}


def mean_broker_times(samples: Iterable[Sample], metric_name: str) -> dict[str, float]:
    """``request/plane`` (``request/plane/broker=<id>`` in a cluster) -> the broker's mean
    ``metric_name`` (RequestQueueTimeMs, TotalTimeMs...) over the scenario, from the growth
    of its cumulative ``_sum`` and ``_count`` since that broker's first scrape."""
    ordered = sorted(samples, key=lambda s: s.time)
    first_scrape: dict[str | None, float] = {}  # broker label -> time of its first scrape
    for s in ordered:
        first_scrape.setdefault(split_metric(s.metric)[1].get("broker"), s.time)
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    for s in ordered:
        if s.metric.startswith(metric_name + "_"):
            if s.time == first_scrape[split_metric(s.metric)[1].get("broker")]:
                first[s.metric] = s.value
            last[s.metric] = s.value
    means = {}
    for metric, total in last.items():
        if not metric.startswith(metric_name + "_sum"):
            continue
        labels = metric[len(metric_name + "_sum") :]
        count_metric = metric_name + "_count" + labels
        count = last.get(count_metric, 0.0) - first.get(count_metric, 0.0)
        if count > 0:
            means[_label_key(labels)] = (total - first.get(metric, 0.0)) / count
    return dict(sorted(means.items()))


def _label_key(labels: str) -> str:
    """``{plane="data",request="Produce"}`` -> ``Produce/data``; with a ``broker`` label,
    ``Produce/data/broker=1``."""
    values = split_metric(labels)[1]
    key = f"{values.get('request', '?')}/{values.get('plane', '?')}"
    return key if "broker" not in values else f"{key}/broker={values['broker']}"
