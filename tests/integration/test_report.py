"""``kplane report``: Spark analytics of synthetic load-test results, checked against numpy."""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kplane.tools.loadtest.results import request_schema
from kplane.tools.report import pipeline as report
from tests.repo import REPO_ROOT

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
START = {"idle": 1_700_000_000.0, "shared": 1_700_000_100.0, "separated": 1_700_000_200.0}
DURATION_S = 10.0
# scenario, plane, api, requests, median latency (ms): shared control waits behind Produce.
TRAFFIC = [
    ("idle", "control", "UpdateMetadata", 300, 2.0),
    ("idle", "control", "LeaderAndIsr", 200, 3.0),
    ("shared", "control", "UpdateMetadata", 300, 60.0),
    ("shared", "control", "LeaderAndIsr", 200, 80.0),
    ("shared", "data", "Produce", 1500, 25.0),
    ("separated", "control", "UpdateMetadata", 300, 2.5),
    ("separated", "control", "LeaderAndIsr", 200, 3.5),
    ("separated", "data", "Produce", 1500, 25.0),
]
REQUEST_SCHEMA = request_schema()
QUEUE_LEVELS = {  # scenario → (RequestQueueSize, ControlPlaneRequestQueueSize)
    "idle": (0.0, 0.0),
    "shared": (480.0, 0.0),
    "separated": (470.0, 1.0),
}


def make_requests(rng: np.random.Generator, scenarios: tuple[str, ...]) -> pd.DataFrame:
    """TRAFFIC of ``scenarios``: lognormal latencies, ~2 % of Produce requests failed."""
    frames = []
    for scenario, plane, api, n, median in TRAFFIC:
        if scenario not in scenarios:
            continue
        failed = rng.random(n) < (0.02 if plane == "data" else 0.0)
        frames.append(
            pd.DataFrame(
                {
                    "scenario": scenario,
                    "plane": plane,
                    "api": api,
                    "send_time": START[scenario] + 0.5 + rng.uniform(0, DURATION_S, n),
                    "latency_ms": rng.lognormal(np.log(median), 0.6, n),
                    "error": ["REQUEST_TIMED_OUT" if f else None for f in failed],
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def make_samples(scenarios: tuple[str, ...]) -> pd.DataFrame:
    """Every 0.5 s from each scenario's start: both queue sizes and an idle percentage."""
    rows = []
    for scenario in scenarios:
        data_queue, control_queue = QUEUE_LEVELS[scenario]
        for t in np.arange(0.0, DURATION_S + 1.0, 0.5):
            at = START[scenario] + t
            rows += [
                (scenario, at, "RequestQueueSize", data_queue),
                (scenario, at, "ControlPlaneRequestQueueSize", control_queue),
                (scenario, at, "NetworkProcessorAvgIdlePercent", 0.5),
            ]
    return pd.DataFrame(rows, columns=["scenario", "time", "metric", "value"])


def write_results(
    directory: Path, scenarios: tuple[str, ...], *, parts: int, samples: bool
) -> pd.DataFrame:
    """A RESULTS_DIR; requests.parquet is one file (parts=1) or a directory of part files."""
    directory.mkdir(parents=True, exist_ok=True)
    requests = make_requests(np.random.default_rng(291), scenarios)
    table = pa.Table.from_pandas(requests, schema=REQUEST_SCHEMA, preserve_index=False)
    path = directory / "requests.parquet"
    if parts == 1:
        pq.write_table(table, path)
    else:
        path.mkdir()
        step = -(-table.num_rows // parts)
        for i in range(parts):
            pq.write_table(table.slice(i * step, step), path / f"part-{i:05d}.parquet")
    if samples:
        frame = make_samples(scenarios)
        pq.write_table(
            pa.Table.from_pandas(frame, preserve_index=False), directory / "samples.parquet"
        )
    return requests


def expected_rows(requests: pd.DataFrame) -> dict[tuple[str, str, str], dict[str, float]]:
    """The latency table computed with numpy (linear interpolation, as Spark's percentile)."""
    expected = {}
    for key, group in requests.groupby(["scenario", "plane", "api"]):
        latency = group["latency_ms"].to_numpy()
        p50, p95, p99, p99_9 = np.percentile(latency, [50, 95, 99, 99.9])
        expected[key] = {
            "count": len(group),
            "errors": int(group["error"].notna().sum()),
            "p50_ms": p50,
            "p95_ms": p95,
            "p99_ms": p99,
            "p99_9_ms": p99_9,
            "max_ms": latency.max(),
        }
    return expected


def control_latency(requests: pd.DataFrame, scenario: str, q: float = 99) -> float:
    mask = (requests["scenario"] == scenario) & (requests["plane"] == "control")
    return float(np.percentile(requests.loc[mask, "latency_ms"], q))


def cli_args(results_dir: Path, **overrides: Any) -> argparse.Namespace:
    return argparse.Namespace(results_dir=results_dir, out=None, master="local[2]", **overrides)


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """One local Spark for the module; build_report reuses the active session."""
    with report.spark_session("local[2]") as session:
        yield session


@pytest.fixture(scope="module")
def full_run(
    spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> tuple[pd.DataFrame, report.ReportResult, Path]:
    """All three scenarios, requests as part files, samples and summary.json present."""
    results = tmp_path_factory.mktemp("results")
    requests = write_results(results, ("idle", "shared", "separated"), parts=2, samples=True)
    (results / "summary.json").write_text('{"duration_s": 10, "producers": 4}')
    out = results / "report"
    return requests, report.build_report(results, out, master="local[2]"), out


@pytest.mark.slow
@pytest.mark.xdist_group("spark")
class TestSparkReport:
    def test_writes_every_file(self, full_run: Any) -> None:
        _, result, out = full_run
        names = {"report.md", "report.html", "latency.csv", *report.CHART_TITLES}
        assert {p.name for p in result.paths} == names
        assert all(p.parent == out and p.is_file() for p in result.paths)
        for name in report.CHART_TITLES:
            data = (out / name).read_bytes()
            assert data.startswith(PNG_MAGIC), name
            assert len(data) > 10_000, name

    def test_latency_rows_match_numpy(self, full_run: Any) -> None:
        requests, result, out = full_run
        expected = expected_rows(requests)
        with (out / "latency.csv").open(newline="") as handle:
            from_csv = list(csv.DictReader(handle))
        assert len(result.latency) == len(from_csv) == len(expected)
        for row, line in zip(result.latency, from_csv, strict=True):
            want = expected[row.scenario, row.plane, row.api]
            assert (line["scenario"], line["plane"], line["api"]) == (
                row.scenario,
                row.plane,
                row.api,
            )
            for name, value in want.items():
                assert getattr(row, name) == pytest.approx(value, rel=1e-9), name
                assert float(line[name]) == pytest.approx(value, rel=1e-9), name
        order = [(r.scenario, r.plane) for r in result.latency]
        assert order[0] == ("idle", "control") and order[-1] == ("separated", "data")

    def test_headline_ratios(self, full_run: Any) -> None:
        requests, result, _ = full_run
        shared, separated, idle = (
            control_latency(requests, s) for s in ("shared", "separated", "idle")
        )
        assert result.control_p99["shared"] == pytest.approx(shared, rel=1e-9)
        assert result.control_p50["separated"] == pytest.approx(
            control_latency(requests, "separated", 50), rel=1e-9
        )
        assert result.shared_vs_separated == pytest.approx(shared / separated, rel=1e-9)
        assert result.separated_vs_idle == pytest.approx(separated / idle, rel=1e-9)
        assert result.shared_vs_separated > 10

    def test_markdown_and_html(self, full_run: Any) -> None:
        requests, result, out = full_run
        markdown = (out / "report.md").read_text()
        ratio = f"**{result.shared_vs_separated:.2f}x**"
        assert f"Control-plane p99, shared ÷ separated: {ratio}" in markdown
        assert "| scenario | plane | api | requests | errors | p50 ms |" in markdown
        produce = expected_rows(requests)["shared", "data", "Produce"]
        assert f"| shared | data | Produce | 1500 | {produce['errors']} |" in markdown
        assert "![Latency CDF per plane and scenario](latency_cdf.png)" in markdown
        assert '"producers": 4' in markdown
        page = (out / "report.html").read_text()
        assert page.startswith("<!DOCTYPE html>") and "<table>" in page
        assert '<img src="queue_size.png"' in page
        assert f"<strong>{result.shared_vs_separated:.2f}x</strong>" in page

    def test_run_single_file_without_idle_or_samples(
        self, spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        write_results(tmp_path, ("shared", "separated"), parts=1, samples=False)
        assert report.run(cli_args(tmp_path)) == 0
        lines = capsys.readouterr().out.splitlines()
        # the headline first: p50/p99 per scenario, then the ratios there are
        assert lines[0].startswith("control-plane p50/p99: shared ")
        assert ", separated " in lines[0] and lines[0].endswith(" ms")
        assert lines[1].startswith("ratios: p99 shared/separated ")
        assert "; p50 shared/separated " in lines[1] and "idle" not in lines[1]
        assert lines[2] == f"Spark's own output: {tmp_path / 'spark.log'}; files written:"
        printed = lines[3:]
        assert {Path(p).name for p in printed} >= {"report.md", "queue_size.png"}
        assert all(Path(p).parent == tmp_path for p in printed)
        assert (tmp_path / "spark.log").exists()
        markdown = (tmp_path / "report.md").read_text()
        assert "Control-plane p99, separated ÷ idle: **n/a** (separated " in markdown
        assert "idle n/a)" in markdown

    def test_zero_requests_exit_2(
        self, spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        pq.write_table(REQUEST_SCHEMA.empty_table(), tmp_path / "requests.parquet")
        assert report.run(cli_args(tmp_path)) == 2
        assert "holds no requests" in capsys.readouterr().err


@pytest.mark.parametrize("layout", ["absent", "empty", "no-requests", "no-part-files"])
def test_unusable_results_dir_exit_2(
    layout: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results"
    if layout != "absent":
        results.mkdir()
    if layout == "no-requests":
        (results / "summary.json").write_text("{}")
    if layout == "no-part-files":
        (results / "requests.parquet").mkdir()
    assert report.run(cli_args(results)) == 2
    err = capsys.readouterr().err
    assert err.startswith("kplane report: ") and err.count("\n") == 1


def test_module_entry_point_without_spark(tmp_path: Path) -> None:
    """``python -m kplane.tools.report.pipeline`` fails cleanly before Spark or matplotlib load."""
    code = (
        "import sys; from kplane.tools.report import pipeline; rc = pipeline.main(sys.argv[1:]); "
        "print(sorted(m for m in ('pyspark', 'matplotlib', 'pandas') if m in sys.modules)); "
        "sys.exit(rc)"
    )
    probe = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "missing")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (probe.returncode, probe.stdout.strip()) == (2, "[]")
    assert "does not exist" in probe.stderr
    module = subprocess.run(
        [sys.executable, "-m", "kplane.tools.report.pipeline", str(tmp_path / "missing")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert module.returncode == 2
    assert (
        module.stderr.strip()
        == f"kplane report: results directory {tmp_path / 'missing'} does not exist"
    )


def test_add_parser_registers_report() -> None:
    parser = argparse.ArgumentParser(prog="kplane")
    report.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["report", "results", "--out", "out", "--master", "spark://h:7077"])
    assert (args.func, args.results_dir, args.out, args.master) == (
        report.run,
        Path("results"),
        Path("out"),
        "spark://h:7077",
    )
    assert parser.parse_args(["report", "results"]).master == "local[*]"
