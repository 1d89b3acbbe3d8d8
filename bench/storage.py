"""Durable storage (issue 14): recovery after kill -9, and start-up with many partitions.

Two scenarios, each on ``kplane serve`` children with ``kplane.log.storage=file`` and a fresh
``log.dirs`` in a temporary directory (removed at the end), their JSON logs captured:

* ``recovery``: one topic of one partition is filled with ``--bytes`` (1 GiB; ``--quick``
  128 MiB) of 1 KiB records by confluent-kafka (acks=1, 1 MiB batches), the broker is killed
  with SIGKILL right after the last acknowledgement, and started again on the same
  directory: the seconds from process start to the first answered ApiVersions (raw socket,
  polled) and to a Metadata answer with a leader, the segments and bytes found, the
  ``log recovered`` / ``logs loaded`` lines of its log, whether every acknowledged record is
  still there (watermarks, the first and last records read back). Then SIGKILL again, the
  files written out and dropped from the page cache (fsync, POSIX_FADV_DONTNEED), and the
  same start from the disk (``--no-cold`` skips it); then a clean stop (SIGTERM) and the
  same start of the same bytes after it.
* ``startup``: an empty broker is started, then ``--repeat`` times (5) stopped with SIGTERM
  and started again (the baseline); then a fresh broker gets one topic of ``--partitions``
  (1,000) partitions, ``--records-per-partition`` (10) records in each, and ``--repeat``
  clean stops and restarts: the seconds to the first answered ApiVersions and to a Metadata
  answer listing every partition with a leader (medians and every run), and whether every
  record is still there (ListOffsets).

Every wait has a timeout (``--startup-timeout``, ``--fill-timeout``, ``--request-timeout``,
``--stop-timeout``); a scenario that fails reports ``error`` with its log tail and the other
one still runs. JSON goes to stdout (and ``--out FILE``), progress to stderr.

    .venv/bin/python bench/storage.py [--quick] [--bytes N] [--partitions N] [--out F]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import os
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _baselines import (
    LOOPBACK,
    REPO_ROOT,
    emit_json,
    event_time,
    free_port,
    machine,
    read_proc_status,
)

from kplane.tools.serve_process import ServeFailed, ServeProcess, json_events, spawn_serve

CONFIG = str(REPO_ROOT / "configs" / "server.properties")
RECORD_BYTES = 1024
BATCH_BYTES = 1_048_576
GIB = 1 << 30
MIB = 1 << 20
# Events of a start-up worth reporting: the log layer's own lines.
_REPORTED = ("logs loaded", "log recovered", "recover", "log loaded", "unclean", "started")


def _brief(d: dict[str, Any]) -> str:
    """A result for the progress line: without its log lines."""
    return json.dumps({k: v for k, v in d.items() if k != "log_lines"})


def _progress(message: str) -> None:
    ts = time.strftime("%H:%M:%S")
    print(f"[{ts}] {message}", file=sys.stderr, flush=True)


class BenchFailed(RuntimeError):
    pass


# -- the wire: one ApiVersions v0 over a raw socket ------------------------------------------


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed before the whole response arrived")
        buf += chunk
    return bytes(buf)


def api_versions(port: int, timeout: float, correlation_id: int = 1) -> int:
    """One ApiVersions v0 request; the number of APIs the answer lists (error 0), else raises."""
    client_id = b"bench-storage"
    header = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    with socket.create_connection((LOOPBACK, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(struct.pack(">i", len(header)) + header)
        (size,) = struct.unpack(">i", _recv_exact(sock, 4))
        body = _recv_exact(sock, size)
    corr, error, count = struct.unpack_from(">ihi", body)
    if corr != correlation_id or error != 0 or count <= 0:
        raise ConnectionError(f"ApiVersions answer: correlation {corr}, error {error}")
    return count


# -- one broker child ------------------------------------------------------------------------


class Broker:
    """A ``kplane serve`` child on a loopback port, logging JSON to its own file per start."""

    def __init__(self, name: str, work: Path, args: argparse.Namespace) -> None:
        self.name = name
        self.args = args
        self.log_dir = work / name / "data"
        self.log_dir.mkdir(parents=True)
        self.logs = work / name
        self.port = free_port()
        self.serve: ServeProcess | None = None
        self.starts = 0
        self.spawned_wall = 0.0
        self.spawned = 0.0

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def overrides(self) -> list[str]:
        out = [
            f"listeners=PLAINTEXT://{LOOPBACK}:{self.port}",
            f"log.dirs={self.log_dir}",
            "kplane.log.storage=file",
            "num.partitions=1",
        ]
        if self.args.segment_bytes:
            out.append(f"log.segment.bytes={self.args.segment_bytes}")
        return out

    def alive(self) -> bool:
        return self.serve is not None and self.serve.process.poll() is None

    def start(self) -> dict[str, Any]:
        """Spawn the broker and poll until ApiVersions is answered; the timings."""
        self.starts += 1
        log_path = self.logs / f"serve-{self.starts}.log"
        self.spawned_wall = time.time()
        self.spawned = time.monotonic()
        self.serve = spawn_serve(CONFIG, self.overrides(), log_path)
        deadline = self.spawned + self.args.startup_timeout
        last: Exception | None = None
        while True:
            if self.serve.process.poll() is not None:
                raise BenchFailed(
                    f"{self.name}: the broker exited with {self.serve.process.returncode} "
                    f"during start-up: {self.serve.last_error()}"
                )
            try:
                api_versions(self.port, timeout=max(0.2, min(5.0, deadline - time.monotonic())))
                break
            except (OSError, ConnectionError, struct.error) as exc:
                last = exc
            if time.monotonic() > deadline:
                raise BenchFailed(
                    f"{self.name}: no ApiVersions answer within {self.args.startup_timeout:.0f} s"
                    f" ({last!r})"
                )
            time.sleep(0.01)
        out = {"api_versions_s": round(time.monotonic() - self.spawned, 3)}
        return out

    def since_spawn(self) -> float:
        return round(time.monotonic() - self.spawned, 3)

    def events(self) -> list[dict[str, Any]]:
        return json_events(self.serve.log_text()) if self.serve is not None else []

    def startup_events(self) -> dict[str, Any]:
        """The log layer's lines of this start, when ``started`` was logged (ApiVersions may
        be answered before it), and how many lines of each event."""
        if self.serve is not None:
            with contextlib.suppress(ServeFailed):
                self.serve.wait_started(
                    max(1.0, self.spawned + self.args.startup_timeout - time.monotonic())
                )
        events = self.events()
        picked = [
            {k: v for k, v in e.items() if k not in ("level",)}
            for e in events
            if any(word in str(e.get("event", "")) for word in _REPORTED)
        ]
        out: dict[str, Any] = {"log_lines": picked[:20]}
        if len(picked) > 20:
            out["log_lines_left_off"] = len(picked) - 20
        started = next((e for e in events if e.get("event") == "started"), None)
        if started is not None and (t := event_time(started)) is not None:
            out["started_logged_s"] = round(t - self.spawned_wall, 3)
        out["events"] = dict(Counter(str(e.get("event")) for e in events))
        bad = [e for e in events if e.get("level") in ("error", "critical")]
        if bad:
            out["error_lines"] = bad[:5]
        return out

    def rss_mb(self) -> float | None:
        if not self.alive():
            return None
        assert self.serve is not None
        kb = read_proc_status(self.serve.process.pid).get("VmRSS")
        return round(kb / 1024, 1) if kb is not None else None

    def kill9(self) -> int:
        assert self.serve is not None
        self.serve.process.send_signal(signal.SIGKILL)
        rc = self.serve.process.wait(30)
        self.serve = None
        return rc

    def stop(self) -> dict[str, Any]:
        """SIGTERM, SIGKILL after --stop-timeout; the exit code and the seconds it took."""
        if self.serve is None:
            return {}
        t0 = time.monotonic()
        killed = False
        proc = self.serve.process
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(self.args.stop_timeout)
        except Exception:
            proc.kill()
            rc = proc.wait(30)
            killed = True
        self.serve = None
        return {
            "exit_code": rc,
            "stop_s": round(time.monotonic() - t0, 3),
            "stopped_by": "SIGKILL after timeout" if killed else "SIGTERM",
        }

    def log_tail(self, n: int = 10) -> list[str]:
        if self.serve is None:
            files = sorted(self.logs.glob("serve-*.log"))
            if not files:
                return []
            return files[-1].read_text(errors="replace").splitlines()[-n:]
        return self.serve.log_text().splitlines()[-n:]

    def partition_files(self, topic: str, partition: int) -> dict[str, Any]:
        d = self.log_dir / f"{topic}-{partition}"
        if not d.is_dir():
            return {"segments": [], "log_bytes": 0}
        logs = sorted(p for p in d.iterdir() if p.suffix == ".log")
        return {
            "segments": [[p.name, p.stat().st_size] for p in logs],
            "log_bytes": sum(p.stat().st_size for p in logs),
            "files": sorted(p.name for p in d.iterdir()),
        }


# -- clients -----------------------------------------------------------------------------------


def client_conf(broker: Broker, role: str, **extra: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": broker.bootstrap,
        "client.id": f"bench-storage-{role}",
        "log_level": 2,
        "log.connection.close": False,
    }
    conf.update(extra)
    return conf


def create_topic(broker: Broker, topic: str, partitions: int, timeout: float) -> float:
    """CreateTopics, then wait for every partition to have a leader; the seconds it took."""
    from confluent_kafka.admin import AdminClient, NewTopic

    t0 = time.monotonic()
    admin = AdminClient(client_conf(broker, "admin"))
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)],
        request_timeout=timeout,
        operation_timeout=timeout,
    )
    for fut in futures.values():
        fut.result(timeout=timeout + 5)
    wait_leaders(broker, admin, topic, partitions, t0 + timeout)
    return round(time.monotonic() - t0, 3)


def wait_leaders(broker: Broker, admin: Any, topic: str, partitions: int, deadline: float) -> None:
    """Until a Metadata answer lists ``partitions`` partitions of ``topic``, each with a leader."""
    seen = -1
    while True:
        if not broker.alive():
            raise BenchFailed(f"{broker.name}: the broker died waiting for {topic}'s leaders")
        with contextlib.suppress(Exception):
            md = admin.list_topics(
                topic=topic, timeout=max(0.5, min(10.0, deadline - time.monotonic()))
            )
            t = md.topics.get(topic)
            if t is not None and t.error is None:
                seen = sum(1 for p in t.partitions.values() if p.leader >= 0 and p.error is None)
                if seen >= partitions:
                    return
        if time.monotonic() > deadline:
            raise BenchFailed(f"{topic}: {seen} of {partitions} partitions with a leader in time")
        time.sleep(0.02)


def leaders_after_start(broker: Broker, topic: str, partitions: int) -> float:
    """Seconds from spawning the broker until Metadata lists every partition with a leader."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(client_conf(broker, "metadata"))
    wait_leaders(broker, admin, topic, partitions, broker.spawned + broker.args.startup_timeout)
    return broker.since_spawn()


def fill(broker: Broker, topic: str, total_bytes: int, timeout: float) -> dict[str, Any]:
    """Produce ``total_bytes`` of 1 KiB records to partition 0 (acks=1); what was acknowledged."""
    from confluent_kafka import Producer

    count = max(1, total_bytes // RECORD_BYTES)
    ok = [0]
    nerr = [0]
    errs: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            ok[0] += 1
        else:
            nerr[0] += 1
            if len(errs) < 5:
                errs.append(str(err))

    p = Producer(
        client_conf(
            broker,
            "fill",
            **{
                "acks": "1",
                "batch.size": BATCH_BYTES,
                "message.max.bytes": 2 * BATCH_BYTES,
                "linger.ms": 5,
                "queue.buffering.max.messages": 1_000_000,
                "queue.buffering.max.kbytes": 262_144,
                "message.timeout.ms": int((timeout + 30) * 1000),
                "on_delivery": on_delivery,
            },
        )
    )
    payload = os.urandom(RECORD_BYTES)
    t0 = time.monotonic()
    deadline = t0 + timeout
    sent = 0
    capped = False
    next_note = t0 + 10
    next_check = t0
    while sent < count:
        try:
            p.produce(topic, payload, partition=0)
            sent += 1
        except BufferError:
            p.poll(0.005)
        now = time.monotonic()
        if now >= next_check:
            next_check = now + 0.25
            p.poll(0)
            if not broker.alive():
                raise BenchFailed(f"{broker.name}: the broker died during the fill")
            if now > deadline:
                capped = True
                break
            if now >= next_note:
                next_note = now + 10
                _progress(f"   fill: {ok[0] * RECORD_BYTES / MIB:.0f} MiB acknowledged")
    left = -1
    flush_deadline = max(deadline, time.monotonic()) + 30
    while True:
        left = int(p.flush(0.25))
        if left == 0 or time.monotonic() > flush_deadline or not broker.alive():
            break
    seconds = time.monotonic() - t0
    if left:
        with contextlib.suppress(Exception):
            p.purge()
            p.flush(1)
    del p
    out = {
        "records_asked": count,
        "records_sent": sent,
        "records_acked": ok[0],
        "delivery_errors": nerr[0],
        "not_delivered": left,
        "value_bytes_acked": ok[0] * RECORD_BYTES,
        "seconds": round(seconds, 3),
        "mb_per_s": round(ok[0] * RECORD_BYTES / seconds / 1e6, 2) if seconds else None,
        "time_capped": capped,
    }
    if errs:
        out["delivery_error_samples"] = errs
    return out


def read_back(broker: Broker, topic: str, expected: int, timeout: float) -> dict[str, Any]:
    """The high watermark of partition 0, and the first and last 5 records read back."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        client_conf(
            broker,
            "check",
            **{
                "group.id": "bench-storage-check",
                "enable.auto.commit": False,
                "auto.offset.reset": "error",
            },
        )
    )
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=timeout)
        checks: dict[str, Any] = {}
        for where, start in (("first", low), ("last", max(low, high - 5))):
            c.assign([TopicPartition(topic, 0, start)])
            got: list[tuple[int, int]] = []
            deadline = time.monotonic() + timeout
            while len(got) < min(5, high - start) and time.monotonic() < deadline:
                for m in c.consume(num_messages=5, timeout=0.5):
                    if m.error() is None:
                        got.append((m.offset(), len(m.value() or b"")))
            got = got[:5]
            checks[where] = {
                "offsets": [o for o, _ in got],
                "ok": [o for o, _ in got] == list(range(start, min(start + 5, high)))
                and all(n == RECORD_BYTES for _, n in got),
            }
            c.unassign()
    finally:
        c.close()
    return {
        "watermarks": [low, high],
        "all_acked_records_present": low == 0 and high >= expected,
        "read_back": checks,
    }


def list_end_offsets(broker: Broker, topic: str, partitions: int, timeout: float) -> list[int]:
    """ListOffsets (latest) of every partition of ``topic``, in one AdminClient call."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient(client_conf(broker, "offsets"))
    futures = admin.list_offsets(
        {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)},
        request_timeout=timeout,
    )
    ends = [-1] * partitions
    for tp, fut in futures.items():
        ends[tp.partition] = fut.result(timeout=timeout + 5).offset
    return ends


# -- scenarios ---------------------------------------------------------------------------------


def evict(directory: Path) -> dict[str, Any]:
    """Write the files under ``directory`` to disk and drop them from the page cache
    (fsync, then POSIX_FADV_DONTNEED): the next read comes from the disk, as after a
    machine restart. Only these files: nothing else of the machine's cache is touched."""
    t0 = time.monotonic()
    files = [p for p in directory.rglob("*") if p.is_file()]
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    out: dict[str, Any] = {"files": len(files), "seconds": round(time.monotonic() - t0, 3)}
    resident = resident_bytes(files)
    if resident is not None:
        out["resident_bytes_after"] = resident
    return out


def resident_bytes(files: list[Path]) -> int | None:
    """Bytes of ``files`` in the page cache (util-linux fincore), None without it."""
    exe = shutil.which("fincore")
    if exe is None or not files:
        return None
    try:
        r = subprocess.run(
            [exe, "--bytes", "--noheadings", "--output", "RES", *map(str, files)],
            capture_output=True,
            text=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
        )
        return sum(int(x) for x in r.stdout.split())
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def recovery_checkpoint(broker: Broker) -> str | None:
    """The log dir's recovery-point-offset-checkpoint as it was left (None if absent)."""
    path = broker.log_dir / "recovery-point-offset-checkpoint"
    with contextlib.suppress(OSError):
        return path.read_text()
    return None


def restart(
    broker: Broker, topic: str, acked: int, timeout: float, *, unclean: bool = True
) -> dict[str, Any]:
    """Start the broker again on its log dirs: to ApiVersions, to a leader for partition 0,
    the log layer's lines, what is on disk, and whether every acknowledged record is there
    (after an unclean stop: the bytes kept and the bytes the recovery cut)."""
    r = broker.start()
    r["metadata_leader_s"] = leaders_after_start(broker, topic, 1)
    r.update(broker.startup_events())
    r["rss_mb_after_start"] = broker.rss_mb()
    r["on_disk"] = broker.partition_files(topic, 0)
    if unclean:
        r["bytes_recovered"] = r["on_disk"]["log_bytes"]
        r["bytes_dropped"] = sum(
            e["bytes_dropped"]
            for e in r["log_lines"]
            if "recover" in str(e.get("event", "")) and isinstance(e.get("bytes_dropped"), int)
        )
    r["check"] = read_back(broker, topic, acked, timeout)
    return r


def scenario_recovery(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Fill, SIGKILL, restart (page cache warm: a crashed process); SIGKILL, evict the
    files from the page cache, restart (cold: as after a machine restart); SIGTERM,
    restart (a clean stop of the same bytes)."""
    broker = Broker("recovery", work, args)
    topic = "storage-recovery"
    out: dict[str, Any] = {
        "fill_bytes_asked": args.bytes,
        "record_bytes": RECORD_BYTES,
        "segment_bytes": args.segment_bytes or "broker default (log.segment.bytes 1 GiB)",
    }
    try:
        _progress("recovery: first start")
        out["first_start"] = broker.start()
        out["create_topic_s"] = create_topic(broker, topic, 1, args.request_timeout)
        _progress(f"recovery: filling {topic}-0 with {args.bytes / MIB:.0f} MiB of 1 KiB records")
        out["fill"] = f = fill(broker, topic, args.bytes, args.fill_timeout)
        acked = f["records_acked"]
        _progress(f"   fill: {json.dumps(f)}")
        out["broker_rss_mb_before_kill"] = broker.rss_mb()
        out["killed_exit_code"] = broker.kill9()
        out["on_disk_after_kill"] = broker.partition_files(topic, 0)
        out["recovery_point_checkpoint_after_kill"] = recovery_checkpoint(broker)
        _progress(f"recovery: SIGKILLed; on disk {json.dumps(out['on_disk_after_kill'])}")

        _progress("recovery: restart after SIGKILL (page cache warm)")
        out["restart_after_kill"] = r = restart(broker, topic, acked, args.request_timeout)
        _progress(f"recovery: {_brief(r)}")

        if not args.no_cold:
            broker.kill9()
            out["recovery_point_checkpoint_after_second_kill"] = recovery_checkpoint(broker)
            out["evicted"] = ev = evict(broker.log_dir)
            _progress(f"recovery: SIGKILLed again, files evicted from the page cache {ev}")
            _progress("recovery: restart after SIGKILL (page cache cold)")
            r = restart(broker, topic, acked, args.request_timeout)
            out["restart_after_kill_cold_cache"] = r
            _progress(f"recovery: cold {_brief(r)}")

        _progress("recovery: clean stop, then restart")
        out["clean_stop"] = broker.stop()
        out["restart_after_clean_stop"] = c = restart(
            broker, topic, acked, args.request_timeout, unclean=False
        )
        _progress(f"recovery: clean restart {_brief(c)}")
        out["final_stop"] = broker.stop()
    except Exception as exc:  # report what was measured, and why it stopped
        out["error"] = f"{type(exc).__name__}: {exc}"
        out["log_tail"] = broker.log_tail()
        _progress(f"recovery: ERROR {out['error']}")
    finally:
        with contextlib.suppress(Exception):
            broker.stop()
    return out


def _logs_loaded_ms(run: dict[str, Any]) -> int | None:
    return next((e.get("ms") for e in run["log_lines"] if e.get("event") == "logs loaded"), None)


def clean_restarts(broker: Broker, args: argparse.Namespace, measure: Any = None) -> dict[str, Any]:
    """``--repeat`` times: SIGTERM, start again, ``measure(broker)`` (more figures of this
    start). Medians of the timings, every run's figures, and the last run in full."""
    runs: list[dict[str, Any]] = []
    for i in range(args.repeat):
        stopped = broker.stop()
        r = broker.start()
        if measure is not None:
            r.update(measure(broker))
        r.update(broker.startup_events())
        r["rss_mb"] = broker.rss_mb()
        r["stop_before"] = stopped
        runs.append(r)
        _progress(f"   restart {i + 1}/{args.repeat}: {_brief(r)}")
    out: dict[str, Any] = {"repeats": len(runs)}
    keys = ("api_versions_s", "metadata_all_leaders_s", "started_logged_s")
    for key in keys:
        values = [r[key] for r in runs if isinstance(r.get(key), int | float)]
        if values:
            out[key] = round(statistics.median(values), 3)
            out[f"{key}_runs"] = values
    out["logs_loaded_ms_runs"] = [_logs_loaded_ms(r) for r in runs]
    out["stop_s_runs"] = [r["stop_before"].get("stop_s") for r in runs]
    out["stop_exit_codes"] = [r["stop_before"].get("exit_code") for r in runs]
    out["last_run"] = runs[-1]
    return out


def scenario_startup(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """An empty broker's restart after a clean stop (the baseline), then the same with one
    topic of ``--partitions`` partitions holding a few records each."""
    out: dict[str, Any] = {
        "partitions": args.partitions,
        "records_per_partition": args.records_per_partition,
        "repeat": args.repeat,
    }
    empty = Broker("empty", work, args)
    try:
        _progress("startup: empty broker, first start")
        out["empty_first_start"] = empty.start()
        _progress("startup: empty broker, restarts after a clean stop (baseline)")
        out["empty_restart"] = clean_restarts(empty, args)
        empty.stop()
    except Exception as exc:
        out["error"] = f"empty broker: {type(exc).__name__}: {exc}"
        out["log_tail"] = empty.log_tail()
        _progress(f"startup: ERROR {out['error']}")
        return out
    finally:
        with contextlib.suppress(Exception):
            empty.stop()

    broker = Broker("partitions", work, args)
    topic = "storage-many"
    n = args.partitions
    want = args.records_per_partition

    def measure(b: Broker) -> dict[str, Any]:
        r: dict[str, Any] = {"metadata_all_leaders_s": leaders_after_start(b, topic, n)}
        ends = list_end_offsets(b, topic, n, args.request_timeout)
        r["records_after_restart"] = sum(max(0, x) for x in ends)
        r["partitions_short"] = sum(1 for x in ends if x < want)
        r["all_records_present"] = all(x >= want for x in ends)
        return r

    try:
        _progress(f"startup: {n} partitions")
        out["first_start"] = broker.start()
        out["create_topic_s"] = create_topic(broker, topic, n, args.request_timeout)
        out["produce"] = produce_each(broker, topic, n, want, args)
        out["rss_mb_before_stop"] = broker.rss_mb()
        _progress(f"startup: {n} partitions, restarts after a clean stop")
        r = clean_restarts(broker, args, measure)
        out["on_disk"] = _dir_summary(broker.log_dir)
        out["restart_after_clean_stop"] = r
        out["final_stop"] = broker.stop()
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        out["log_tail"] = broker.log_tail()
        _progress(f"startup: ERROR {out['error']}")
    finally:
        with contextlib.suppress(Exception):
            broker.stop()
    if "empty_restart" in out and "restart_after_clean_stop" in out:
        base = out["empty_restart"]["api_versions_s"]
        full = out["restart_after_clean_stop"]["api_versions_s"]
        out["api_versions_s_over_empty"] = round(full - base, 3)
    return out


def produce_each(
    broker: Broker, topic: str, partitions: int, per_partition: int, args: argparse.Namespace
) -> dict[str, Any]:
    """``per_partition`` records of 1 KiB to every partition (acks=1)."""
    from confluent_kafka import Producer

    ok = [0]
    nerr = [0]

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            ok[0] += 1
        else:
            nerr[0] += 1

    p = Producer(
        client_conf(
            broker,
            "each",
            **{
                "acks": "1",
                "linger.ms": 5,
                "on_delivery": on_delivery,
                "message.timeout.ms": int(args.request_timeout * 1000),
            },
        )
    )
    payload = os.urandom(RECORD_BYTES)
    t0 = time.monotonic()
    for part in range(partitions):
        for _ in range(per_partition):
            while True:
                try:
                    p.produce(topic, payload, partition=part)
                    break
                except BufferError:
                    p.poll(0.01)
        p.poll(0)
    deadline = time.monotonic() + args.request_timeout
    left = -1
    while time.monotonic() < deadline:
        left = int(p.flush(0.25))
        if left == 0 or not broker.alive():
            break
    del p
    total = partitions * per_partition
    if ok[0] != total:
        raise BenchFailed(
            f"produce: {ok[0]} of {total} acknowledged ({nerr[0]} errors, {left} left)"
        )
    return {"records_acked": ok[0], "seconds": round(time.monotonic() - t0, 3)}


def _dir_summary(log_dir: Path) -> dict[str, Any]:
    files = [p for p in log_dir.rglob("*") if p.is_file()]
    return {
        "partition_dirs": sum(1 for p in log_dir.iterdir() if p.is_dir()),
        "files": len(files),
        "bytes": sum(p.stat().st_size for p in files),
        "blocks_bytes": sum(p.stat().st_blocks * 512 for p in files),
    }


# -- main --------------------------------------------------------------------------------------


def _broker_tree() -> str | None:
    """The tree the broker children import (``PYTHONPATH=<other tree>`` measures another)."""
    import importlib.util

    spec = importlib.util.find_spec("broker")
    return str(Path(spec.origin).resolve().parent.parent) if spec and spec.origin else None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="128 MiB fill, 3 records a partition")
    ap.add_argument(
        "--bytes", type=int, default=None, help="fill size (default 1 GiB; quick 128 MiB)"
    )
    ap.add_argument("--partitions", type=int, default=1000, help="partitions of the start-up topic")
    ap.add_argument("--records-per-partition", type=int, default=None, help="default 10; quick 3")
    ap.add_argument(
        "--repeat", type=int, default=None, help="restarts after a clean stop (default 5; quick 2)"
    )
    ap.add_argument(
        "--segment-bytes", type=int, default=None, help="log.segment.bytes (default: the broker's)"
    )
    ap.add_argument(
        "--scenarios", default="recovery,startup", help="comma-separated: recovery,startup"
    )
    ap.add_argument("--startup-timeout", type=float, default=120.0)
    ap.add_argument("--fill-timeout", type=float, default=300.0)
    ap.add_argument("--request-timeout", type=float, default=120.0)
    ap.add_argument("--stop-timeout", type=float, default=60.0)
    ap.add_argument(
        "--no-cold",
        action="store_true",
        help="skip the second SIGKILL and the restart with the files evicted from the page cache",
    )
    ap.add_argument("--work-dir", default=None, help="parent of the temporary log dirs")
    ap.add_argument("--out", help="also write the JSON here")
    args = ap.parse_args(argv)
    if args.bytes is None:
        args.bytes = 128 * MIB if args.quick else GIB
    if args.repeat is None:
        args.repeat = 2 if args.quick else 5
    args.repeat = max(1, args.repeat)
    if args.records_per_partition is None:
        args.records_per_partition = 3 if args.quick else 10
    args.scenario_list = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    bad = [s for s in args.scenario_list if s not in ("recovery", "startup")]
    if bad:
        ap.error(f"unknown scenario(s) {bad}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    began = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="kplane-bench-storage-", dir=args.work_dir))
    result: dict[str, Any] = {
        "machine": machine(),
        "started_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "settings": {
            "quick": args.quick,
            "bytes": args.bytes,
            "partitions": args.partitions,
            "records_per_partition": args.records_per_partition,
            "segment_bytes": args.segment_bytes,
            "repeat": args.repeat,
            "storage": "kplane.log.storage=file",
            "broker_tree": _broker_tree(),
            "work_dir": str(work),
            "timing": "from spawning the kplane serve child to its first answered ApiVersions "
            "(raw socket, polled every 10 ms); Python start-up and imports included",
        },
    }
    interrupted = False
    home = os.getcwd()
    # The children run ``python -m kplane``, which imports from its working directory
    # first: from the temporary directory, they import what this process would import
    # (the installed tree, or ``PYTHONPATH``'s).
    os.chdir(work)
    try:
        if "recovery" in args.scenario_list:
            result["recovery"] = scenario_recovery(work, args)
        if "startup" in args.scenario_list:
            result["startup"] = scenario_startup(work, args)
    except KeyboardInterrupt:
        interrupted = True
        result["error"] = "interrupted"
    finally:
        os.chdir(home)
        shutil.rmtree(work, ignore_errors=True)
    result["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    result["wall_seconds"] = round(time.monotonic() - began, 1)
    emit_json(result, args.out)
    _progress(f"done in {result['wall_seconds']} s")
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
