"""bench/fuzz.py with a bounded count: a real ``kplane serve`` takes 20,000 hostile frames
without dying, hanging a connection, logging a traceback or keeping fds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.repo import REPO_ROOT

FUZZ = REPO_ROOT / "bench" / "fuzz.py"
FRAMES = 20_000


def _run(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(FUZZ), *args], capture_output=True, text=True,
                          cwd=REPO_ROOT, timeout=timeout, check=False)


def test_twenty_thousand_frames_leave_the_broker_as_it_was(tmp_path: Path) -> None:
    done = _run("--frames", str(FRAMES), "--max-seconds", "45", "--concurrency", "32",
                "--seed", "12", "--settle", "15", "--work-dir", str(tmp_path), timeout=150)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["frames_sent"] >= FRAMES // 4, result["failures"]
    assert result["deaths"] == 0, result["death_file"]
    assert result["hung"] == 0 and result["warmup"].get("hung", 0) == 0, result["hung_cases"]
    assert result["log"]["tracebacks"] == 0, result["log"]["traceback_groups"]
    assert result["log"]["error_lines"] == 0, result["log"]["errors"]
    assert not result["log"]["handler_failures"], result["log"]["handler_failures"]
    assert result["broker"]["fds_back"], result["broker"]


def test_a_seed_gives_the_same_frames() -> None:
    sys.path.insert(0, str(FUZZ.parent))
    from fuzz_drive import Driver, Target
    from fuzz_frames import FrameSource

    from kplane.protocol import api

    served = {k: list(api.kio_versions(k)) for k in (0, 1, 3, 18, 19, 36)}

    def plans(seed: int) -> list[object]:
        driver = Driver(FrameSource(served), [Target("h", 1), Target("h", 2, sasl=True)], seed,
                        frames=0, concurrency=1, per_connection=5, timeout=1)
        return [driver.plan(conn) for conn in range(300)]

    assert plans(5) == plans(5)
    assert plans(5) != plans(6)
