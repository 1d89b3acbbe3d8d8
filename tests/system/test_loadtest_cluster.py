"""``kplane loadtest``'s cluster scenarios end to end (KIP-291's case): a real ZooKeeper, three
brokers with replication factor 3, real Producers, the cluster's own controller moving leaders,
then ``kplane report`` on the results.

A short run: the assertions are on where the controller's requests were served and on the
files' shape, never on latency values.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kplane.testing.plugin import require_zookeeper
from kplane.tools.loadtest.metrics import split_metric
from kplane.tools.serve_process import json_events
from tests.system.test_loadtest import (
    REQUEST_SCHEMA,
    SAMPLE_SCHEMA,
    requests_of,
    run_loadtest,
    run_report,
)

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("loadtest")]

SCENARIOS = ("cluster-shared", "cluster-separated")
PLANE = {"cluster-shared": "data", "cluster-separated": "control"}
"""The plane each scenario's brokers serve controller requests on."""
SHORT = [
    "--scenarios", "cluster",
    "--load-client", "confluent",
    "--duration", "4",
    "--warmup", "0.5",
    "--producers", "2",
    "--rate", "2000",
    "--sample-every", "10",
]  # fmt: skip
CONTROL_APIS = {"LeaderAndIsr", "UpdateMetadata"}
STEP_APIS = {"AlterPartitionReassignments", "ElectLeaders"}


def _refused(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
    except OSError:
        return True
    return False


def test_cluster_scenarios_and_their_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    require_zookeeper()
    out = tmp_path / "results"
    summary = run_loadtest([*SHORT, "--out", str(out)], capsys)
    assert json.loads((out / "summary.json").read_text()) == summary
    assert list(summary["scenarios"]) == list(SCENARIOS)

    rows = requests_of(out)
    assert pq.read_table(out / "requests.parquet").schema == REQUEST_SCHEMA
    for scenario in SCENARIOS:
        mine = [r for r in rows if r["scenario"] == scenario]
        control = [r for r in mine if r["plane"] == "control"]
        steps = [r for r in mine if r["plane"] == "propagation"]
        assert {r["api"] for r in control} == CONTROL_APIS, scenario
        assert {r["api"] for r in steps} == STEP_APIS, scenario
        assert {r["api"] for r in mine if r["plane"] == "data"} == {"Produce"}, scenario
        assert [r for r in control + steps if r["error"] is not None] == [], scenario
        assert all(r["latency_ms"] >= 0 and r["send_time"] > 0 for r in mine)
        # Every step reached the three brokers: a LeaderAndIsr each, timed by the broker.
        leader_and_isr = [r for r in control if r["api"] == "LeaderAndIsr"]
        assert len(leader_and_isr) >= 3 * len(steps), scenario

        s = summary["scenarios"][scenario]
        cluster = s["cluster"]
        assert set(cluster["brokers"]) == {"0", "1", "2"}
        assert cluster["propagation"]["steps"] == len(steps)
        assert cluster["propagation"]["errors"] == 0
        moves = cluster["moves"]
        assert moves["step_errors"] == {}
        # Served on the right plane: the control plane when separated, else the data plane.
        assert moves["planes"]["LeaderAndIsr"] == {PLANE[scenario]: len(leader_and_isr)}
        assert set(moves["planes"]["UpdateMetadata"]) == {PLANE[scenario]}
        assert s["control"]["per_api"]["LeaderAndIsr"]["requests"] == len(leader_and_isr)
        d = s["data"]
        assert d["delivered"] > 0 and d["failed"] == 0 and d["undelivered"] == 0
        control_listener = "CONTROLLER" if scenario == "cluster-separated" else "INTERNAL"
        assert s["broker"]["control_endpoint"].startswith(control_listener + "://")
        for broker_id in range(3):
            log = (out / f"{scenario}-broker-{broker_id}.log").read_text()
            assert json_events(log)[-1]["event"] == "stopped"
        # Everything started is stopped.
        assert all(_refused(b["data_endpoint"]) for b in cluster["brokers"].values())

    # The brokers' own request metrics, per broker and plane, are in samples.parquet.
    samples = pq.read_table(out / "samples.parquet")
    assert samples.schema == SAMPLE_SCHEMA
    planes: dict[str, set[tuple[str, str]]] = {s: set() for s in SCENARIOS}
    for r in samples.to_pylist():
        name, labels = split_metric(r["metric"])
        if name == "TotalTimeMs_count" and labels.get("request") == "LeaderAndIsr":
            planes[r["scenario"]].add((labels["broker"], labels["plane"]))
    for scenario in SCENARIOS:
        assert planes[scenario] == {(b, PLANE[scenario]) for b in "012"}, scenario

    assert set(summary["ratios"]) == {
        "cluster-shared_control_p99/cluster-separated_control_p99",
        "cluster-shared_LeaderAndIsr_p50/cluster-separated_LeaderAndIsr_p50",
        "cluster-shared_LeaderAndIsr_p99/cluster-separated_LeaderAndIsr_p99",
    }

    # The Spark report of the same results, through the CLI (real Spark, local mode).
    report_dir = tmp_path / "report"
    table = run_report(out, report_dir)
    got = {(r["scenario"], r["plane"], r["api"]) for r in table}
    expected = {
        (s, plane, api)
        for s in SCENARIOS
        for plane, apis in (
            ("control", CONTROL_APIS),
            ("propagation", STEP_APIS),
            ("data", {"Produce"}),
        )
        for api in apis
    }
    assert got == expected
    for r in table:
        if (r["plane"], r["api"]) == ("control", "LeaderAndIsr"):
            mine = [
                x["latency_ms"]
                for x in rows
                if (x["scenario"], x["plane"], x["api"]) == (r["scenario"], "control", r["api"])
            ]
            assert int(r["count"]) == len(mine)
            assert float(r["max_ms"]) == pytest.approx(max(mine))
    markdown = (report_dir / "report.md").read_text()
    assert "Control-plane p99, cluster-shared ÷ cluster-separated: **" in markdown
    assert "LeaderAndIsr p99, cluster-shared ÷ cluster-separated: **" in markdown
    assert "Control-plane p99, shared ÷ separated" not in markdown
