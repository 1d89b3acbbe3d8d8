"""``kplane loadtest`` options, scenario brokers, targets and the progress line (no I/O)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kplane.tools.loadtest import runner as loadtest
from kplane.tools.loadtest.controller import Endpoint
from kplane.tools.loadtest.placement import (
    Placement,
    available_cpus,
    default_split,
    describe_placement,
    parse_cpus,
)
from kplane.tools.loadtest.progress import Progress
from kplane.tools.loadtest.scenarios import (
    SCENARIOS,
    ScenarioError,
    broker_properties,
    external_target,
    parse_address,
    target_from_events,
)
from kplane.tools.serve_process import json_events


def test_scenario_brokers() -> None:
    idle = broker_properties(SCENARIOS["idle"], Path("/tmp/x"), 8)
    shared = broker_properties(SCENARIOS["shared"], Path("/tmp/x"), 8)
    separated = broker_properties(SCENARIOS["separated"], Path("/tmp/x"), 8)

    assert shared["listeners"] == "CLIENT://127.0.0.1:0,INTERNAL://127.0.0.1:0"
    assert shared["listener.security.protocol.map"] == "CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT"
    assert shared["inter.broker.listener.name"] == "INTERNAL"
    assert "control.plane.listener.name" not in shared
    assert shared["kplane.produce.on.network.threads.max.bytes"] == "0"  # Kafka's single queue
    assert SCENARIOS["shared"].control_listener == "INTERNAL"

    for props in (idle, separated):
        assert props["listeners"] == (
            "CLIENT://127.0.0.1:0,INTERNAL://127.0.0.1:0,CONTROLLER://127.0.0.1:0"
        )
        assert "CONTROLLER:PLAINTEXT" in props["listener.security.protocol.map"]
        assert props["control.plane.listener.name"] == "CONTROLLER"
        assert "kplane.produce.on.network.threads.max.bytes" not in props
    assert SCENARIOS["separated"].control_listener == "CONTROLLER"

    for props in (idle, shared, separated):
        assert props["num.partitions"] == "8"
        assert props["group.initial.rebalance.delay.ms"] == "0"
        assert props["kplane.metrics.port"] == "0"
        assert props["log.dirs"] == "/tmp/x"
        assert "queued.max.requests" not in props and "num.io.threads" not in props
    assert [s.data_load for s in SCENARIOS.values()] == [False, True, True]


LOG = "\n".join(
    [
        '{"broker_id": 0, "controller_epoch": 3, "event": "controller elected"}',
        "not json",
        '{"url": "http://127.0.0.1:4000/metrics", "event": "metrics exposed", "level": "info"}',
        '{"listener": "CLIENT", "security_protocol": "PLAINTEXT", "port": 5001, '
        '"advertised": "CLIENT://127.0.0.1:5001", "event": "listener bound"}',
        '{"listener": "INTERNAL", "security_protocol": "PLAINTEXT", "port": 5002, '
        '"advertised": "INTERNAL://127.0.0.1:5002", "event": "listener bound"}',
        '{"event": "started", "level": "info"}',
    ]
)


def test_target_from_the_broker_log() -> None:
    events = json_events(LOG)
    assert [e["event"] for e in events][-1] == "started"
    target = target_from_events(events, 0, "INTERNAL")
    assert target.data == Endpoint("CLIENT", "127.0.0.1", 5001)
    assert target.control == Endpoint("INTERNAL", "127.0.0.1", 5002)
    assert [e.listener for e in target.endpoints] == ["CLIENT", "INTERNAL"]
    assert target.metrics_url == "http://127.0.0.1:4000/metrics"
    assert target.controller_epoch == 3
    with pytest.raises(ScenarioError, match="CONTROLLER"):
        target_from_events(events, 0, "CONTROLLER")


def test_external_target() -> None:
    target = external_target(
        "127.0.0.1:9092",
        "localhost:9094",
        ["CLIENT=127.0.0.1:9092", "CONTROLLER=127.0.0.1:9094"],
        5,
        None,
    )
    assert target.broker_id == 5
    assert target.data.listener == "CLIENT"
    assert (target.control.host, target.control.port) == ("localhost", 9094)
    assert len(target.endpoints) == 2
    defaulted = external_target("127.0.0.1:9092", None, ["CLIENT=127.0.0.1:9092"], 0, None)
    assert defaulted.control == defaulted.data


@pytest.mark.parametrize(
    ("bootstrap", "listeners", "message"),
    [
        ("127.0.0.1:9092", [], "--listener"),
        ("127.0.0.1:9092", ["CLIENT"], "NAME=host:port"),
        ("192.0.2.1:9092", ["CLIENT=192.0.2.1:9092"], "loopback"),
        ("127.0.0.1", ["CLIENT=127.0.0.1:9092"], "host:port"),
    ],
)
def test_external_target_refuses(bootstrap: str, listeners: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        external_target(bootstrap, None, listeners, 0, None)


def test_parse_address() -> None:
    assert parse_address("127.0.0.1:9092") == ("127.0.0.1", 9092)
    assert parse_address("[::1]:9092") == ("::1", 9092)


@pytest.mark.parametrize(
    "argv",
    [
        ["--scenarios", "idle,nope"],
        ["--scenarios", ""],
        ["--duration", "0"],
        ["--producers", "0"],
        ["--control-rate", "-1"],
        ["--rate", "-5"],
        ["--listener", "CLIENT=127.0.0.1:9092"],
        ["--metrics-url", "http://192.0.2.1:9999/metrics", "--bootstrap-server", "127.0.0.1:1"],
    ],
)
def test_bad_options_exit_2_with_one_line(
    argv: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert loadtest.main([*argv, "--out", str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("kplane loadtest: ") and captured.err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_add_parser_registers_the_subcommand() -> None:
    import argparse

    from kplane.tools.loadtest import cli as loadtest_cli

    parser = argparse.ArgumentParser()
    loadtest_cli.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["loadtest", "--producers", "3", "--broker-override", "a=b"])
    assert args.func is loadtest_cli.run
    assert (args.producers, args.broker_override, args.scenarios) == (
        3,
        ["a=b"],
        "idle,shared,separated",
    )
    assert (args.duration, args.control_rate, args.record_size, args.rate) == (10.0, 50.0, 512, 0)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_rewrites_one_line() -> None:
    stream = Terminal()
    progress = Progress(stream)
    progress.update("shared", 1.0, 10.0, 5000, 50, 12.345)
    progress.update("shared", 2.0, 10.0, 9000, 100, None)
    progress.done()
    text = stream.getvalue()
    assert text.count("\r") == 2 and text.endswith("\n") and text.count("\n") == 1
    assert "shared: 1/10 s, 5000 messages, 50 control requests, control p99 12.3 ms" in text
    assert "control p99 -" in text


def test_progress_elsewhere_prints_plain_lines_now_and_then() -> None:
    stream = io.StringIO()
    progress = Progress(stream, interval_s=3600)
    progress.update("idle", 1.0, 10.0, 0, 50, 1.0)
    progress.update("idle", 2.0, 10.0, 0, 100, 1.0)
    progress.message("scenario shared")
    lines = stream.getvalue().splitlines()
    assert lines == [
        "idle: 1/10 s, 0 messages, 50 control requests, control p99 1.0 ms",
        "scenario shared",
    ]


def test_cpu_lists() -> None:
    cpus = sorted(available_cpus())
    first, last = cpus[0], cpus[-1]
    assert parse_cpus(str(first)) == {first}
    if cpus == list(range(first, last + 1)):
        assert parse_cpus(f"{first}-{last}") == set(cpus)
    assert parse_cpus(",".join(map(str, cpus))) == set(cpus)
    for bad in ("", "a", "1-", "-1", "3-1", "0,,1"):
        with pytest.raises(ValueError, match="CPU list"):
            parse_cpus(bad)
    with pytest.raises(ValueError, match="not available"):
        parse_cpus(str(max(cpus) + 1000))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--broker-cpus", "x"], "CPU list"),
        (["--client-cpus", "100000"], "not available"),
        (
            [
                "--broker-cpus",
                "0",
                "--bootstrap-server",
                "127.0.0.1:9",
                "--listener",
                "A=127.0.0.1:9",
            ],
            "started brokers",
        ),
    ],
)
def test_bad_placement_exits_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert loadtest.main([*argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_started_broker_runs_on_its_cpus() -> None:
    cpu = min(available_cpus())
    placement = Placement(broker_cpus=frozenset({cpu}))
    out = subprocess.run(
        [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
        preexec_fn=placement.broker_preexec(),
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == f"[{cpu}]"
    assert Placement().broker_preexec() is None


def test_the_client_is_pinned_meanwhile_then_restored() -> None:
    before = os.sched_getaffinity(0)
    cpu = max(available_cpus())
    with Placement(client_cpus=frozenset({cpu})).client_pinned():
        assert os.sched_getaffinity(0) == {cpu}
    assert os.sched_getaffinity(0) == before
    with Placement().client_pinned():
        assert os.sched_getaffinity(0) == before


def test_default_split_and_its_description() -> None:
    assert default_split([0]) is None
    assert default_split([3, 1, 2]) == ("1", "2,3")
    assert describe_placement("1", "2,3", True, 3) == (
        "brokers on CPU 1, fake controller and load on CPU 2,3, the load under SCHED_IDLE"
    )
    assert describe_placement(None, None, False, 1).startswith("no placement (one CPU")
