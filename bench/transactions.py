#!/usr/bin/env python3
"""Transactional produce against non-transactional produce, in one run per target.

Targets (``--targets``, default ``kplane,mock,tansu``): ``kplane`` (``kplane serve
configs/server.properties``, file log, a fresh temporary ``log.dirs``), librdkafka's mock
cluster and Tansu, as in ``bench/throughput.py`` (a baseline that cannot start, or that
refuses transactions, becomes an ``error`` entry).

Per target, with confluent-kafka (librdkafka) over loopback, 1 KiB records, acks=all,
one partition:

* ``plain``: an idempotent producer, ``--records`` records, timed from the first produce()
  to the end of flush() (each producer first sends one record untimed, so connections,
  metadata and producer ids are in place);
* ``txn_100`` and ``txn_10000``: a transactional producer, the same records in
  transactions of 100 and of 10,000 records, from the first begin to the last commit;
* ``commit_latency``: ``--commits`` transactions of one record each; the time of
  ``commit_transaction()`` alone: p50 / p99 in milliseconds.

Throughput is MB/s (and records/s); ``vs_plain`` is each transactional figure over the
same target's plain one. JSON on stdout (and ``--out``), progress on stderr.

    .venv/bin/python bench/transactions.py [--quick] [--targets kplane,mock,tansu]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _baselines import KplaneTarget, MockTarget, TansuTarget, Target, emit_json
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

RECORD = b"x" * 1024


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def make_target(name: str) -> Target:
    if name == "kplane":
        target = KplaneTarget()
        target.argv += ["--override", "kplane.log.storage=file"]
        return target
    if name == "mock":
        return MockTarget()
    if name == "tansu":
        return TansuTarget(log=log)
    raise ValueError(name)


def _topic(target: Target) -> str:
    """A new one-partition topic: CreateTopics where the target has it, else (the mock)
    auto-created by the producers' Metadata requests."""
    topic = f"txn-bench-{uuid.uuid4().hex[:8]}"
    if getattr(target, "supports_create_topics", True):
        admin = AdminClient({"bootstrap.servers": target.bootstrap, **target.client_conf})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    return topic


def _warm_up(p: Producer, topic: str, transactional: bool) -> None:
    """Connections, metadata and the producer id in place before the clock starts."""
    if transactional:
        p.init_transactions(30)
        p.begin_transaction()
    p.produce(topic, RECORD)
    if transactional:
        p.commit_transaction(30)
    elif p.flush(30):
        raise RuntimeError("warm-up record not delivered")


def _producer(target: Target, **conf: Any) -> Producer:
    return Producer(
        {
            "bootstrap.servers": target.bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "enable.idempotence": True,
            **target.client_conf,
            **conf,
        }
    )


def _rate(records: int, seconds: float) -> dict[str, float]:
    return {
        "seconds": round(seconds, 3),
        "records_per_s": round(records / seconds, 1),
        "mb_per_s": round(records * len(RECORD) / seconds / 1e6, 2),
    }


def plain(target: Target, records: int) -> dict[str, float]:
    topic = _topic(target)
    p = _producer(target)
    _warm_up(p, topic, transactional=False)
    start = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                p.produce(topic, RECORD)
                break
            except BufferError:
                p.poll(0.01)
    left = p.flush(60)
    elapsed = time.perf_counter() - start
    if left:
        raise RuntimeError(f"{left} records not delivered")
    return _rate(records, elapsed)


def transactional(target: Target, records: int, per_txn: int) -> dict[str, float]:
    topic = _topic(target)
    p = _producer(target, **{"transactional.id": f"bench-{uuid.uuid4().hex[:8]}"})
    _warm_up(p, topic, transactional=True)
    start = time.perf_counter()
    sent = 0
    while sent < records:
        p.begin_transaction()
        for _ in range(min(per_txn, records - sent)):
            while True:
                try:
                    p.produce(topic, RECORD)
                    break
                except BufferError:
                    p.poll(0.01)
            sent += 1
        p.commit_transaction(60)
    elapsed = time.perf_counter() - start
    return _rate(records, elapsed)


def commit_latency(target: Target, commits: int) -> dict[str, float]:
    topic = _topic(target)
    p = _producer(target, **{"transactional.id": f"lat-{uuid.uuid4().hex[:8]}", "linger.ms": 0})
    _warm_up(p, topic, transactional=True)
    times = []
    for _ in range(commits):
        p.begin_transaction()
        p.produce(topic, RECORD)
        start = time.perf_counter()
        p.commit_transaction(30)
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return {
        "commits": commits,
        "p50_ms": round(statistics.median(times), 2),
        "p99_ms": round(times[min(len(times) - 1, int(len(times) * 0.99))], 2),
    }


def run_target(name: str, records: int, commits: int) -> dict[str, Any]:
    target = make_target(name)
    out: dict[str, Any] = {}
    try:
        target.start()
        log(f"{name}: started at {target.bootstrap}")
        out["plain"] = plain(target, records)
        for per_txn in (100, 10_000):
            out[f"txn_{per_txn}"] = transactional(target, records, per_txn)
            out[f"txn_{per_txn}"]["vs_plain"] = round(
                out[f"txn_{per_txn}"]["mb_per_s"] / out["plain"]["mb_per_s"], 3
            )
        out["commit_latency"] = commit_latency(target, commits)
        log(f"{name}: {json.dumps(out)}")
    except Exception as exc:  # a baseline without transactions is reported, not fatal
        out["error"] = f"{type(exc).__name__}: {exc}"
        log(f"{name}: error {out['error']}")
    finally:
        target.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="kplane,mock,tansu")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--commits", type=int, default=300)
    parser.add_argument("--quick", action="store_true", help="10,000 records, 50 commits")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    records, commits = (10_000, 50) if args.quick else (args.records, args.commits)
    result = {
        "records": records,
        "record_bytes": len(RECORD),
        "targets": {name: run_target(name, records, commits) for name in args.targets.split(",")},
    }
    emit_json(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
