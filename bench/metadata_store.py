"""Topic creation against a growing metadata store (issue 12), over real sockets.

One ``kplane serve`` child (embedded store, fresh ``log.dirs``) is grown to each level of
``--levels`` (100, 1,000, 10,000 topics of 1 partition) with confluent-kafka's AdminClient:
CreateTopics requests of ``--batch`` topics each (as a tool creating many topics would)
up to ``--probe`` topics short of the level, then ``--probe`` single-topic requests, one
after the other (as auto-creation or a user would), so the broker holds exactly the level.
Per level: the per-topic time of both kinds (mean, p50, p99; a batch's time divided by its
topics), the broker's RSS and the store's bytes on disk. At the end the broker is stopped
(SIGTERM) and started again on the same directory: the time until it logs ``started`` and
until a Metadata request lists every topic.

The whole run stops creating once ``--budget`` seconds have passed (each request is also
bounded by ``--request-timeout``); a level cut short says ``time_capped``.

JSON goes to stdout, progress to stderr. ``PYTHONPATH=<other tree>`` measures another tree
(the broker child inherits it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _baselines import REPO_ROOT, emit_json, free_port, read_proc_status
from confluent_kafka.admin import AdminClient, NewTopic

import kplane
from kplane.tools.serve_process import ServeProcess, spawn_serve

CONFIG = str(REPO_ROOT / "configs" / "server.properties")


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _stats_ms(seconds: list[float]) -> dict[str, float | int | None]:
    """Mean, p50 and p99 in milliseconds of per-topic times."""
    if not seconds:
        return {"count": 0, "mean_ms": None, "p50_ms": None, "p99_ms": None}
    ordered = sorted(seconds)

    def pick(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3)

    return {
        "count": len(ordered),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 3),
        "p50_ms": pick(0.50),
        "p99_ms": pick(0.99),
    }


def _store_bytes(log_dir: Path) -> int:
    return sum(p.stat().st_size for p in log_dir.glob("kplane-metadata*") if p.is_file())


class Broker:
    """The ``kplane serve`` child and an AdminClient connected to it."""

    def __init__(self, log_dir: Path, port: int, log_path: Path) -> None:
        self.log_dir = log_dir
        self.port = port
        self.log_path = log_path
        self.serve: ServeProcess | None = None
        self.admin: AdminClient | None = None
        self.held = 0

    def start(self, timeout_s: float) -> float:
        """Start the broker; the seconds until it logged ``started``."""
        began = time.monotonic()
        self.serve = spawn_serve(
            CONFIG,
            [
                f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
                f"log.dirs={self.log_dir}",
                "num.partitions=1",
            ],
            self.log_path,
            append=True,
        )
        self.serve.wait_started(timeout_s)
        elapsed = time.monotonic() - began
        self.admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{self.port}", "log_level": 0})
        self.topic_count(timeout_s)  # connected before anything is timed
        return elapsed

    @property
    def pid(self) -> int:
        assert self.serve is not None
        return self.serve.process.pid

    def rss_mb(self) -> float | None:
        kb = read_proc_status(self.pid).get("VmRSS")
        return round(kb / 1024, 1) if kb is not None else None

    def create(self, names: list[str], timeout_s: float) -> None:
        """One CreateTopics request for ``names`` (1 partition, replication 1); raises on
        any per-topic error."""
        assert self.admin is not None
        futures = self.admin.create_topics(
            [NewTopic(name, 1, 1) for name in names], request_timeout=timeout_s
        )
        for future in futures.values():
            future.result(timeout=timeout_s)

    def topic_count(self, timeout_s: float) -> int:
        assert self.admin is not None
        return len(self.admin.list_topics(timeout=timeout_s).topics)

    def stop(self) -> None:
        """SIGTERM, SIGKILL after 30 s."""
        if self.serve is None:
            return
        self.serve.stop(30)
        self.serve = None
        self.admin = None


def grow(broker_: Broker, level: int, args: argparse.Namespace, deadline: float) -> dict[str, Any]:
    """Create topics until the broker holds ``level``: batches, then one by one."""
    held = broker_.held
    batched: list[float] = []
    single: list[float] = []
    capped = False
    error = None
    began = time.monotonic()
    while held < level:
        if time.monotonic() > deadline:
            capped = True
            break
        one_by_one = held >= level - args.probe
        count = 1 if one_by_one else min(args.batch, level - args.probe - held)
        names = [f"bench-{i:06d}" for i in range(held, held + count)]
        t0 = time.perf_counter()
        try:
            broker_.create(names, args.request_timeout)
        except Exception as exc:  # a request timed out: report what this level measured
            error = repr(exc)
            break
        per_topic = (time.perf_counter() - t0) / count
        (single if one_by_one else batched).append(per_topic)
        held += count
    broker_.held = held
    result: dict[str, Any] = {
        "level": level,
        "topics_held": held,
        "time_capped": capped,
        "error": error,
        "seconds": round(time.monotonic() - began, 2),
        "batched_per_topic": _stats_ms(batched),
        "one_by_one_per_topic": _stats_ms(single),
        "rss_mb": broker_.rss_mb(),
        "store_bytes": _store_bytes(broker_.log_dir),
    }
    _progress(json.dumps(result))
    return result


def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="kplane-bench-store-"))
    broker_ = Broker(work / "data", free_port(), work / "broker.log")
    began = time.monotonic()
    deadline = began + args.budget
    out: dict[str, Any] = {
        "settings": {
            "levels": args.levels,
            "batch": args.batch,
            "probe": args.probe,
            "budget_s": args.budget,
            "client": "confluent-kafka AdminClient.create_topics, 1 partition, replication 1",
            "broker_tree": str(Path(kplane.__file__).resolve().parent.parent),
        },
        "levels": [],
        "loadavg_at_start": os.getloadavg(),
    }
    try:
        out["first_start_s"] = round(broker_.start(args.startup_timeout), 3)
        for level in args.levels:
            out["levels"].append(grow(broker_, level, args, deadline))
            if out["levels"][-1]["time_capped"] or out["levels"][-1]["error"]:
                break
        held = broker_.held
        broker_.stop()
        started = broker_.start(args.startup_timeout)
        t0 = time.monotonic()
        while broker_.topic_count(args.request_timeout) < held:
            if time.monotonic() - t0 > args.startup_timeout:
                break
            time.sleep(0.05)
        out["restart"] = {
            "topics": held,
            "started_s": round(started, 3),
            "all_topics_listed_s": round(started + time.monotonic() - t0, 3),
            "topics_listed": broker_.topic_count(args.request_timeout),
            "rss_mb": broker_.rss_mb(),
        }
        _progress(json.dumps(out["restart"]))
    except Exception as exc:  # report what was measured, and why it stopped
        out["error"] = repr(exc)
        if broker_.serve is not None:
            out["log_tail"] = broker_.serve.log_text().splitlines()[-5:]
    finally:
        broker_.stop()
        shutil.rmtree(work, ignore_errors=True)
    out["loadavg_at_end"] = os.getloadavg()
    out["wall_seconds"] = round(time.monotonic() - began, 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--levels",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[100, 1_000, 10_000],
        help="topic counts to measure at (default 100,1000,10000)",
    )
    parser.add_argument("--batch", type=int, default=100, help="topics per batched request")
    parser.add_argument("--probe", type=int, default=100, help="one-by-one creations per level")
    parser.add_argument("--budget", type=float, default=180.0, help="seconds of creating, in all")
    parser.add_argument("--request-timeout", type=float, default=60.0)
    parser.add_argument("--startup-timeout", type=float, default=60.0)
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    if os.environ.get("PYTHONPATH"):
        _progress(f"PYTHONPATH={os.environ['PYTHONPATH']}")
    result = run(args)
    emit_json(result, args.out)


if __name__ == "__main__":
    main()
