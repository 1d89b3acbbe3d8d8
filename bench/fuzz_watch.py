"""The broker under fuzz: started as a ``kplane serve`` child or attached to by pid; its
liveness, open fds and RSS from ``/proc``, and the error lines of its JSON log."""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from fuzz_frames import Frame

from kplane.tools.serve_process import ServeProcess, json_events, spawn_serve

REPO_ROOT = Path(__file__).resolve().parents[1]
SASL_USER, SASL_PASSWORD = "admin", "admin-secret"
_JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
         f'user_{SASL_USER}="{SASL_PASSWORD}";')


_TCP_STATES = {"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1",
               "05": "FIN_WAIT2", "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT",
               "09": "LAST_ACK", "0A": "LISTEN", "0B": "CLOSING"}


@dataclass(frozen=True)
class Usage:
    """One look at the broker's resources: fds by sort, and RSS."""

    fds: int
    sockets: int
    log_files: int
    rss_mb: float
    threads: int = 0

    @property
    def other_fds(self) -> int:
        """Fds that are not partition-log files (which topics created by the fuzz open)."""
        return self.fds - self.log_files


@dataclass
class Broker:
    """A broker's pid, its listeners and the part of its log this run wrote."""

    pid: int
    log_path: Path
    log_offset: int
    listeners: dict[str, tuple[str, int]]
    log_dir: Path | None = None
    serve: ServeProcess | None = None

    def alive(self) -> bool:
        if self.serve is not None:
            return self.serve.process.poll() is None
        try:
            status = Path(f"/proc/{self.pid}/status").read_text()
        except OSError:
            return False
        return "\nState:\tZ" not in status

    def _fd_links(self) -> list[str]:
        """Where each open fd points (``socket:[inode]``, a path, ...)."""
        links = []
        fd_dir = Path(f"/proc/{self.pid}/fd")
        for entry in os.listdir(fd_dir):
            try:
                links.append(os.readlink(fd_dir / entry))
            except OSError:
                continue
        return links

    def fd_targets(self) -> Counter[str]:
        """What the open fds point at: ``socket``, ``pipe``, anon inodes, file paths."""
        return Counter(t.split(":[", 1)[0] if ":[" in t else t for t in self._fd_links())

    def sockets(self) -> Counter[str]:
        """The broker's TCP sockets as ``STATE listener-port->peer`` or
        ``STATE local->peer-port`` (the side that names a listener), to tell what grew."""
        inodes = {t[8:-1] for t in self._fd_links() if t.startswith("socket:[")}
        ports = {port for _, port in self.listeners.values()}
        found: Counter[str] = Counter()
        for table in ("tcp", "tcp6"):
            try:
                lines = Path(f"/proc/{self.pid}/net/{table}").read_text().splitlines()[1:]
            except OSError:
                continue
            for line in lines:
                fields = line.split()
                if fields[9] not in inodes:
                    continue
                local = int(fields[1].rsplit(":", 1)[1], 16)
                remote = int(fields[2].rsplit(":", 1)[1], 16)
                state = _TCP_STATES.get(fields[3], fields[3])
                if local in ports:
                    found[f"{state} listener:{local}<-client"] += 1
                else:
                    found[f"{state} out->{remote}"] += 1
        return found

    def usage(self) -> Usage:
        targets = self.fd_targets()
        log_dir = str(self.log_dir) if self.log_dir is not None else None
        fds = sum(targets.values())
        sockets = targets["socket"]
        log_files = sum(n for t, n in targets.items() if log_dir and t.startswith(log_dir))
        rss_kb = 0
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss_kb = int(line.split()[1])
        threads = len(os.listdir(f"/proc/{self.pid}/task"))
        return Usage(fds, sockets, log_files, round(rss_kb / 1024, 1), threads)

    def log_text(self) -> str:
        with self.log_path.open("rb") as log:
            log.seek(self.log_offset)
            return log.read().decode("utf-8", errors="replace")

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM (SIGKILL after ``timeout``) a broker this run started; its exit code."""
        if self.serve is None:
            return None
        return self.serve.stop(timeout)


def start_broker(work: Path, sasl: bool, config: str, startup_timeout: float = 60.0) -> Broker:
    """``kplane serve CONFIG`` on free 127.0.0.1 ports (a SASL_PLAINTEXT listener too with
    ``sasl``), logs under ``work``; returns once it logged ``started``."""
    listeners = "PLAINTEXT://127.0.0.1:0"
    overrides = [f"log.dirs={work / 'data'}"]
    if sasl:
        listeners += ",SASL_PLAINTEXT://127.0.0.1:0"
        overrides += ["sasl.enabled.mechanisms=PLAIN",
                      f"listener.name.sasl_plaintext.plain.sasl.jaas.config={_JAAS}"]
    overrides.append(f"listeners={listeners}")
    serve = spawn_serve(str(REPO_ROOT / config), overrides, work / "broker.log")
    try:
        events = serve.wait_started(startup_timeout)
    except Exception:
        serve.process.kill()
        raise
    bound = {e["listener"]: (e["bind_host"], int(e["port"]))
             for e in events if e.get("event") == "listener bound"}
    return Broker(serve.process.pid, serve.log_path, serve.log_offset, bound,
                  log_dir=(work / "data").resolve(), serve=serve)


def attach_broker(listeners: dict[str, tuple[str, int]], log: Path, pid: int) -> Broker:
    """A running broker; only what its log gains from now on is read."""
    return Broker(pid, log, log.stat().st_size, listeners)


@dataclass
class LogFindings:
    """Error-level lines and tracebacks of a log, grouped by ``event|api``."""

    errors: Counter[str] = field(default_factory=Counter)
    tracebacks: Counter[str] = field(default_factory=Counter)
    handler_failures: Counter[str] = field(default_factory=Counter)
    warnings: Counter[str] = field(default_factory=Counter)
    samples: dict[str, str] = field(default_factory=dict)
    # group -> up to three (connection id, timestamp) of the lines, to find their frames
    cases: dict[str, list[tuple[str, str]]] = field(default_factory=dict)

    def note_case(self, group: str, event: dict[str, object]) -> None:
        connection, stamp = event.get("connection"), event.get("timestamp")
        seen = self.cases.setdefault(group, [])
        if isinstance(connection, str) and isinstance(stamp, str) and len(seen) < 3:
            seen.append((connection, stamp))


def scan_log(text: str) -> LogFindings:
    """Error and critical lines, lines with a traceback (an ``exception`` key, or a raw
    Python traceback written outside the JSON log), handler failures (``request failed``,
    answered UNKNOWN_SERVER_ERROR) and warnings by event."""
    found = LogFindings()
    for event in json_events(text):
        group = f"{event.get('event')}|{event.get('api', event.get('api_key', '-'))}"
        level = event.get("level")
        if level in ("error", "critical"):
            found.errors[group] += 1
            found.note_case(f"error: {group}", event)
        if "exception" in event or "exc_info" in event:
            found.tracebacks[group] += 1
            found.samples.setdefault(group, str(event.get("exception", ""))[-2000:])
            found.note_case(f"traceback: {group}", event)
        if event.get("event") == "request failed":
            failure = f"{event.get('api')}|{event.get('reason')}"
            found.handler_failures[failure] += 1
            found.note_case(f"request failed: {failure}", event)
        elif level == "warning":
            found.warnings[str(event.get("event"))] += 1
    raw = [line for line in text.splitlines() if not line.startswith("{")]
    for i, line in enumerate(raw):
        if line.startswith("Traceback"):
            last = next((r for r in raw[i + 1:] if r and not r[0].isspace()), "?")
            group = f"raw traceback|{last[:160]}"
            found.tracebacks[group] += 1
            found.samples.setdefault(group, "\n".join(raw[i:i + 60])[-2000:])
    return found


def findings_json(found: LogFindings) -> dict[str, object]:
    return {
        "error_lines": sum(found.errors.values()),
        "errors": dict(found.errors.most_common()),
        "tracebacks": sum(found.tracebacks.values()),
        "traceback_groups": dict(found.tracebacks.most_common()),
        "traceback_samples": found.samples,
        "handler_failures": dict(found.handler_failures.most_common(30)),
        "warnings": dict(found.warnings.most_common(30)),
    }


def dump_frames(path: Path, frames: list[tuple[int, Frame]], note: str) -> None:
    """Write frames (connection, Frame) as JSON lines for a reproduction."""
    with path.open("w") as out:
        out.write(json.dumps({"note": note}) + "\n")
        for conn, frame in frames:
            out.write(json.dumps({"connection": conn, "kind": frame.kind,
                                  "api_key": frame.api_key, "api_version": frame.api_version,
                                  "hex": frame.data.hex()}) + "\n")
