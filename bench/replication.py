"""Replication (issue 16): three brokers on a real ZooKeeper, what replicas cost and how fast
they recover.

The cluster, all on loopback: Debian's ZooKeeper (``tools.zookeeper.ZooKeeperServer``, in a
temporary directory) and three ``kplane serve configs/server.properties`` children with the
overrides of ``kplane cluster up`` (``tools.cluster.broker_overrides``: CLIENT, INTERNAL
(``inter.broker.listener.name``, which carries the replica fetches) and CONTROLLER listeners)
plus: ``broker.id`` 0-2, listeners on free ports chosen once (a restarted broker keeps its
ports), ``zookeeper.connect`` with a fresh chroot ``/kplane-bench-<run>``, a temporary
``log.dirs`` each, ``kplane.log.storage=file`` and ``zookeeper.session.timeout.ms`` from
``--session-timeout-ms`` (6000; kplane's default, as Kafka's, is 18000). Every other setting,
``replica.fetch.wait.max.ms`` (500) and ``replica.lag.time.max.ms`` (30000) among them, is the
broker's default. Every topic has one partition whose replicas are placed with CreateTopics'
replica assignment so the figures do not depend on where the controller is: the leader ``L``
and the follower ``F`` that the catch-up stops are the two brokers that are not the
controller, the third (``G``) is the controller. RF 3 topics have ``min.insync.replicas=2``.
The clients are confluent-kafka (librdkafka), bootstrapped with every CLIENT port.

Three phases, in this order, on the same cluster:

* ``throughput``: ``--records`` (100,000; ``--quick`` 20,000) records of 1 KiB per run
  (batch.size 1 MiB, linger.ms 5) to a topic with replication factor 1 (on ``L``) and one
  with replication factor 3 (``[L, F, G]``), with acks=1 and acks=all: a fresh producer
  per run sends one record (connections, metadata), then the clock
  runs from the first ``produce()`` to the end of ``flush()`` with every delivery report in.
  The four cases run round-robin ``--repeat`` times (3; ``--quick`` 1); MB/s (of record values)
  and records/s are the median of the runs, and ``rf3_vs_rf1`` is the RF 3 median over the
  RF 1 median for each acks. After each run the bench waits until the high watermark has
  reached the last acknowledged offset (``hw_caught_up_s``: the followers' lag after an acks=1
  run) so no run pays for the previous one's replication.
* ``catchup``: on a fresh RF 3 topic with every replica in the ISR, ``F`` is stopped with
  SIGTERM (controlled shutdown takes it out of the ISR), ``--catchup-bytes`` (256 MiB;
  ``--quick`` 32 MiB) of 1 KiB records are written with acks=1 and the high watermark waited
  for (``G`` has them all), then ``F`` is started again and the bench polls Metadata
  (``AdminClient.list_topics``) every 50 ms until ``F`` is in the partition's ISR. The catch-up
  rate is the bytes written over the seconds from spawning ``F`` to seeing it in the ISR (so
  Python's start-up, registration in ZooKeeper, the controller's LeaderAndIsr, the
  OffsetForLeaderEpoch exchange, the fetching, the leader's ISR change and the controller's
  UpdateMetadata are all in it); the same bytes over the time from ``F``'s ``started`` log line
  and up to the leader's ``isr changed`` log line are alongside.
* ``failover``: an idempotent acks=all producer (linger.ms 5) writes ``--failover-rate``
  (2,000) records/s of 1 KiB, each value holding its sequence number, to a fresh RF 3 topic;
  after ``--failover-before-s`` (5 s) the leader ``L`` gets SIGKILL. ``kill_to_first_ack_s`` is
  the time from the kill to the first delivery report of a record produced after the kill (the
  dead leader cannot have acknowledged it); ``max_ack_gap_s`` the longest time between two
  successive delivery reports; ``kill_to_new_leader_in_metadata_s`` when Metadata (polled
  every 50 ms from another thread) first names another leader. A SIGKILLed broker's ZooKeeper
  session only ends after ``zookeeper.session.timeout.ms``, so these figures are dominated by
  ``--session-timeout-ms``: they are what an operator sees with that setting, not with the
  default. The producer runs on for ``--failover-after-s`` (5 s) after the first
  acknowledgement, is flushed, and the partition is read back from offset 0 from the
  survivors: every acknowledged value must be there (``acked_lost`` 0), and duplicates are
  counted. Then ``L`` is started again and timed until it is back in the ISR.

JSON goes to stdout (and ``--out FILE``); progress to stderr. Every wait is bounded
(``--startup-timeout``, ``--wait-timeout``, ``--max-seconds``, ``--fill-timeout``,
``--failover-max-wait-s``, ``--stop-timeout``). A phase that fails (a follower that does not
catch up, an ISR that shrank during a throughput run, a record not acknowledged) keeps what it
measured, adds ``error`` and every broker's log tail, error lines and warnings by event, and
the next phase still runs, on a fresh cluster (ZooKeeper, brokers, directories: ``clusters``
lists each) so that what went wrong stays out of it, unless a broker the bench did not stop
has exited. At the end the brokers get SIGTERM
together (SIGKILL after ``--teardown-grace``, 5 s: with every broker leaving, a controlled
shutdown can only retry), then ZooKeeper, and the temporary directory is removed (``--keep``
keeps it: the brokers' JSON logs ``broker-<id>.log``, their log dirs and ZooKeeper's).
Exit status 1 when a phase failed or an acknowledged record was lost, 130 when interrupted.

    .venv/bin/python bench/replication.py [--quick] [--repeat N] [--records N]
        [--catchup-bytes N] [--catchup-throttle-mb-s R] [--session-timeout-ms MS]
        [--phases throughput,catchup,catchup_throttled,failover]
        [--keep] [--out F]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import itertools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import deque
from pathlib import Path
from typing import Any

from _baselines import (
    LOOPBACK,
    REPO_ROOT,
    Throttled,
    emit_json,
    event_time,
    free_port,
    machine,
    produce_paced,
    read_proc_status,
)

from kplane.broker.config.definitions import CONFIGS
from kplane.tools.cluster import broker_overrides, listener_ports
from kplane.tools.serve_process import ServeProcess, json_events, spawn_serve
from kplane.tools.zookeeper import ZooKeeperServer, unavailable_reason

CONFIG = str(REPO_ROOT / "configs" / "server.properties")
RECORD_BYTES = 1024
BATCH_BYTES = 1_048_576
MIB = 1 << 20
BROKERS = 3
PHASES = ("throughput", "catchup", "catchup_throttled", "failover")
POLL_S = 0.05  # Metadata polling interval of the catch-up and the failover
MIN_ISR_2 = {"min.insync.replicas": "2"}
# What the JSON keeps of every broker's log at the end (all of it after a failed phase).
_SUMMARY = ("error_count", "tracebacks", "warnings_by_event")


def _progress(message: str) -> None:
    ts = time.strftime("%H:%M:%S")
    print(f"[{ts}] {message}", file=sys.stderr, flush=True)


class BenchFailed(RuntimeError):
    pass


class BrokerDied(BenchFailed):
    """A broker the bench did not stop exited: the phases after it do not run."""


def _mb_s(nbytes: int, seconds: float | None) -> float | None:
    return round(nbytes / seconds / 1e6, 2) if seconds else None


def _with(overrides: list[str], **settings: str) -> list[str]:
    """``overrides`` with each ``key=value`` of ``settings`` replacing the same key (dots as
    ``__``: ``log__dirs``), or appended."""
    wanted = {k.replace("__", "."): v for k, v in settings.items()}
    out = [o for o in overrides if o.split("=", 1)[0] not in wanted]
    return out + [f"{k}={v}" for k, v in wanted.items()]


# -- the cluster ---------------------------------------------------------------------------------


class Node:
    """One ``kplane serve`` child: fixed ports, its own log.dirs, a JSON log appended to over
    its restarts (``broker-<id>.log``)."""

    def __init__(self, broker_id: int, work: Path, zk_connect: str, args: argparse.Namespace):
        self.id = broker_id
        self.args = args
        self.log_dir = work / f"broker-{broker_id}"
        self.log_dir.mkdir(parents=True)
        self.log_path = work / f"broker-{broker_id}.log"
        self.ports = {"CLIENT": free_port(), "INTERNAL": free_port(), "CONTROLLER": free_port()}
        listeners = ",".join(f"{n}://{LOOPBACK}:{p}" for n, p in self.ports.items())
        self.overrides = _with(
            broker_overrides(broker_id, 0, zk_connect, self.log_dir),
            listeners=listeners,
            zookeeper__connect=zk_connect,
            kplane__log__storage="file",
            zookeeper__session__timeout__ms=str(args.session_timeout_ms),
        )
        self.serve: ServeProcess | None = None
        self.spawned = 0.0  # monotonic
        self.spawned_wall = 0.0
        self.starts = 0

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.ports['CLIENT']}"

    def alive(self) -> bool:
        return self.serve is not None and self.serve.process.poll() is None

    def spawn(self) -> None:
        self.starts += 1
        self.spawned_wall = time.time()
        self.spawned = time.monotonic()
        self.serve = spawn_serve(CONFIG, self.overrides, self.log_path, append=True)

    def wait_started(self) -> float:
        """Until this run logged ``started``; seconds since the spawn. Checks the ports."""
        assert self.serve is not None
        events = self.serve.wait_started(self.args.startup_timeout)
        bound = listener_ports(events)
        if bound != self.ports:
            raise BenchFailed(f"broker {self.id}: listeners bound {bound}, asked {self.ports}")
        return round(time.monotonic() - self.spawned, 3)

    def events(self) -> list[dict[str, Any]]:
        """This run's events (since the last spawn)."""
        return json_events(self.serve.log_text()) if self.serve is not None else []

    def event_after_spawn(self, name: str, **match: Any) -> float | None:
        """Seconds from the spawn to the first event ``name`` of this run matching ``match``
        (by the log's wall-clock timestamp)."""
        for e in self.events():
            if e.get("event") == name and all(e.get(k) == v for k, v in match.items()):
                t = event_time(e)
                return round(t - self.spawned_wall, 3) if t is not None else None
        return None

    def rss_mb(self) -> float | None:
        if not self.alive():
            return None
        assert self.serve is not None
        kb = read_proc_status(self.serve.process.pid).get("VmHWM")
        return round(kb / 1024, 1) if kb is not None else None

    def sigterm(self) -> dict[str, Any]:
        """SIGTERM (controlled shutdown), SIGKILL after --stop-timeout; exit code, seconds."""
        if self.serve is None:
            return {}
        t0 = time.monotonic()
        rc = self.serve.stop(self.args.stop_timeout)
        out = {
            "exit_code": rc,
            "stop_s": round(time.monotonic() - t0, 3),
            "stopped_by": "SIGTERM" if rc != -signal.SIGKILL else "SIGKILL after --stop-timeout",
        }
        self.serve = None
        return out

    def sigkill(self) -> int:
        assert self.serve is not None
        self.serve.process.kill()
        rc = self.serve.process.wait(30)
        self.serve = None
        return rc

    def partition_bytes(self, topic: str) -> int:
        d = self.log_dir / f"{topic}-0"
        return sum(p.stat().st_size for p in d.glob("*.log")) if d.is_dir() else 0

    def log_report(self, tail: int = 15) -> dict[str, Any]:
        """The last lines and the error-level lines of the whole log (every run)."""
        try:
            with self.log_path.open("rb") as f:
                lines = [ln.decode("utf-8", "replace").rstrip() for ln in deque(f, maxlen=tail)]
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return {}
        events = json_events(text)
        bad = [e for e in events if e.get("level") in ("error", "critical")]
        warnings: dict[str, int] = {}
        for e in events:
            if e.get("level") == "warning":
                warnings[str(e.get("event"))] = warnings.get(str(e.get("event")), 0) + 1
        return {
            "tail": lines,
            "error_lines": bad[-10:],
            "error_count": len(bad),
            "tracebacks": text.count("Traceback (most recent call last)"),
            "warnings_by_event": warnings,
        }


class Cluster:
    def __init__(self, work: Path, args: argparse.Namespace) -> None:
        work.mkdir(parents=True)
        self.work = work
        self.args = args
        self.zk = ZooKeeperServer(work / "zookeeper")
        self.chroot = f"/kplane-bench-{uuid.uuid4().hex[:8]}"
        self.nodes: dict[int, Node] = {}
        self._admin: Any = None
        self.failed = False  # a phase failed on this cluster: the next one gets a fresh one

    def start(self) -> dict[str, Any]:
        t0 = time.monotonic()
        self.zk.start()
        out: dict[str, Any] = {"zookeeper_s": round(time.monotonic() - t0, 3)}
        connect = self.zk.connect + self.chroot
        self.nodes = {i: Node(i, self.work, connect, self.args) for i in range(BROKERS)}
        for n in self.nodes.values():
            n.spawn()
        out["brokers_started_s"] = {n.id: n.wait_started() for n in self.nodes.values()}
        self.wait_brokers(set(self.nodes))
        out["cluster_ready_s"] = round(time.monotonic() - t0, 3)
        out["zookeeper_connect"] = connect
        out["ports"] = {n.id: n.ports for n in self.nodes.values()}
        return out

    def bootstrap(self, ids: set[int] | None = None) -> str:
        return ",".join(n.bootstrap for n in self.nodes.values() if ids is None or n.id in ids)

    def conf(self, role: str, ids: set[int] | None = None, **extra: Any) -> dict[str, Any]:
        c: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap(ids),
            "client.id": f"bench-replication-{role}",
            "log_level": 2,
            "log.connection.close": False,
        }
        c.update(extra)
        return c

    def admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        if self._admin is None:
            self._admin = AdminClient(self.conf("admin"))
        return self._admin

    def check_alive(self) -> None:
        """Fails when a broker that should run (not stopped or killed by the bench) exited."""
        for n in self.nodes.values():
            if n.serve is not None and not n.alive():
                rc = n.serve.process.returncode
                raise BrokerDied(f"broker {n.id} exited with {rc}: {n.serve.last_error()}")

    def metadata(self, topic: str | None = None, admin: Any = None, timeout: float = 5.0) -> Any:
        admin = admin or self.admin()
        if topic is None:
            return admin.list_topics(timeout=timeout)
        return admin.list_topics(topic=topic, timeout=timeout)

    def wait_brokers(self, ids: set[int]) -> None:
        deadline = time.monotonic() + self.args.startup_timeout
        seen: set[int] = set()
        while time.monotonic() < deadline:
            self.check_alive()
            with contextlib.suppress(Exception):
                md = self.metadata(timeout=2)
                seen = set(md.brokers)
                if seen >= ids and md.controller_id in seen:
                    return
            time.sleep(POLL_S)
        raise BenchFailed(f"Metadata lists brokers {sorted(seen)}, want {sorted(ids)}")

    def controller(self) -> int:
        return int(self.metadata(timeout=5).controller_id)

    def partition(self, topic: str, admin: Any = None) -> Any:
        """Partition 0 of ``topic`` in a fresh Metadata answer, or None."""
        with contextlib.suppress(Exception):
            t = self.metadata(topic, admin, timeout=2).topics.get(topic)
            if t is not None and t.error is None:
                return t.partitions.get(0)
        return None

    def wait_partition(self, topic: str, leader: int, isr: set[int], what: str) -> float:
        """Until Metadata shows ``leader`` and exactly ``isr`` for partition 0; seconds."""
        t0 = time.monotonic()
        deadline = t0 + self.args.wait_timeout
        last = None
        while time.monotonic() < deadline:
            p = self.partition(topic)
            if p is not None:
                last = (p.leader, sorted(p.isrs))
                if p.leader == leader and set(p.isrs) == isr:
                    return round(time.monotonic() - t0, 3)
            time.sleep(POLL_S)
        raise BenchFailed(
            f"{topic}: {what} not seen in {self.args.wait_timeout:.0f} s "
            f"(last leader, ISR: {last}; want {leader}, {sorted(isr)})"
        )

    def create_topic(self, topic: str, replicas: list[int], **configs: str) -> float:
        from confluent_kafka.admin import NewTopic

        t0 = time.monotonic()
        fut = self.admin().create_topics(
            [NewTopic(topic, num_partitions=1, replica_assignment=[replicas], config=configs)],
            request_timeout=30,
            operation_timeout=30,
        )[topic]
        fut.result(timeout=35)
        self.wait_partition(topic, replicas[0], set(replicas), "every replica in the ISR")
        return round(time.monotonic() - t0, 3)

    def high_watermark(self, topic: str) -> int:
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        futs = self.admin().list_offsets(
            {TopicPartition(topic, 0): OffsetSpec.latest()}, request_timeout=10
        )
        return int(next(iter(futs.values())).result(timeout=15).offset)

    def wait_high_watermark(self, topic: str, end: int) -> float:
        """Until the high watermark of partition 0 reaches ``end``; seconds."""
        t0 = time.monotonic()
        deadline = t0 + self.args.wait_timeout
        hw = -1
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                hw = self.high_watermark(topic)
                if hw >= end:
                    return round(time.monotonic() - t0, 3)
            time.sleep(0.02)
        raise BenchFailed(f"{topic}: high watermark {hw}, want {end}, after the wait")

    def logs(self) -> dict[int, Any]:
        return {n.id: n.log_report() for n in self.nodes.values()}

    def usage(self) -> dict[int, Any]:
        return {n.id: {"peak_rss_mb": n.rss_mb()} for n in self.nodes.values()}

    def stop(self) -> dict[str, Any]:
        """SIGTERM every live broker at once, SIGKILL what is left after
        ``--teardown-grace`` seconds (with every broker leaving, a controlled shutdown can
        only retry), then ZooKeeper."""
        self._admin = None
        out: dict[str, Any] = {}
        t0 = time.monotonic()
        running = [n for n in self.nodes.values() if n.serve is not None]
        for n in running:
            assert n.serve is not None
            with contextlib.suppress(ProcessLookupError):
                n.serve.process.send_signal(signal.SIGTERM)
        deadline = t0 + self.args.teardown_grace
        for n in running:
            assert n.serve is not None
            proc = n.serve.process
            try:
                rc = proc.wait(max(0.0, deadline - time.monotonic()))
                how = "SIGTERM"
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait(30)
                how = "SIGKILL after the grace"
            out[n.id] = {"exit_code": rc, "stopped_by": how}
            n.serve = None
        out["brokers_s"] = round(time.monotonic() - t0, 3)
        self.zk.stop()
        return out


# -- producing ----------------------------------------------------------------------------------


class ClientErrors:
    """error_cb: counts and keeps the first few errors."""

    def __init__(self) -> None:
        self.count = 0
        self.samples: list[str] = []

    def __call__(self, err: Any) -> None:
        self.count += 1
        if len(self.samples) < 5:
            self.samples.append(str(err))


def produce_run(
    cluster: Cluster, topic: str, count: int, acks: str, max_seconds: float
) -> dict[str, Any]:
    """One record, then ``count`` 1 KiB records to partition 0 as fast as they go, timed
    from the first produce() to the end of flush()."""
    from confluent_kafka import Producer

    ok = [0]
    nerr = [0]
    errs: list[str] = []
    last_offset = [-1]

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            ok[0] += 1
            last_offset[0] = max(last_offset[0], msg.offset())
        else:
            nerr[0] += 1
            if len(errs) < 5:
                errs.append(str(err))

    client_errors = ClientErrors()
    p = Producer(
        cluster.conf(
            f"produce-acks{acks}",
            **{
                "acks": acks,
                "batch.size": BATCH_BYTES,
                "message.max.bytes": 2 * BATCH_BYTES,
                "linger.ms": 5,
                "queue.buffering.max.messages": 1_000_000,
                "queue.buffering.max.kbytes": 1_048_576,
                "message.timeout.ms": int((max_seconds + cluster.args.wait_timeout) * 1000),
                "on_delivery": on_delivery,
                "error_cb": client_errors,
            },
        )
    )
    payload = os.urandom(RECORD_BYTES)
    left = -1
    try:
        p.produce(topic, payload, partition=0)
        if p.flush(30) != 0 or ok[0] != 1:
            raise BenchFailed(
                f"{topic}: the first record (acks={acks}) was not acknowledged within 30 s "
                f"(delivery errors {errs}, client errors {client_errors.samples})"
            )
        ok[0] = 0
        clock = time.perf_counter
        start = clock()
        deadline = start + max_seconds
        sent, capped = produce_paced(
            p, topic, payload, count, deadline, Throttled(cluster.check_alive)
        )
        flush_deadline = max(deadline, clock()) + cluster.args.wait_timeout
        while True:
            left = int(p.flush(0.25))
            if left == 0 or clock() > flush_deadline:
                break
            cluster.check_alive()
        end = clock()
    finally:
        if left != 0:
            with contextlib.suppress(Exception):
                p.purge()
                p.flush(1)
    del p
    elapsed = end - start
    out: dict[str, Any] = {
        "records_sent": sent,
        "records_acked": ok[0],
        "delivery_errors": nerr[0],
        "not_delivered_after_flush": left,
        "seconds": round(elapsed, 3),
        "records_per_s": round(ok[0] / elapsed, 1) if elapsed else None,
        "mb_per_s": _mb_s(ok[0] * RECORD_BYTES, elapsed),
        "time_capped": capped,
        "end_offset": last_offset[0] + 1,
        "valid": nerr[0] == 0 and left == 0 and ok[0] == sent,
    }
    if errs:
        out["delivery_error_samples"] = errs
    if client_errors.count:
        out["client_errors"] = client_errors.count
        out["client_error_samples"] = client_errors.samples
    return out


# -- phases ---------------------------------------------------------------------------------------


def isr_shrinks(cluster: Cluster, leader: int, topic: str, since_wall: float) -> list[Any]:
    """The leader's ``isr changed`` lines for partition 0 of ``topic`` since ``since_wall``
    that took a replica out."""
    out = []
    for e in cluster.nodes[leader].events():
        if (
            e.get("event") == "isr changed"
            and e.get("partition") == f"{topic}-0"
            and (t := event_time(e)) is not None
            and t >= since_wall
            and len(e.get("new_isr") or []) < len(e.get("old_isr") or [])
        ):
            out.append({k: e.get(k) for k in ("old_isr", "new_isr", "timestamp")})
    return out


def phase_throughput(
    cluster: Cluster, roles: dict[str, int], run: str, out: dict[str, Any]
) -> None:
    args = cluster.args
    leader, f, g = roles["L"], roles["F"], roles["G"]
    topics = {"rf1": f"rf1-{run}", "rf3": f"rf3-{run}"}
    out.update(
        {
            "records_per_run": args.records,
            "record_bytes": RECORD_BYTES,
            "producer": "batch.size 1 MiB, linger.ms 5, one partition",
            "repeat": args.repeat,
            "replicas": {"rf1": [leader], "rf3": [leader, f, g]},
        }
    )
    out["create_topic_s"] = {
        "rf1": cluster.create_topic(topics["rf1"], [leader]),
        "rf3": cluster.create_topic(topics["rf3"], [leader, f, g], **MIN_ISR_2),
    }
    cases = [(rf, acks) for rf in ("rf1", "rf3") for acks in ("1", "all")]
    runs: dict[str, list[dict[str, Any]]] = {f"{rf}_acks{a}": [] for rf, a in cases}
    out["runs"] = runs  # every run as it is measured; replaced by the summary at the end
    for i in range(args.repeat):
        for rf, acks in cases:
            key = f"{rf}_acks{acks}"
            topic = topics[rf]
            replicas = out["replicas"][rf]
            cluster.wait_partition(topic, leader, set(replicas), "every replica in the ISR")
            began = time.time()
            r = produce_run(cluster, topic, args.records, acks, args.max_seconds)
            runs[key].append(r)
            if not r["valid"]:
                raise BenchFailed(f"{key} run {i + 1}: not every record acknowledged")
            t0 = time.monotonic()
            cluster.wait_high_watermark(topic, r["end_offset"])
            r["hw_caught_up_s"] = round(time.monotonic() - t0, 3)
            p = cluster.partition(topic)
            r["isr_after"] = sorted(p.isrs) if p is not None else None
            shrinks = isr_shrinks(cluster, leader, topic, began)
            if shrinks:
                r["isr_shrinks"] = shrinks
                raise BenchFailed(
                    f"{key} run {i + 1}: the leader took replicas out of the ISR during the "
                    f"run or the wait for the high watermark ({r['hw_caught_up_s']} s): "
                    f"{shrinks}"
                )
            if r["isr_after"] != sorted(replicas):
                raise BenchFailed(
                    f"{key} run {i + 1}: the ISR is {r['isr_after']} after the run, not "
                    f"{sorted(replicas)} (the high watermark reached the end "
                    f"{r['hw_caught_up_s']} s after the flush)"
                )
            _progress(
                f"   {key} run {i + 1}/{args.repeat}: {r['mb_per_s']} MB/s, "
                f"{r['records_per_s']} records/s, high watermark {r['hw_caught_up_s']} s later"
            )
    del out["runs"]
    for key, rs in runs.items():
        out[key] = {
            "mb_per_s": round(statistics.median(r["mb_per_s"] for r in rs), 2),
            "records_per_s": round(statistics.median(r["records_per_s"] for r in rs), 1),
            "mb_per_s_runs": [r["mb_per_s"] for r in rs],
            "hw_caught_up_s_runs": [r["hw_caught_up_s"] for r in rs],
            "runs": rs,
        }
    out["rf3_vs_rf1"] = {
        f"acks{a}": {
            "mb_per_s": round(out[f"rf3_acks{a}"]["mb_per_s"] / out[f"rf1_acks{a}"]["mb_per_s"], 3),
            "records_per_s": round(
                out[f"rf3_acks{a}"]["records_per_s"] / out[f"rf1_acks{a}"]["records_per_s"], 3
            ),
        }
        for a in ("1", "all")
    }


def phase_catchup_throttled(
    cluster: Cluster, roles: dict[str, int], run: str, out: dict[str, Any]
) -> None:
    """The catch-up with ``leader.replication.throttled.rate`` and
    ``follower.replication.throttled.rate`` (dynamic, on every broker) and the topic's
    throttled replicas ``*``: the follower catches up at about the throttle once the quota's
    window (11 samples of 1 s, measured over at least 10 s, as Kafka's Rate is) has passed, so
    the catch-up should be several times the rate times 10 s to show it."""
    rate = int(cluster.args.catchup_throttle_mb_s * 1e6)
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    entries = [
        ConfigEntry(name, str(rate), incremental_operation=AlterConfigOpType.SET)
        for name in ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
    ]
    for broker in cluster.nodes:  # one broker resource per call, as AdminClient requires
        resource = ConfigResource(
            ConfigResource.Type.BROKER, str(broker), incremental_configs=entries
        )
        for fut in cluster.admin().incremental_alter_configs([resource]).values():
            fut.result(timeout=30)
    out["throttle_bytes_per_s"] = rate
    throttled = {
        "leader.replication.throttled.replicas": "*",
        "follower.replication.throttled.replicas": "*",
    }
    phase_catchup(cluster, roles, f"{run}-throttled", out, throttled)
    if out.get("log_mb_per_s") is not None:
        out["log_rate_over_throttle"] = round(out["log_mb_per_s"] * 1e6 / rate, 3)


def phase_catchup(
    cluster: Cluster,
    roles: dict[str, int],
    run: str,
    out: dict[str, Any],
    topic_configs: dict[str, str] | None = None,
) -> None:
    args = cluster.args
    leader, f, g = roles["L"], roles["F"], roles["G"]
    topic = f"catchup-{run}"
    follower = cluster.nodes[f]
    out.update(
        {
            "bytes_asked": args.catchup_bytes,
            "record_bytes": RECORD_BYTES,
            "replicas": [leader, f, g],
            "stopped_follower": f,
            "acks": "1",
            "topic_configs": topic_configs or {},
        }
    )
    out["create_topic_s"] = cluster.create_topic(
        topic, [leader, f, g], **MIN_ISR_2, **(topic_configs or {})
    )
    _progress(f"catchup: SIGTERM to broker {f}")
    out["follower_stop"] = follower.sigterm()
    out["isr_shrunk_s"] = cluster.wait_partition(
        topic, leader, {leader, g}, "the ISR without the stopped follower"
    )
    _progress(f"catchup: writing {args.catchup_bytes / MIB:.0f} MiB with acks=1")
    began = time.time()
    fill = produce_run(
        cluster, topic, max(1, args.catchup_bytes // RECORD_BYTES), "1", args.fill_timeout
    )
    out["fill"] = fill
    if not fill["valid"] or fill["time_capped"]:
        raise BenchFailed("catchup fill: not every record acknowledged in time")
    out["fill_hw_caught_up_s"] = cluster.wait_high_watermark(topic, fill["end_offset"])
    shrinks = isr_shrinks(cluster, leader, topic, began)
    if shrinks:
        out["isr_shrinks"] = shrinks
        raise BenchFailed(
            f"catchup: broker {g} (in the ISR) fell out of it during the fill or the wait for "
            f"the high watermark ({out['fill_hw_caught_up_s']} s): {shrinks}"
        )
    value_bytes = fill["records_acked"] * RECORD_BYTES
    log_bytes = cluster.nodes[leader].partition_bytes(topic)
    out["value_bytes"] = value_bytes
    out["leader_log_bytes"] = log_bytes
    out["end_offset"] = fill["end_offset"]

    from confluent_kafka.admin import AdminClient

    admin = AdminClient(cluster.conf("isr-poll", {leader, g}))
    cluster.partition(topic, admin)  # connected before the clock starts
    _progress(f"catchup: starting broker {f} again, polling the ISR every {POLL_S * 1000:.0f} ms")
    follower.spawn()
    deadline = follower.spawned + args.wait_timeout
    polls = 0
    isr: list[int] = []
    while True:
        cluster.check_alive()
        p = cluster.partition(topic, admin)
        now = time.monotonic()
        polls += 1
        if p is not None:
            isr = sorted(p.isrs)
            if f in isr:
                break
        if now > deadline:
            raise BenchFailed(
                f"catchup: broker {f} not back in {topic}'s ISR {args.wait_timeout:.0f} s "
                f"after its start (ISR {isr}, follower log {follower.partition_bytes(topic)} "
                f"of {log_bytes} bytes)"
            )
        time.sleep(max(0.0, now + POLL_S - time.monotonic()))
    seconds = round(now - follower.spawned, 3)
    del admin
    started = follower.event_after_spawn("started")
    changed = None
    for e in cluster.nodes[leader].events():
        if (
            e.get("event") == "isr changed"
            and e.get("partition") == f"{topic}-0"
            and f in (e.get("new_isr") or [])
            and (t := event_time(e)) is not None
            and t > follower.spawned_wall
        ):
            changed = round(t - follower.spawned_wall, 3)
            break
    out["isr"] = isr
    out["metadata_polls"] = polls
    out["follower_log_bytes"] = follower.partition_bytes(topic)
    out["spawn_to_isr_s"] = seconds
    out["mb_per_s"] = _mb_s(value_bytes, seconds)
    out["log_mb_per_s"] = _mb_s(log_bytes, seconds)
    out["spawn_to_started_logged_s"] = started
    out["spawn_to_leader_isr_changed_logged_s"] = changed
    if started is not None and changed is not None and changed > started:
        out["started_to_isr_changed_s"] = round(changed - started, 3)
        out["mb_per_s_started_to_isr_changed"] = _mb_s(value_bytes, changed - started)
    out["follower_truncation_lines"] = [
        e
        for e in follower.events()
        if str(e.get("event", "")).startswith(("log truncated", "log restarted"))
        and e.get("partition") == f"{topic}-0"
    ]


class MetadataWatcher(threading.Thread):
    """Polls partition 0's leader and ISR every 50 ms and keeps each change with its time."""

    def __init__(self, cluster: Cluster, topic: str, ids: set[int]) -> None:
        from confluent_kafka.admin import AdminClient

        super().__init__(name="metadata-watcher", daemon=True)
        self.cluster = cluster
        self.topic = topic
        self.admin = AdminClient(cluster.conf("watcher", ids))
        self.changes: list[tuple[float, int, list[int]]] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        last: tuple[int, list[int]] | None = None
        while not self.stop_event.is_set():
            t0 = time.monotonic()
            p = self.cluster.partition(self.topic, self.admin)
            if p is not None and (p.leader, sorted(p.isrs)) != last:
                last = (p.leader, sorted(p.isrs))
                self.changes.append((time.monotonic(), *last))
            self.stop_event.wait(max(0.0, t0 + POLL_S - time.monotonic()))

    def stop(self) -> None:
        self.stop_event.set()
        self.join(15)


def _value(seq: int) -> bytes:
    head = b"%012d" % seq
    return head + b"x" * (RECORD_BYTES - len(head))


def phase_failover(cluster: Cluster, roles: dict[str, int], run: str, out: dict[str, Any]) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    args = cluster.args
    leader, f, g = roles["L"], roles["F"], roles["G"]
    topic = f"failover-{run}"
    controller = cluster.controller()
    out.update(
        {
            "rate_records_per_s": args.failover_rate,
            "record_bytes": RECORD_BYTES,
            "producer": "acks=all, enable.idempotence=true, linger.ms 5",
            "replicas": [leader, f, g],
            "killed_leader": leader,
            "killed_leader_was_controller": leader == controller,
            "controller": controller,
            "zookeeper_session_timeout_ms": args.session_timeout_ms,
        }
    )
    out["create_topic_s"] = cluster.create_topic(topic, [leader, f, g], **MIN_ISR_2)
    clock = time.monotonic
    acked: list[int] = []
    ack_times: list[float] = []
    failed: list[int] = []
    fail_samples: list[str] = []
    marks: dict[str, Any] = {"seq_at_kill": None, "first_post_kill_ack": None}

    def on_delivery(err: Any, msg: Any) -> None:
        now = clock()
        seq = int(msg.value()[:12])
        if err is None:
            acked.append(seq)
            ack_times.append(now)
            at_kill = marks["seq_at_kill"]
            if marks["first_post_kill_ack"] is None and at_kill is not None and seq >= at_kill:
                marks["first_post_kill_ack"] = now
        else:
            failed.append(seq)
            if len(fail_samples) < 5:
                fail_samples.append(str(err))

    client_errors = ClientErrors()
    max_s = args.failover_before_s + args.failover_max_wait_s + args.failover_after_s
    p = Producer(
        cluster.conf(
            "failover",
            **{
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": int((max_s + args.wait_timeout) * 1000),
                "queue.buffering.max.messages": 1_000_000,
                "on_delivery": on_delivery,
                "error_cb": client_errors,
            },
        )
    )
    watcher = MetadataWatcher(cluster, topic, {f, g})
    watcher.start()
    rate = args.failover_rate
    seq = 0
    killed_at: float | None = None
    left = -1
    try:
        start = clock()
        kill_at = start + args.failover_before_s
        hard_stop = kill_at + args.failover_max_wait_s
        next_check = start
        _progress(
            f"failover: {rate} records/s, SIGKILL of broker {leader} (the leader) in "
            f"{args.failover_before_s:.0f} s"
        )
        while True:
            now = clock()
            due = int((now - start) * rate)
            while seq < due:
                try:
                    p.produce(topic, _value(seq), partition=0)
                    seq += 1
                except BufferError:
                    p.poll(0.001)
            if killed_at is None and now >= kill_at:
                marks["seq_at_kill"] = seq
                killed_at = clock()
                out["killed_exit_code"] = cluster.nodes[leader].sigkill()
                out["acked_before_kill"] = len(acked)
                _progress(f"failover: broker {leader} killed; {len(acked)} records acked so far")
            p.poll(0.001)
            first = marks["first_post_kill_ack"]
            if first is not None and now >= first + args.failover_after_s:
                break
            if now > hard_stop:
                break
            if now >= next_check:
                next_check = now + 0.25
                cluster.check_alive()
        out["records_produced"] = seq
        out["produce_seconds"] = round(clock() - start, 3)
        flush_deadline = clock() + args.wait_timeout
        while True:
            left = int(p.flush(0.25))
            if left == 0 or clock() > flush_deadline:
                break
    finally:
        watcher.stop()
        if left != 0:
            with contextlib.suppress(Exception):
                p.purge()
                p.flush(1)
    del p
    first = marks["first_post_kill_ack"]
    assert killed_at is not None
    out["not_delivered_after_flush"] = left
    out["records_acked"] = len(acked)
    out["records_failed"] = len(failed)
    if fail_samples:
        out["delivery_error_samples"] = fail_samples
    out["client_errors"] = client_errors.count
    out["client_error_samples"] = client_errors.samples
    out["kill_to_first_ack_s"] = round(first - killed_at, 3) if first is not None else None
    gaps = [(b - a, a) for a, b in itertools.pairwise(ack_times)]
    if gaps:
        gap, gap_from = max(gaps)
        out["max_ack_gap_s"] = round(gap, 3)
        out["max_ack_gap_started_after_kill_s"] = round(gap_from - killed_at, 3)
    before = [t for t in ack_times if t <= killed_at]
    if before:
        out["last_ack_before_kill_s"] = round(killed_at - before[-1], 4)
    new_leader = next(
        (t for t, ldr, _ in watcher.changes if t > killed_at and ldr not in (leader, -1)), None
    )
    out["kill_to_new_leader_in_metadata_s"] = (
        round(new_leader - killed_at, 3) if new_leader is not None else None
    )
    out["metadata_changes"] = [
        {"after_kill_s": round(t - killed_at, 3), "leader": ldr, "isr": isr}
        for t, ldr, isr in watcher.changes
    ]
    if first is None:
        raise BenchFailed(
            f"failover: no record produced after the kill acknowledged within "
            f"{args.failover_max_wait_s:.0f} s"
        )

    # Read the partition back from the survivors.
    hw = cluster.high_watermark(topic)
    c = Consumer(
        cluster.conf(
            "check",
            {f, g},
            **{
                "group.id": f"bench-replication-check-{run}",
                "enable.auto.commit": False,
                "auto.offset.reset": "error",
            },
        )
    )
    offsets: list[int] = []
    values: list[int] = []
    errs: list[str] = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = clock() + args.wait_timeout
        while len(offsets) < hw and clock() < deadline:
            for m in c.consume(num_messages=10_000, timeout=0.5):
                if m.error() is None:
                    offsets.append(m.offset())
                    values.append(int(m.value()[:12]))
                elif len(errs) < 5:
                    errs.append(str(m.error()))
    finally:
        c.close()
    read = set(values)
    out["check"] = {
        "high_watermark": hw,
        "records_read": len(values),
        "unique_values": len(read),
        "duplicates": len(values) - len(read),
        "acked_lost": len(set(acked) - read),
        "failed_but_present": len(set(failed) & read),
        "offsets_contiguous": offsets == list(range(len(offsets))),
        "read_errors": errs,
    }
    out["check"]["ok"] = (
        out["check"]["acked_lost"] == 0 and out["check"]["duplicates"] == 0 and not left
    )
    _progress(f"failover: {json.dumps(out['check'])}")

    # The killed broker comes back, truncates what it had alone, and rejoins.
    node = cluster.nodes[leader]
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(cluster.conf("rejoin", {f, g}))
    node.spawn()
    deadline = node.spawned + args.wait_timeout
    back = None
    while time.monotonic() < deadline:
        cluster.check_alive()
        part = cluster.partition(topic, admin)
        if part is not None and leader in part.isrs:
            back = round(time.monotonic() - node.spawned, 3)
            break
        time.sleep(POLL_S)
    out["killed_broker_back_in_isr_s"] = back
    out["killed_broker_truncation_lines"] = [
        {k: v for k, v in e.items() if k != "level"}
        for e in node.events()
        if str(e.get("event", "")).startswith(("log truncated", "log restarted", "log recovered"))
    ][:10]
    if back is None:
        raise BenchFailed(
            f"failover: broker {leader} not back in the ISR {args.wait_timeout:.0f} s after "
            f"its start"
        )


# -- main -----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--quick", action="store_true", help="1 run of 20,000 records per case, 32 MiB catch-up"
    )
    ap.add_argument("--repeat", type=int, default=None, help="runs per case (default 3; quick 1)")
    ap.add_argument(
        "--records", type=int, default=None, help="records per run (default 100,000; quick 20,000)"
    )
    ap.add_argument("--catchup-bytes", type=int, default=None, help="default 256 MiB; quick 32 MiB")
    ap.add_argument(
        "--catchup-throttle-mb-s",
        type=float,
        default=5.0,
        help="replication throttle of the catchup_throttled phase, MB/s (default 5)",
    )
    ap.add_argument(
        "--session-timeout-ms",
        type=int,
        default=6000,
        help="zookeeper.session.timeout.ms of the brokers (default 6000; the broker's is 18000)",
    )
    ap.add_argument("--failover-rate", type=int, default=2000, help="records/s (default 2,000)")
    ap.add_argument("--failover-before-s", type=float, default=5.0)
    ap.add_argument("--failover-after-s", type=float, default=5.0)
    ap.add_argument(
        "--failover-max-wait-s",
        type=float,
        default=90.0,
        help="give up when no record is acknowledged this long after the kill",
    )
    ap.add_argument(
        "--phases", default=",".join(PHASES), help="comma-separated, of " + ",".join(PHASES)
    )
    ap.add_argument("--max-seconds", type=float, default=30.0, help="cap of one throughput run")
    ap.add_argument("--fill-timeout", type=float, default=120.0, help="cap of the catch-up fill")
    ap.add_argument("--startup-timeout", type=float, default=60.0)
    ap.add_argument(
        "--wait-timeout", type=float, default=60.0, help="cap of every other wait (ISR, flush)"
    )
    ap.add_argument(
        "--stop-timeout", type=float, default=30.0, help="SIGTERM of the catch-up's follower"
    )
    ap.add_argument(
        "--teardown-grace", type=float, default=5.0, help="SIGTERM to SIGKILL at the end"
    )
    ap.add_argument("--work-dir", default=None, help="parent of the temporary directory")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (logs)")
    ap.add_argument("--out", help="also write the JSON here")
    args = ap.parse_args(argv)
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    args.repeat = max(1, args.repeat)
    if args.records is None:
        args.records = 20_000 if args.quick else 100_000
    if args.catchup_bytes is None:
        args.catchup_bytes = 32 * MIB if args.quick else 256 * MIB
    args.phase_list = [s.strip() for s in args.phases.split(",") if s.strip()]
    bad = [s for s in args.phase_list if s not in PHASES]
    if bad:
        ap.error(f"unknown phase(s) {bad}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    reason = unavailable_reason()
    if reason is not None:
        print(json.dumps({"error": f"no ZooKeeper: {reason}"}))
        return 2

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    began = time.monotonic()
    run = uuid.uuid4().hex[:8]
    work = Path(tempfile.mkdtemp(prefix="kplane-bench-replication-", dir=args.work_dir))
    result: dict[str, Any] = {
        "machine": machine(),
        "started_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "settings": {
            "quick": args.quick,
            "brokers": BROKERS,
            "repeat": args.repeat,
            "records_per_run": args.records,
            "record_bytes": RECORD_BYTES,
            "catchup_bytes": args.catchup_bytes,
            "catchup_throttle_mb_s": args.catchup_throttle_mb_s,
            "failover_rate": args.failover_rate,
            "failover_before_s": args.failover_before_s,
            "failover_after_s": args.failover_after_s,
            "zookeeper_session_timeout_ms": args.session_timeout_ms,
            "zookeeper_session_timeout_ms_broker_default": CONFIGS[
                "zookeeper.session.timeout.ms"
            ].default,
            "session_timeout_note": "the brokers run with --session-timeout-ms (as kplane "
            "cluster up does); a SIGKILLed leader is noticed when its ZooKeeper session "
            "expires, so the failover figures are those of that setting",
            "broker_defaults": {
                k: CONFIGS[k].default
                for k in (
                    "replica.fetch.wait.max.ms",
                    "replica.lag.time.max.ms",
                    "replica.fetch.max.bytes",
                    "num.replica.fetchers",
                    "controlled.shutdown.enable",
                )
            },
            "config": "configs/server.properties + tools.cluster.broker_overrides + "
            "kplane.log.storage=file",
            "min_insync_replicas_rf3": 2,
            "phases": args.phase_list,
            "work_dir": str(work),
        },
    }
    interrupted = False
    failed = False
    home = os.getcwd()
    # The children run ``python -m kplane``, which imports from its working directory
    # first: from the temporary directory they import what this process imports.
    os.chdir(work)
    phases = {
        "throughput": phase_throughput,
        "catchup": phase_catchup,
        "catchup_throttled": phase_catchup_throttled,
        "failover": phase_failover,
    }
    clusters: list[Cluster] = []
    result["clusters"] = []
    try:
        roles: dict[str, int] = {}
        for name in args.phase_list:
            if not clusters or clusters[-1].failed:
                # The first cluster, or a fresh one after a failed phase: what went wrong
                # there (a stuck follower, an offline partition) stays out of this phase.
                if clusters:
                    _progress("stopping the cluster of the failed phase")
                    result["clusters"][-1]["teardown"] = clusters[-1].stop()
                _progress("starting ZooKeeper and three brokers")
                cluster = Cluster(work / f"cluster-{len(clusters) + 1}", args)
                clusters.append(cluster)
                info = {"for_phase": name, **cluster.start()}
                result["clusters"].append(info)
                controller = cluster.controller()
                others = sorted(set(cluster.nodes) - {controller})
                roles = {"L": others[0], "F": others[1], "G": controller}
                info["roles"] = {
                    "leader": roles["L"],
                    "stopped_follower": roles["F"],
                    "other_follower_and_controller": roles["G"],
                }
                _progress(f"cluster up: {json.dumps(info)}")
            cluster = clusters[-1]
            _progress(f"{name}: start")
            t0 = time.monotonic()
            r: dict[str, Any] = {"cluster": len(clusters)}
            result[name] = r
            try:
                phases[name](cluster, roles, run, r)
            except Exception as exc:
                failed = cluster.failed = True
                r["error"] = f"{type(exc).__name__}: {exc}"
                r["broker_logs"] = cluster.logs()
                _progress(f"{name}: ERROR {r['error']}")
                if isinstance(exc, BrokerDied):
                    break
            r["phase_seconds"] = round(time.monotonic() - t0, 1)
            if name == "failover" and not r.get("check", {}).get("ok"):
                failed = True
            _progress(f"{name}: done in {r['phase_seconds']} s")
        if clusters:
            result["clusters"][-1]["broker_peak_rss_mb"] = clusters[-1].usage()
    except KeyboardInterrupt:
        interrupted = True
        result["error"] = "interrupted"
    except Exception as exc:
        failed = True
        result["error"] = f"{type(exc).__name__}: {exc}"
        if clusters:
            with contextlib.suppress(Exception):
                result["broker_logs"] = clusters[-1].logs()
        _progress(f"ERROR {result['error']}")
    finally:
        for i, cluster in enumerate(clusters):
            with contextlib.suppress(Exception):
                stopped = cluster.stop()
                if i < len(result["clusters"]) and "teardown" not in result["clusters"][i]:
                    result["clusters"][i]["teardown"] = stopped
            with contextlib.suppress(Exception):
                cluster.zk.kill()
            if i < len(result["clusters"]):
                result["clusters"][i]["broker_log_summary"] = {
                    n: {k: v for k, v in rep.items() if k in _SUMMARY}
                    for n, rep in cluster.logs().items()
                }
        os.chdir(home)
        if args.keep:
            _progress(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    result["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    result["wall_seconds"] = round(time.monotonic() - began, 1)
    emit_json(result, args.out)
    _progress(f"done in {result['wall_seconds']} s")
    if interrupted:
        return 130
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
