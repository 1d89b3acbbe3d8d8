"""SIGINT and SIGTERM at any moment stop what a command started, quietly: during imports,
during a broker's start-up, during ``kplane cluster up``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kplane.testing.plugin import require_zookeeper
from tests.repo import REPO_ROOT

ENV = dict(os.environ, KPLANE_LOG_FORMAT="json")


def _as_from_a_terminal() -> None:
    """In the child: SIGINT's default disposition, as a command typed at a terminal has it
    (a process this one started earlier may have left it ignored here, and it is
    inherited)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _serve(tmp_path: Path, *overrides: str) -> subprocess.Popen[str]:
    config = str(REPO_ROOT / "configs/server.properties")
    args = [sys.executable, "-m", "kplane", "serve", config]
    for item in (f"log.dirs={tmp_path / 'data'}", "listeners=PLAINTEXT://127.0.0.1:0", *overrides):
        args += ["--override", item]
    return subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV, cwd=REPO_ROOT,
        preexec_fn=_as_from_a_terminal,
    )


def _wait_for_output(process: subprocess.Popen[str], needle: str, seen: list[str]) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        seen.append(line)
        if needle in line:
            return
    pytest.fail(f"{needle!r} never came: {''.join(seen)}")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_start_up_stops_the_broker_quietly(tmp_path: Path, signum: int) -> None:
    # ZooKeeper that is not there: start-up would wait a minute for it
    process = _serve(
        tmp_path, "zookeeper.connect=127.0.0.1:1", "zookeeper.connection.timeout.ms=60000"
    )
    seen: list[str] = []
    _wait_for_output(process, "Connecting to 127.0.0.1", seen)
    process.send_signal(signum)
    out, _ = process.communicate(timeout=30)
    output = "".join(seen) + out
    assert process.returncode == 0, output
    assert "Traceback" not in output
    assert "shutting down" in output
    assert "metadata store unavailable" not in output  # start-up was cut short, not timed out


def _interpreter_start_s() -> float:
    """How long this Python takes to start and stop with nothing to run (its site imports):
    a Ctrl-C before then is Python's own to report."""
    times = []
    for _ in range(3):
        began = time.monotonic()
        subprocess.run(
            [sys.executable, "-c", ""], check=True, env=ENV, preexec_fn=_as_from_a_terminal
        )
        times.append(time.monotonic() - began)
    return sorted(times)[1]


def test_ctrl_c_while_importing_prints_no_traceback(tmp_path: Path) -> None:
    after = _interpreter_start_s() + 0.03
    process = _serve(tmp_path)
    time.sleep(after)  # somewhere in kplane's imports; any moment must be quiet
    process.send_signal(signal.SIGINT)
    out, _ = process.communicate(timeout=30)
    assert process.returncode in (0, 130, -signal.SIGINT), out
    assert "Traceback" not in out


def _processes_mentioning(text: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline:
            pids.append(int(entry.name))
    return pids


@pytest.mark.slow
def test_ctrl_c_during_cluster_up_stops_every_process_it_started(tmp_path: Path) -> None:
    require_zookeeper()
    directory = tmp_path / "cluster"
    process = subprocess.Popen(
        [sys.executable, "-m", "kplane", "cluster", "up", "--brokers", "3", "--base-port",
         "0", "--dir", str(directory)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV, cwd=REPO_ROOT,
        preexec_fn=_as_from_a_terminal,
    )
    seen: list[str] = []
    _wait_for_output(process, "starting broker 1", seen)
    process.send_signal(signal.SIGINT)
    out, _ = process.communicate(timeout=60)
    output = "".join(seen) + out
    assert process.returncode == 130, output
    assert "Traceback" not in output
    assert "interrupted; stopping what was started" in output
    assert _processes_mentioning(str(directory)) == [], output
    assert not (directory / "cluster.json").exists()
