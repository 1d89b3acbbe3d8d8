"""How the admin commands reach a broker that is not there: never a silent wait."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kplane.testing.plugin import free_port
from tests.repo import REPO_ROOT


def _configs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kplane", "configs", *args,
         "--describe", "--entity-type", "brokers", "--entity-name", "0"],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=60, check=False,
    )


def test_a_bootstrap_server_that_does_not_resolve_is_one_line() -> None:
    done = _configs("--bootstrap-server", "kplane-nowhere.invalid:9092")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "kplane configs: no resolvable bootstrap address in kplane-nowhere.invalid:9092"
    ]


def test_waiting_for_a_bootstrap_server_that_does_not_answer_is_said(tmp_path: Path) -> None:
    config = tmp_path / "client.properties"
    config.write_text("request.timeout.ms=5000\n")
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    done = _configs("--bootstrap-server", address, "--command-config", str(config))
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert lines[0].startswith("kplane configs: no answer from the bootstrap servers yet"), lines
    assert "up to 5 s" in lines[0]
    assert lines[1:] == [
        f"kplane configs: no broker available within request.timeout.ms: tried {address}"
    ]
    assert "Traceback" not in done.stderr
