"""``kplane loadtest`` end to end: real brokers, real Producers, the fake controller.

Short runs: the assertions are on the files' shape and on counts, never on latency values.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kplane.testing.plugin import BrokerProcess, free_port
from kplane.tools.loadtest import runner as loadtest
from kplane.tools.loadtest.placement import available_cpus, default_split
from kplane.tools.loadtest.results import request_schema, sample_schema

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("loadtest")]

SHORT = [
    "--load-client", "confluent",
    "--duration", "3",
    "--warmup", "0.5",
    "--producers", "2",
    "--rate", "2000",
    "--control-rate", "20",
    "--sample-every", "10",
]  # fmt: skip
REQUEST_SCHEMA = request_schema()
SAMPLE_SCHEMA = sample_schema()
CONTROL_APIS = {"UpdateMetadata", "LeaderAndIsr"}


def requests_of(out: Path) -> list[dict]:
    table = pq.read_table(out / "requests.parquet")
    assert table.schema == REQUEST_SCHEMA
    return table.to_pylist()


def run_report(out: Path, report_dir: Path) -> list[dict[str, str]]:
    """``kplane report`` of the results in ``out`` into ``report_dir`` (real Spark, local
    mode): every file written, the plots PNGs; returns the rows of its latency.csv."""
    done = subprocess.run(
        [
            sys.executable, "-m", "kplane", "report", str(out),
            "--out", str(report_dir), "--master", "local[2]",
        ],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    written = {Path(line).name for line in done.stdout.split()}
    assert {
        "report.md", "report.html", "latency.csv",
        "latency_cdf.png", "latency_over_time.png", "queue_size.png", "throughput.png",
    } <= written  # fmt: skip
    for png in report_dir.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return list(csv.DictReader((report_dir / "latency.csv").open()))


def run_loadtest(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    """Run ``kplane loadtest --json`` in this process; its summary (stdout holds nothing
    else)."""
    code = loadtest.main(["--json", *argv])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


def test_three_scenarios_side_by_side(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "results"
    summary = run_loadtest([*SHORT, "--out", str(out)], capsys)  # the default placement
    assert json.loads((out / "summary.json").read_text()) == summary

    rows = requests_of(out)
    control = [r for r in rows if r["plane"] == "control"]
    data = [r for r in rows if r["plane"] == "data"]
    for scenario in ("idle", "shared", "separated"):
        apis = {r["api"] for r in control if r["scenario"] == scenario}
        assert apis == CONTROL_APIS, scenario
    assert {r["scenario"] for r in data} == {"shared", "separated"}
    assert {r["api"] for r in data} == {"Produce"}
    assert [r for r in control if r["error"] is not None] == []
    assert all(r["latency_ms"] >= 0 and r["send_time"] > 0 for r in rows)

    samples = pq.read_table(out / "samples.parquet")
    assert samples.schema == SAMPLE_SCHEMA
    metrics_by_scenario: dict[str, set[str]] = {}
    for r in samples.to_pylist():
        metrics_by_scenario.setdefault(r["scenario"], set()).add(r["metric"])
    assert set(metrics_by_scenario) == {"idle", "shared", "separated"}
    for scenario, metrics in metrics_by_scenario.items():
        assert "RequestQueueSize" in metrics, scenario
    assert "ControlPlaneRequestQueueSize" in metrics_by_scenario["separated"]

    assert set(summary["ratios"]) == {
        "shared_control_p99/separated_control_p99",
        "separated_control_p99/idle_control_p99",
    }
    assert set(summary["targets"]) == {
        "separated_control_p99_at_most_2x_idle",
        "shared_control_p99_at_least_20x_separated",
    }
    for scenario in ("idle", "shared", "separated"):
        s = summary["scenarios"][scenario]
        assert s["control"]["requests"] == len([r for r in control if r["scenario"] == scenario])
        assert s["control"]["errors"] == 0
        assert s["control"]["latency_ms"]["p99"] is not None
        assert s["queues"]["RequestQueueSize"]["samples"] > 0
    for scenario in ("shared", "separated"):
        d = summary["scenarios"][scenario]["data"]
        assert d["delivered"] > 0 and d["failed"] == 0 and d["undelivered"] == 0
        assert d["sampled"] == len([r for r in data if r["scenario"] == scenario])
    assert summary["scenarios"]["idle"]["data"] is None
    assert summary["scenarios"]["shared"]["broker"]["control_endpoint"].startswith("INTERNAL://")
    assert summary["scenarios"]["separated"]["broker"]["control_endpoint"].startswith(
        "CONTROLLER://"
    )
    assert summary["options"]["producers"] == 2
    split = default_split(sorted(available_cpus()))
    if split is not None:
        assert summary["options"]["broker_cpus"] == split[0]
        assert summary["options"]["load_idle"] is True
        assert summary["options"]["placement"].startswith(f"brokers on CPU {split[0]}")
    for scenario in ("idle", "shared", "separated"):
        assert (out / f"{scenario}-broker.log").is_file()

    # The Spark report of the same results, through the CLI (real Spark, local mode).
    report_dir = tmp_path / "report"
    table = run_report(out, report_dir)
    got = {(r["scenario"], r["plane"], r["api"]) for r in table}
    expected = {(s, "control", a) for s in ("idle", "shared", "separated") for a in CONTROL_APIS}
    assert expected | {("shared", "data", "Produce"), ("separated", "data", "Produce")} == got
    for r in table:
        if r["plane"] == "control":
            mine = [
                c["latency_ms"]
                for c in control
                if (c["scenario"], c["api"]) == (r["scenario"], r["api"])
            ]
            assert int(r["count"]) == len(mine)
            assert float(r["max_ms"]) == pytest.approx(max(mine))
    markdown = (report_dir / "report.md").read_text()
    assert "shared" in markdown and "separated" in markdown and "p99" in markdown


def test_a_running_broker(
    broker_process: Callable[..., BrokerProcess],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    client, controller = free_port(), free_port()
    handle = broker_process(
        "configs/server.properties",
        f"listeners=CLIENT://127.0.0.1:{client},CONTROLLER://127.0.0.1:{controller}",
        "listener.security.protocol.map=CLIENT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name=CLIENT",
        "control.plane.listener.name=CONTROLLER",
        plaintext_port=False,
    )
    # Serving once it logged "started" (its controller has published the metadata).
    deadline = time.monotonic() + 60
    while '"started"' not in handle.log_text():
        assert time.monotonic() < deadline and handle.process.poll() is None, handle.log_text()
        time.sleep(0.1)
    out = tmp_path / "results"
    argv = [
        *SHORT,
        "--duration", "2",
        "--bootstrap-server", f"127.0.0.1:{client}",
        "--control-server", f"127.0.0.1:{controller}",
        "--listener", f"CLIENT=127.0.0.1:{client}",
        "--listener", f"CONTROLLER=127.0.0.1:{controller}",
        "--scenario-name", "mine",
        "--out", str(out),
    ]  # fmt: skip
    summary = run_loadtest(argv, capsys)
    assert list(summary["scenarios"]) == ["mine"]
    assert summary["ratios"] == {}
    rows = requests_of(out)
    assert {(r["scenario"], r["plane"]) for r in rows} == {("mine", "control"), ("mine", "data")}
    assert [r for r in rows if r["plane"] == "control" and r["error"] is not None] == []
    assert pq.read_table(out / "samples.parquet").num_rows == 0  # no --metrics-url


def test_a_scenario_that_cannot_run_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        *SHORT,
        "--scenarios", "shared",
        "--broker-override", "listener.security.protocol.map=CLIENT:NOPE",
        "--out", str(tmp_path / "results"),
    ]  # fmt: skip
    assert loadtest.main(argv) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert lines[-1].startswith("kplane loadtest: scenario shared could not run: ")


def test_the_wire_load(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "results"
    argv = [
        *SHORT,
        "--scenarios", "separated",
        "--load-client", "wire",
        "--producers", "20",
        "--batch-records", "5",
        "--duration", "2",
        "--out", str(out),
    ]  # fmt: skip
    data = run_loadtest(argv, capsys)["scenarios"]["separated"]["data"]
    assert data["delivered"] > 0 and data["failed"] == 0 and data["undelivered"] == 0
    assert data["delivered"] == data["produced"]
    rows = requests_of(out)
    assert {r["api"] for r in rows if r["plane"] == "data"} == {"Produce"}
    assert [r for r in rows if r["error"] is not None] == []
