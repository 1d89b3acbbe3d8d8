"""Out of file descriptors: the Acceptor pauses before accepting again and logs the fault
once per interval with a count, instead of spinning on "Too many open files"; once
descriptors free up it answers clients again. A real ``kplane serve`` with
RLIMIT_NOFILE 1024 takes 3,000 connections."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

from kio.schema.api_versions.v3.request import ApiVersionsRequest

from kplane.protocol.errors import ErrorCode
from kplane.testing.plugin import free_port, wait_for_port
from kplane.testing.wire import WireClient
from tests.repo import REPO_ROOT

BROKER_FILES = 1024
CONNECTIONS = 3000
API_VERSIONS = ApiVersionsRequest(client_software_name="t", client_software_version="1")


def _limit_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (BROKER_FILES, BROKER_FILES))


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wait_until_idle(pid: int, limit_s: float = 60.0) -> None:
    """Wait until ``kplane serve`` finished its start-up (the schema warm-up after
    "started" is the last of it): two half-seconds in a row with hardly any CPU used."""
    deadline = time.monotonic() + limit_s
    quiet = 0
    last = _cpu_seconds(pid)
    while quiet < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
        now = _cpu_seconds(pid)
        quiet = quiet + 1 if now - last < 0.02 else 0
        last = now


def _lines_about_it(log: Path) -> list[dict[str, object]]:
    lines = []
    for line in log.read_text(errors="replace").splitlines():
        if "open files" in line or "EMFILE" in line:
            try:
                lines.append(json.loads(line))
            except ValueError:
                lines.append({"raw": line})
    return lines


def _answered(port: int) -> bool:
    try:
        with WireClient("127.0.0.1", port, timeout=5) as client:
            return bool(client.request(API_VERSIONS).error_code == ErrorCode.none)
    except OSError:
        return False


def test_out_of_descriptors_the_acceptor_backs_off_and_recovers(tmp_path: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = CONNECTIONS + 1000
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))
    port = free_port()
    config = tmp_path / "server.properties"
    config.write_text(
        f"broker.id=0\nlisteners=PLAINTEXT://127.0.0.1:{port}\nlog.dirs={tmp_path / 'logs'}\n"
        "kplane.log.storage=memory\nnum.partitions=1\n"
    )
    log = tmp_path / "kplane.log"
    with open(log, "wb") as out:
        broker = subprocess.Popen(
            [sys.executable, "-m", "kplane", "serve", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO_ROOT,
            env=dict(os.environ, KPLANE_LOG_FORMAT="json"),
            preexec_fn=_limit_files,
        )
    sockets: list[socket.socket] = []
    try:
        wait_for_port("127.0.0.1", port)
        _wait_until_idle(broker.pid)
        for _ in range(CONNECTIONS):
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", port))
            sockets.append(sock)
        time.sleep(3)  # the broker runs out of descriptors
        cpu_before, started = _cpu_seconds(broker.pid), time.monotonic()
        time.sleep(8)
        cpu = (_cpu_seconds(broker.pid) - cpu_before) / (time.monotonic() - started)
        assert broker.poll() is None, log.read_text()[-3000:]
        about_it = _lines_about_it(log)
        assert 1 <= len(about_it) <= 500, len(about_it)
        assert all("count" in line for line in about_it), about_it[:3]
        assert cpu < 0.3, f"the broker used {cpu:.0%} of a CPU while out of descriptors"
        for sock in sockets:
            sock.close()
        sockets.clear()
        deadline = time.monotonic() + 60
        while not _answered(port):
            assert time.monotonic() < deadline, "not answering once descriptors were free"
            time.sleep(0.5)
        assert len(_lines_about_it(log)) <= 500
    finally:
        for sock in sockets:
            sock.close()
        broker.kill()
        broker.wait(10)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
