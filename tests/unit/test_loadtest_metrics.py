"""Parsing a broker's Prometheus exposition into load-test samples."""

from __future__ import annotations

from prometheus_client import generate_latest

from kplane.broker.metrics import (
    CONTROL_PLANE_REQUEST_QUEUE_SIZE,
    NETWORK_PROCESSOR_AVG_IDLE_PERCENT,
    REQUEST_QUEUE_SIZE,
    BrokerMetrics,
)
from kplane.tools.loadtest.metrics import Sample, parse_scrape


def exposition() -> str:
    metrics = BrokerMetrics(clock=lambda: 0)
    metrics.register_gauge(REQUEST_QUEUE_SIZE, "data queue", lambda: 17.0)
    metrics.register_gauge(CONTROL_PLANE_REQUEST_QUEUE_SIZE, "control queue", lambda: 2.0)
    metrics.register_gauge(
        NETWORK_PROCESSOR_AVG_IDLE_PERCENT,
        "idle",
        lambda: 0.25,
        {"networkProcessor": "3", "listener": "INTERNAL"},
    )
    metrics.register_gauge("kafka_unrelated_gauge", "not kept", lambda: 1.0)
    metrics.record_request("Produce", "data", 4.0, 1.0, 0.0, 0.5, 0.5, 6.0)
    metrics.record_request("Produce", "data", 6.0, 1.0, 0.0, 0.5, 0.5, 8.0)
    metrics.record_request("LeaderAndIsr", "control", 0.5, 1.0, 0.0, 0.1, 0.1, 1.7)
    metrics.record_error("Produce", "NOT_LEADER_OR_FOLLOWER")
    return generate_latest(metrics.registry).decode()


def test_gauges_are_named_by_their_kafka_mbean_with_sorted_labels() -> None:
    samples = {s.metric: s.value for s in parse_scrape(12.5, exposition())}
    assert samples["RequestQueueSize"] == 17.0
    assert samples["ControlPlaneRequestQueueSize"] == 2.0
    assert samples['NetworkProcessorAvgIdlePercent{listener="INTERNAL",networkProcessor="3"}'] == (
        0.25
    )


def test_histograms_keep_only_cumulative_sum_and_count() -> None:
    samples = {s.metric: s.value for s in parse_scrape(12.5, exposition())}
    assert samples['RequestQueueTimeMs_sum{plane="data",request="Produce"}'] == 10.0
    assert samples['RequestQueueTimeMs_count{plane="data",request="Produce"}'] == 2.0
    assert samples['RequestQueueTimeMs_sum{plane="control",request="LeaderAndIsr"}'] == 0.5
    assert samples['TotalTimeMs_sum{plane="data",request="Produce"}'] == 14.0
    assert samples['LocalTimeMs_count{plane="control",request="LeaderAndIsr"}'] == 1.0
    assert not any("_bucket" in name for name in samples)
    assert not any(name.startswith(("RemoteTimeMs", "ResponseSendTimeMs")) for name in samples)


def test_other_metrics_are_dropped() -> None:
    names = {s.metric for s in parse_scrape(0.0, exposition())}
    assert not any("unrelated" in n or "RequestsPerSec" in n or "ErrorsPerSec" in n for n in names)
    assert not any(n.startswith("kafka_") for n in names)


def test_every_sample_carries_the_scrape_time() -> None:
    samples = parse_scrape(1_700_000_000.25, exposition())
    assert samples
    assert {s.time for s in samples} == {1_700_000_000.25}
    assert all(isinstance(s, Sample) and isinstance(s.value, float) for s in samples)


def test_empty_exposition_gives_no_samples() -> None:
    assert parse_scrape(0.0, "") == []
