"""summary.json and the Parquet files of ``kplane loadtest``, from synthetic measurements."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kplane.tools.loadtest.controller import ControlResult, Endpoint
from kplane.tools.loadtest.metrics import Sample
from kplane.tools.loadtest.producers import LoadResult
from kplane.tools.loadtest.results import (
    ScenarioRun,
    latency_stats,
    mean_broker_times,
    mean_idle_fractions,
    queue_stats,
    summarize,
    write_parquet,
    write_summary,
)
from kplane.tools.loadtest.scenarios import Target

T0 = 1_700_000_000.0
CONTROL = Endpoint("CONTROLLER", "127.0.0.1", 9094)
TARGET = Target(0, Endpoint("CLIENT", "127.0.0.1", 9092), CONTROL, (CONTROL,), None, 1)
OPTIONS = {"sample_every": 100, "duration": 10.0}


def control(latencies: list[float], error_every: int = 0) -> list[ControlResult]:
    return [
        ControlResult(
            "UpdateMetadata" if i % 2 == 0 else "LeaderAndIsr",
            T0 + i * 0.02,
            ms,
            "REQUEST_TIMED_OUT" if error_every and i % error_every == 0 else None,
        )
        for i, ms in enumerate(latencies)
    ]


def run(name: str, latencies: list[float], *, load: bool = True, queue: float = 0.0) -> ScenarioRun:
    result = None
    if load:
        result = LoadResult(
            produced=1000,
            delivered=990,
            failed=10,
            seconds=10.0,
            send_times=[T0, T0 + 1.0],
            latencies_ms=[3.0, 5.0],
            errors=[None, "_MSG_TIMED_OUT"],
        )
    samples = [Sample(T0 + i / 10, "RequestQueueSize", queue if i % 2 else 0.0) for i in range(10)]
    return ScenarioRun(
        name,
        TARGET,
        {"UpdateMetadata": 8, "LeaderAndIsr": 7},
        10.0,
        control=control(latencies),
        load=result,
        samples=samples,
    )


def test_latency_stats_use_numpy_linear_percentiles() -> None:
    values = [float(v) for v in range(1, 101)]
    stats = latency_stats(values)
    assert stats == {
        "p50": pytest.approx(np.percentile(values, 50)),
        "p99": pytest.approx(np.percentile(values, 99)),
        "max": 100.0,
        "mean": pytest.approx(50.5),
    }
    assert latency_stats([]) is None


def test_queue_stats() -> None:
    stats = queue_stats([0.0, 0.0, 4.0, 8.0])
    assert stats == {"samples": 4, "mean": 3.0, "p50": 2.0, "max": 8.0, "nonzero_fraction": 0.5}
    assert queue_stats([]) is None


def test_headline_ratios_and_targets() -> None:
    runs = [
        run("idle", [1.0] * 100, load=False),
        run("shared", [50.0] * 100, queue=40.0),
        run("separated", [1.5] * 100, queue=40.0),
    ]
    summary = summarize(runs, OPTIONS)
    assert summary["ratios"] == {
        "shared_control_p99/separated_control_p99": pytest.approx(50.0 / 1.5),
        "separated_control_p99/idle_control_p99": pytest.approx(1.5),
    }
    assert summary["targets"] == {
        "separated_control_p99_at_most_2x_idle": True,
        "shared_control_p99_at_least_20x_separated": True,
    }
    assert summary["options"] == OPTIONS
    json.dumps(summary)  # JSON all the way down


def test_ratios_need_both_scenarios() -> None:
    summary = summarize([run("shared", [5.0] * 10)], OPTIONS)
    assert summary["ratios"] == {}
    assert summary["targets"] == {}
    assert list(summary["scenarios"]) == ["shared"]


def test_scenario_summary_counts() -> None:
    shared = run("shared", [float(i) for i in range(1, 101)], queue=40.0)
    shared.control[0] = ControlResult("UpdateMetadata", T0, 30000.0, "REQUEST_TIMED_OUT")
    s = summarize([shared], OPTIONS)["scenarios"]["shared"]
    assert s["control"]["requests"] == 100
    assert s["control"]["errors"] == 1
    assert s["control"]["error_names"] == {"REQUEST_TIMED_OUT": 1}
    assert s["control"]["latency_ms"]["max"] == 30000.0
    assert {api: v["requests"] for api, v in s["control"]["per_api"].items()} == {
        "UpdateMetadata": 50,
        "LeaderAndIsr": 50,
    }
    assert s["data"]["messages_per_s"] == pytest.approx(99.0)
    assert s["data"]["sampled"] == 2
    assert s["data"]["sampled_errors"] == 1
    assert s["queues"]["RequestQueueSize"]["mean"] == pytest.approx(20.0)
    assert s["queues"]["RequestQueueSize"]["nonzero_fraction"] == pytest.approx(0.5)
    assert "ControlPlaneRequestQueueSize" not in s["queues"]
    assert s["broker"]["versions"] == {"UpdateMetadata": 8, "LeaderAndIsr": 7}
    idle = summarize([run("idle", [1.0], load=False)], OPTIONS)["scenarios"]["idle"]
    assert idle["data"] is None


def test_mean_queue_time_from_cumulative_sums() -> None:
    produce = '{plane="data",request="Produce"}'
    leader = '{plane="control",request="LeaderAndIsr"}'
    samples = [
        Sample(T0, f"RequestQueueTimeMs_sum{produce}", 100.0),
        Sample(T0, f"RequestQueueTimeMs_count{produce}", 10.0),
        Sample(T0 + 1, f"RequestQueueTimeMs_sum{produce}", 400.0),
        Sample(T0 + 1, f"RequestQueueTimeMs_count{produce}", 40.0),
        # first seen after the first scrape: counted from zero
        Sample(T0 + 1, f"RequestQueueTimeMs_sum{leader}", 3.0),
        Sample(T0 + 1, f"RequestQueueTimeMs_count{leader}", 2.0),
        Sample(T0 + 1, "RequestQueueSize", 5.0),
    ]
    assert mean_broker_times(samples, "RequestQueueTimeMs") == {
        "LeaderAndIsr/control": 1.5,
        "Produce/data": 10.0,
    }
    assert mean_broker_times([], "RequestQueueTimeMs") == {}


def test_mean_idle_fractions_per_metric_and_labels() -> None:
    data = 'RequestHandlerAvgIdlePercent{plane="data"}'
    processor = 'NetworkProcessorAvgIdlePercent{listener="CLIENT",networkProcessor="0"}'
    samples = [
        Sample(T0, data, 0.2),
        Sample(T0 + 1, data, 0.4),
        Sample(T0, processor, 0.9),
        Sample(T0, "RequestQueueSize", 3.0),
    ]
    assert mean_idle_fractions(samples) == {
        processor: pytest.approx(0.9),
        data: pytest.approx(0.3),
    }


def test_parquet_files_have_exactly_the_contract_columns(tmp_path: Path) -> None:
    runs = [run("idle", [1.0, 2.0], load=False), run("shared", [3.0, 4.0])]
    runs[1].control[1] = ControlResult("LeaderAndIsr", T0, 9.0, "STALE_CONTROLLER_EPOCH")
    requests_path, samples_path = write_parquet(tmp_path, runs)

    requests = pq.read_table(requests_path)
    assert requests.schema == pa.schema(
        [
            ("scenario", pa.string()),
            ("plane", pa.string()),
            ("api", pa.string()),
            ("send_time", pa.float64()),
            ("latency_ms", pa.float64()),
            ("error", pa.string()),
        ]
    )
    rows = requests.to_pylist()
    assert [(r["scenario"], r["plane"], r["api"]) for r in rows] == [
        ("idle", "control", "UpdateMetadata"),
        ("idle", "control", "LeaderAndIsr"),
        ("shared", "control", "UpdateMetadata"),
        ("shared", "control", "LeaderAndIsr"),
        ("shared", "data", "Produce"),
        ("shared", "data", "Produce"),
    ]
    assert [r["error"] for r in rows] == [
        None,
        None,
        None,
        "STALE_CONTROLLER_EPOCH",
        None,
        "_MSG_TIMED_OUT",
    ]
    assert [r["latency_ms"] for r in rows] == [1.0, 2.0, 3.0, 9.0, 3.0, 5.0]

    samples = pq.read_table(samples_path)
    assert samples.schema == pa.schema(
        [
            ("scenario", pa.string()),
            ("time", pa.float64()),
            ("metric", pa.string()),
            ("value", pa.float64()),
        ]
    )
    assert samples.num_rows == 20
    assert set(samples.column("scenario").to_pylist()) == {"idle", "shared"}


def test_summary_file_is_json(tmp_path: Path) -> None:
    summary = summarize([run("idle", [1.0], load=False)], OPTIONS)
    path = write_summary(tmp_path, summary)
    assert json.loads(path.read_text()) == summary
