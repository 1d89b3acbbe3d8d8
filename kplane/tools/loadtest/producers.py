"""The data load of ``kplane loadtest`` in a child process; its confluent-kafka Producers.

The load runs in its own (spawned) process so that its Python work never competes for a GIL
with the fake controller whose latencies are measured. One Producer is one connection to the
broker; librdkafka batches, pipelines (``max.in.flight`` 5) and retries in its C threads.
After the warm-up, every message's delivery report is counted and every ``sample_every``-th
message's latency (produce() to its delivery report, as librdkafka measures it) is kept.

Protocol with the parent over a Pipe: the child sends ``"ready"`` once every Producer has
metadata (so its connection is open; else a one-line error), waits for ``"go"``, produces for
``warmup`` + ``duration`` seconds or until ``max_messages`` were measured, flushes for at most
``FLUSH_TIMEOUT_S`` and sends a LoadResult. The ``wire`` load (``loadtest_wire_load``)
speaks the same protocol from the same process set-up.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

FLUSH_TIMEOUT_S = 15.0
READY_TIMEOUT_S = 30.0
CHUNK = 200
"""Messages produced between two checks of the clock and two rounds of poll()."""


@dataclass(frozen=True)
class LoadConfig:
    """What to produce; a rate of 0 means as fast as the producers' queues take it."""

    bootstrap: str
    topic: str
    producers: int
    warmup: float
    """Seconds of load before ``duration``; nothing sent in them is counted or sampled."""
    duration: float
    rate: float
    max_messages: int
    record_size: int
    linger_ms: float
    sample_every: int
    idle_priority: bool = False
    """Run the load under SCHED_IDLE: only on CPU time no other process wants, so a waking
    fake controller preempts it at once."""
    partitions: int = 1
    batch_records: int = 10
    """Records per Produce request of the ``wire`` client."""


@dataclass
class LoadResult:
    """Counts and the sampled latencies of one load run."""

    produced: int = 0
    delivered: int = 0
    failed: int = 0
    undelivered: int = 0
    """Still queued when the flush timed out (purged)."""
    seconds: float = 0.0
    """From the end of the warm-up to the end of producing (the flush not included)."""
    send_times: list[float] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    errors: list[str | None] = field(default_factory=list)


def producer_config(config: LoadConfig, index: int) -> dict[str, Any]:
    """librdkafka settings of Producer ``index``: acks=1, a short linger, deep local queues."""
    return {
        "bootstrap.servers": config.bootstrap,
        "client.id": f"kplane-loadtest-{index}",
        "acks": 1,
        "linger.ms": config.linger_ms,
        "max.in.flight.requests.per.connection": 5,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 262_144,
        "enable.idempotence": False,
        "socket.nagle.disable": True,
        "message.timeout.ms": 60_000,
    }


class _Deliveries:
    """Delivery-report callbacks: counts everything, keeps the sampled latencies."""

    def __init__(self, result: LoadResult) -> None:
        self.result = result

    def counted(self, err: KafkaError | None, _msg: Message) -> None:
        if err is None:
            self.result.delivered += 1
        else:
            self.result.failed += 1

    def sampled(self, send_time: float, err: KafkaError | None, msg: Message) -> None:
        self.counted(err, msg)
        latency = msg.latency()
        r = self.result
        r.send_times.append(send_time)
        r.latencies_ms.append((time.time() - send_time if latency is None else latency) * 1000.0)
        r.errors.append(None if err is None else err.name())


def run_load(
    config: LoadConfig, conn: multiprocessing.connection.Connection, progress: Any
) -> None:
    """The load with confluent-kafka Producers; ``progress`` is a shared array
    [produced, delivered]."""
    result = LoadResult()
    deliveries = _Deliveries(result)
    producers = [Producer(producer_config(config, i)) for i in range(config.producers)]
    try:
        for p in producers:
            p.list_topics(config.topic, timeout=READY_TIMEOUT_S)
    except KafkaException as exc:
        conn.send(f"producers could not reach {config.bootstrap}: {exc}")
        return
    conn.send("ready")
    try:
        if conn.recv() != "go":
            return
    except EOFError:  # the parent went away
        return
    _produce(config, producers, deliveries, progress)
    _flush(producers, result, deadline=time.monotonic() + FLUSH_TIMEOUT_S)
    conn.send(result)


def _produce(
    config: LoadConfig, producers: list[Producer], deliveries: _Deliveries, progress: Any
) -> None:
    """Produce round-robin over ``producers``, in chunks of what the rate allows so far;
    delivery reports are served after every chunk and every millisecond while waiting."""
    result = deliveries.result
    payload = os.urandom(config.record_size)
    topic, n, every = config.topic, len(producers), config.sample_every
    counted: Callable[[KafkaError | None, Message], None] = deliveries.counted
    start = time.monotonic()
    measure_from = start + config.warmup
    end = measure_from + config.duration
    sent = measured = 0
    while measured < config.max_messages and (now := time.monotonic()) < end:
        due = config.max_messages - measured
        if config.rate > 0:
            due = min(due, int((now - start) * config.rate) + 1 - sent)
        measuring = now >= measure_from
        for _ in range(min(CHUNK, due)):
            producer = producers[sent % n]
            callback: Callable[..., None] | None = None
            if measuring:
                sampled = measured % every == 0
                callback = partial(deliveries.sampled, time.time()) if sampled else counted
                measured += 1
            while True:
                try:
                    producer.produce(topic, payload, on_delivery=callback)
                    break
                except BufferError:  # local queue full: serve reports, then retry
                    producer.poll(0.001)
            sent += 1
        for p in producers:
            p.poll(0)
        progress[0], progress[1] = sent, result.delivered
        if due <= 0:
            time.sleep(0.001)
    result.produced = measured
    result.seconds = max(0.0, time.monotonic() - measure_from)


def _flush(producers: list[Producer], result: LoadResult, deadline: float) -> None:
    """Flush every producer until ``deadline``; what is left is counted and purged (its
    reports are never served, so it is not counted as failed too)."""
    for p in producers:
        p.flush(max(0.0, deadline - time.monotonic()))
    for p in producers:
        result.undelivered += len(p)
        p.purge()


@dataclass(frozen=True)
class LoadProcess:
    """The running load: its process, the parent's end of the pipe, the shared counters
    [produced, delivered]."""

    process: multiprocessing.process.BaseProcess
    conn: multiprocessing.connection.Connection
    progress: Any


LoadEntry = Callable[[LoadConfig, multiprocessing.connection.Connection, Any], None]
"""What the load process runs: ``run_load`` or ``loadtest_wire_load.run_wire_load``."""


def _child(
    entry: LoadEntry, config: LoadConfig, conn: multiprocessing.connection.Connection, progress: Any
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops this process
    if config.idle_priority:  # before the load's threads start: they inherit it
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    entry(config, conn, progress)


def start_load(config: LoadConfig, entry: LoadEntry = run_load) -> LoadProcess:
    """Spawn the load process running ``entry``."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    progress = ctx.RawArray("q", 2)
    process = ctx.Process(
        target=_child,
        args=(entry, config, child, progress),
        name="kplane-loadtest-load",
        daemon=True,
    )
    process.start()
    child.close()
    return LoadProcess(process, parent, progress)
