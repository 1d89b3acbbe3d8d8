"""``kplane serve`` as a child process, followed through its JSON log until it has started.

``kplane cluster`` and ``kplane loadtest`` run their brokers this way. A log may be appended to
(a restarted broker keeps its file), so only the lines of this run are read.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ServeFailed(RuntimeError):
    """The broker exited or did not start in time; the message is one line for the user."""


def json_events(text: str) -> list[dict[str, Any]]:
    """The JSON object lines of a log; other lines are skipped."""
    events = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return events


@dataclass(frozen=True)
class ServeProcess:
    """A started ``kplane serve`` and where its log lines of this run begin."""

    process: subprocess.Popen[bytes]
    log_path: Path
    log_offset: int

    def log_text(self) -> str:
        """What this run has logged so far."""
        with self.log_path.open("rb") as log:
            log.seek(self.log_offset)
            return log.read().decode("utf-8", errors="replace")

    def wait_started(self, timeout_s: float) -> list[dict[str, Any]]:
        """This run's events once it logged ``started``; ServeFailed when it exits first
        (naming its last error) or takes longer than ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            events = json_events(self.log_text())
            if any(e.get("event") == "started" for e in events):
                return events
            if self.process.poll() is not None:
                raise ServeFailed(
                    f"the broker exited with {self.process.returncode}: {self.last_error()}"
                )
            time.sleep(0.05)
        raise ServeFailed(f"the broker did not start within {timeout_s:.0f} s; see {self.log_path}")

    def stop(self, timeout_s: float) -> int:
        """SIGTERM, then SIGKILL if it has not exited within ``timeout_s``; its exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    def last_error(self) -> str:
        """The last error event of this run, else its last line (a traceback's exception)."""
        text = self.log_text()
        errors = [e for e in json_events(text) if e.get("level") in ("error", "critical")]
        if errors:
            return _one_line(errors[-1])
        lines = [line for line in text.splitlines() if line.strip()]
        return f"{lines[-1].strip() if lines else 'no output'} (log: {self.log_path})"


_ENVELOPE = ("event", "level", "timestamp", "logger")


def _one_line(event: dict[str, Any]) -> str:
    """``event: error, key=value ...`` of a JSON log event."""
    details = [
        str(value) if key == "error" else f"{key}={value}"
        for key, value in event.items()
        if key not in _ENVELOPE
    ]
    name = str(event.get("event"))
    return f"{name}: {', '.join(details)}" if details else name


def spawn_serve(
    config: str,
    overrides: Sequence[str],
    log_path: Path,
    *,
    append: bool = False,
    new_session: bool = False,
    preexec: Callable[[], None] | None = None,
) -> ServeProcess:
    """Start ``kplane serve CONFIG --override ...`` logging JSON to ``log_path`` (appended to
    or replaced); ``new_session`` detaches it from this terminal, ``preexec`` runs in the
    child before it starts (CPU pinning)."""
    args = [sys.executable, "-m", "kplane", "serve", config]
    for item in overrides:
        args += ["--override", item]
    env = dict(os.environ, KPLANE_LOG_FORMAT="json")
    with log_path.open("ab" if append else "wb") as out:
        offset = out.tell()
        process = subprocess.Popen(
            args,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=new_session,
            preexec_fn=preexec,
        )
    return ServeProcess(process, log_path, offset)
