"""The table ``kplane loadtest`` prints instead of its whole summary."""

from __future__ import annotations

from kplane.tools.loadtest.table import summary_table


def _scenario(p50: float, p99: float, rate: float) -> dict:
    return {
        "control": {
            "requests": 100, "errors": 0,
            "latency_ms": {"p50": p50, "p99": p99, "max": p99 * 2, "mean": p50},
        },
        "data": {"messages_per_s": rate},
    }  # fmt: skip


def test_the_table_names_what_ran_the_latencies_and_the_ratios() -> None:
    summary = {
        "scenarios": {
            "idle": _scenario(1.0, 2.0, 0),
            "shared": _scenario(40.0, 150.0, 20_000),
            "separated": _scenario(2.0, 5.0, 19_000),
        },
        "ratios": {
            "shared_control_p99/separated_control_p99": 30.0,
            "separated_control_p99/idle_control_p99": 2.5,
        },
        "options": {
            "duration": 10.0, "load_client": "wire", "producers": 500, "out": "results/x",
            "placement": "brokers on CPU 0, fake controller and load on CPU 1, the load under "
            "SCHED_IDLE",
        },
    }  # fmt: skip
    lines = summary_table(summary).splitlines()
    assert lines[0] == "kplane loadtest: 3 scenario(s) of 10.0 s, wire load over 500 connections"
    assert lines[1].startswith("placement: brokers on CPU 0")
    assert lines[3].split()[:4] == ["scenario", "control", "p50", "ms"]
    assert lines[5].split() == ["shared", "40.00", "150.00", "300.00", "100", "0", "20,000"]
    assert lines[8:10] == [
        "shared/separated control p99: 30.0x",
        "separated/idle control p99: 2.5x",
    ]
    assert lines[-1].startswith("results: results/x")
    assert len(lines) < 15


def test_the_cluster_ratios_name_their_api() -> None:
    summary = {
        "scenarios": {
            "cluster-shared": _scenario(100.0, 300.0, 30_000),
            "cluster-separated": _scenario(1.0, 12.0, 33_000),
        },
        "ratios": {
            "cluster-shared_control_p99/cluster-separated_control_p99": 25.0,
            "cluster-shared_LeaderAndIsr_p50/cluster-separated_LeaderAndIsr_p50": 90.0,
        },
        "options": {"duration": 10.0, "load_client": "wire", "producers": 500, "out": "r"},
    }
    lines = summary_table(summary).splitlines()
    assert "cluster-shared/cluster-separated control p99: 25.0x" in lines
    assert "cluster-shared/cluster-separated LeaderAndIsr p50: 90.0x" in lines
