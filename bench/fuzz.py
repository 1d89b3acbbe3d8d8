#!/usr/bin/env python3
"""Fuzz a kplane broker over real sockets; JSON summary on stdout, progress on stderr.

    .venv/bin/python bench/fuzz.py [--frames N] [--max-seconds S] [--seed N]
        [--concurrency C] [--no-sasl] [--bootstrap HOST:PORT --log FILE --pid PID]

Starts ``kplane serve`` (PLAINTEXT and SASL_PLAINTEXT listeners on free loopback ports, a
temporary ``log.dirs``, its JSON log captured) unless ``--bootstrap`` names a running one.
Sends random, schema-generated (70% mutated) and targeted frames for every API and version
the broker advertises, over many short connections; watches the broker's life, fds and
RSS, and counts error lines and tracebacks in its log. Exit 1 when the broker died, a
frame was left neither answered nor closed, a traceback was logged, or fds/RSS did not
come back to their baseline after the clients left; 2 when the broker cannot be set up.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop
from fuzz_drive import Driver, Plan, Tally, Target
from fuzz_frames import API_VERSIONS, FrameSource
from fuzz_watch import (
    Broker,
    LogFindings,
    Usage,
    attach_broker,
    dump_frames,
    findings_json,
    scan_log,
)
from fuzz_watch import start_broker as start_serve
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.list_groups.v0.request import ListGroupsRequest
from kio.schema.metadata.v1.request import MetadataRequest

from kplane.testing.wire import WireClient
from kplane.tools.serve_process import ServeFailed

WARM_CONNECTIONS = 16
RSS_MARGIN_MB = 64
FD_MARGIN = 2
LOOP_FDS = 3
"""What a thread with its own event loop holds: the epoll fd and the wake-up socket pair.
A thread the broker started for state the fuzz created by design (a replica fetcher for a
leader a forged LeaderAndIsr named alive, as Kafka starts one) is retained state, as the
log files of the topics it created are."""


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=1_000_000, help="frames to send")
    parser.add_argument("--max-seconds", type=float, default=3600, help="stop sending after")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=64, help="connections at once")
    parser.add_argument("--rate", type=float, default=0,
                        help="at most this many frames a second (0: as fast as it goes)")
    parser.add_argument("--per-connection", type=int, default=5, help="most frames a connection")
    parser.add_argument("--timeout", type=float, default=5.0, help="answer-or-close deadline")
    parser.add_argument("--settle", type=float, default=20.0,
                        help="seconds for fds and RSS to come back after the clients left")
    parser.add_argument("--rss-margin-mb", type=float, default=RSS_MARGIN_MB)
    parser.add_argument("--fd-margin", type=int, default=FD_MARGIN)
    parser.add_argument("--skip-api", default="", help="comma-separated api keys not to send")
    parser.add_argument("--no-sasl", action="store_true", help="no SASL_PLAINTEXT listener")
    parser.add_argument("--config", default="configs/server.properties")
    parser.add_argument("--bootstrap", help="host:port of a running broker (PLAINTEXT)")
    parser.add_argument("--sasl-bootstrap", help="host:port of its SASL_PLAINTEXT listener")
    parser.add_argument("--log", type=Path, help="the running broker's JSON log")
    parser.add_argument("--pid", type=int, help="the running broker's pid")
    parser.add_argument("--work-dir", type=Path, help="where logs and repro files go "
                        "(default: a temporary directory, kept when the run fails)")
    args = parser.parse_args(argv)
    if args.bootstrap and not (args.log and args.pid):
        parser.error("--bootstrap needs --log and --pid")
    return args


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def open_broker(args: argparse.Namespace, work: Path) -> Broker:
    if args.bootstrap:
        listeners = {"PLAINTEXT": _address(args.bootstrap)}
        if args.sasl_bootstrap:
            listeners["SASL_PLAINTEXT"] = _address(args.sasl_bootstrap)
        return attach_broker(listeners, args.log, args.pid)
    return start_serve(work, sasl=not args.no_sasl, config=args.config)


def retained_state(address: tuple[str, int]) -> dict[str, int]:
    """Topics and groups the broker holds (state valid fuzzed requests may create by
    design), to weigh RSS growth against."""
    with WireClient(*address) as client:
        topics = client.request(MetadataRequest(topics=None)).topics
        groups = client.request(ListGroupsRequest()).groups
    return {"topics": len(topics), "groups": len(groups)}


def served_versions(address: tuple[str, int], skip: set[int]) -> dict[int, list[int]]:
    """What the broker advertises in ApiVersions, less ``skip``."""
    request = ApiVersionsRequest(client_software_name="fuzz", client_software_version="1")
    with WireClient(*address) as client:
        response = client.request(request)
    return {int(k.api_key): list(range(k.min_version, k.max_version + 1))
            for k in response.api_keys if int(k.api_key) not in skip}


class Watch:
    """Polls the broker while the fuzz runs: death, peak usage, progress lines."""

    def __init__(self, broker: Broker, tally: Tally, work: Path) -> None:
        self.broker = broker
        self.tally = tally
        self.work = work
        self.death_file: Path | None = None
        self.peak: dict[str, float] = {}

    def sample(self) -> Usage | None:
        if not self.broker.alive():
            return None
        try:
            usage = self.broker.usage()
        except OSError:
            return None
        for name in ("fds", "sockets", "log_files", "other_fds", "rss_mb", "threads"):
            self.peak[name] = max(self.peak.get(name, 0), getattr(usage, name))
        return usage

    def died(self) -> bool:
        return self.death_file is not None

    async def run(self, done: asyncio.Event) -> None:
        started = time.monotonic()
        last_report = started
        while not done.is_set():
            usage = self.sample()
            if usage is None and not self.broker.alive():
                self.death_file = self.work / "death-frames.jsonl"
                dump_frames(self.death_file, list(self.tally.recent),
                            "the last frames sent before the broker died, oldest first")
                log(f"broker died; last frames in {self.death_file}")
                return
            if time.monotonic() - last_report >= 10 and usage is not None:
                last_report = time.monotonic()
                rate = self.tally.sent / (last_report - started)
                log(f"{self.tally.sent} frames ({rate:.0f}/s) {dict(self.tally.outcomes)} "
                    f"fds={usage.fds} rss={usage.rss_mb} MB")
            await asyncio.sleep(0.25)


async def settle(broker: Broker, baseline: Usage, args: argparse.Namespace) -> Usage | None:
    """Usage once fds and RSS are back within margin, or at the end of ``--settle``."""
    deadline = time.monotonic() + args.settle
    while True:
        try:
            usage = broker.usage() if broker.alive() else None
        except OSError:
            usage = None
        if usage is None or time.monotonic() > deadline or _back(usage, baseline, args) == (
            True, True
        ):
            return usage
        await asyncio.sleep(0.5)


def _back(after: Usage, baseline: Usage, args: argparse.Namespace) -> tuple[bool, bool]:
    thread_fds = LOOP_FDS * max(0, after.threads - baseline.threads)
    return (after.other_fds - thread_fds <= baseline.other_fds + args.fd_margin,
            after.rss_mb <= baseline.rss_mb + args.rss_margin_mb)


async def fuzz(args: argparse.Namespace, broker: Broker, work: Path
               ) -> tuple[dict[str, Any], Driver]:
    skip = {int(k) for k in args.skip_api.split(",") if k}
    plain = broker.listeners["PLAINTEXT"]
    source = FrameSource(served_versions(plain, skip))
    targets = [Target(*plain)]
    if "SASL_PLAINTEXT" in broker.listeners:
        targets.append(Target(*broker.listeners["SASL_PLAINTEXT"], sasl=True))
    log(f"{len(source.pairs)} (api, version) pairs served; targets {targets}")

    warm = Driver(source, targets, args.seed, frames=len(source.pairs),
                  concurrency=1, per_connection=1, timeout=args.timeout)
    await warm.replay(warm_up(source, targets, args.seed), concurrency=8)
    await asyncio.sleep(1.0)
    baseline, baseline_fds = broker.usage(), broker.fd_targets()
    baseline_sockets = broker.sockets()
    log(f"baseline {baseline}")

    driver = Driver(source, targets, args.seed, frames=args.frames,
                    concurrency=args.concurrency, per_connection=args.per_connection,
                    timeout=args.timeout, rate=args.rate)
    watch = Watch(broker, driver.tally, work)
    done = asyncio.Event()
    watcher = asyncio.create_task(watch.run(done))
    start = time.monotonic()
    await driver.run(start + args.max_seconds, watch.died)
    seconds = time.monotonic() - start
    done.set()
    await watcher
    log(f"sent {driver.tally.sent} frames in {seconds:.0f} s; settling")
    after = await settle(broker, baseline, args) if not watch.died() else None
    result = summary(args, driver.tally, warm.tally, watch, baseline, after, seconds)
    if after is not None:
        try:
            result["broker"]["retained"] = retained_state(plain)
        except (OSError, AssertionError) as exc:
            result["broker"]["retained"] = repr(exc)
        grown = broker.fd_targets()
        grown.subtract(baseline_fds)
        result["broker"]["fds_grown"] = {t: n for t, n in grown.items() if n}
        sockets = broker.sockets()
        sockets.subtract(baseline_sockets)
        result["broker"]["sockets_grown"] = {t: n for t, n in sockets.items() if n}
    return result, driver


def warm_up(source: FrameSource, targets: list[Target], seed: int) -> list[Plan]:
    """One valid frame of every served (api, version) on the first listener, and an
    ApiVersions on every listener for each network thread it may have: the broker's
    lazily built state (codecs, each event loop's reserve fd) exists before the baseline."""
    plans = []
    for key, version in source.pairs:
        rng = random.Random(f"{seed}:warm:{key}:{version}")
        plans.append(Plan(targets[0], "plain", [source.valid(rng, key, version)]))
    for target in targets:
        for i in range(WARM_CONNECTIONS):
            rng = random.Random(f"{seed}:warm:{target.port}:{i}")
            plans.append(Plan(target, "plain", [source.valid(rng, API_VERSIONS, 3)]))
    return plans


def summary(args: argparse.Namespace, tally: Tally, warm: Tally, watch: Watch,
            baseline: Usage, after: Usage | None, seconds: float) -> dict[str, Any]:
    fds_back, rss_back = _back(after, baseline, args) if after else (False, False)
    return {
        "seed": args.seed,
        "frames_target": args.frames,
        "frames_sent": tally.sent,
        "kinds": dict(tally.kinds.most_common()),
        "outcomes_by_kind": dict(sorted(tally.by_kind.items())),
        "connections": tally.connections,
        "connect_errors": tally.connect_errors,
        "answered": tally.outcomes["answered"],
        "no_answer_due": tally.outcomes["no_answer_due"],
        "answered_other": tally.outcomes["answered_other"],
        "closed": tally.outcomes["closed"],
        "parked": tally.outcomes["parked"],
        "hung": tally.outcomes["hung"],
        "hung_cases": tally.hung_cases,
        "warmup": {"frames": warm.sent, **dict(warm.outcomes)},
        "warmup_hung_cases": warm.hung_cases,
        "deaths": int(watch.died()),
        "death_file": str(watch.death_file) if watch.death_file else None,
        "broker": {
            "baseline": vars(baseline) | {"other_fds": baseline.other_fds},
            "peak": watch.peak,
            "after": (vars(after) | {"other_fds": after.other_fds}) if after else None,
            "fds_back": fds_back,
            "rss_back": rss_back,
            "fd_margin": args.fd_margin,
            "rss_margin_mb": args.rss_margin_mb,
        },
        "seconds": round(seconds, 1),
        "frames_per_s": round(tally.sent / seconds, 1) if seconds else None,
    }


def log_cases(found: LogFindings, driver: Driver) -> dict[str, list[dict[str, Any]]]:
    """For each group of bad log lines, the frames of up to three connections behind them
    (regenerated from the seed: a connection's plan is deterministic)."""
    cases: dict[str, list[dict[str, Any]]] = {}
    for group, seen in found.cases.items():
        for connection_id, stamp in seen:
            port = int(connection_id.split("-")[1].rsplit(":", 1)[1])
            when = datetime.datetime.fromisoformat(stamp).timestamp()
            conn = driver.tally.connection_at(port, when)
            if conn is None:
                continue
            plan = driver.plan(conn)
            cases.setdefault(group, []).append({
                "connection": conn, "listener_sasl": plan.target.sasl, "style": plan.style,
                "frames": [{"kind": f.kind, "api_key": f.api_key, "api_version": f.api_version,
                            "hex": f.data.hex()[:8192]} for f in plan.frames],
            })
    return cases


def failures(result: dict[str, Any]) -> list[str]:
    found = []
    if result["deaths"]:
        found.append("broker died")
    hung = result["hung"] + result["warmup"].get("hung", 0)
    if hung:
        found.append(f"{hung} frames neither answered nor closed")
    if result["log"]["tracebacks"]:
        found.append(f"{result['log']['tracebacks']} tracebacks")
    if not result["deaths"] and not result["broker"]["fds_back"]:
        found.append("fds not back to baseline")
    if not result["deaths"] and not result["broker"]["rss_back"]:
        found.append("RSS not back to baseline")
    if result.get("shutdown_exit_code") not in (None, 0):
        found.append(f"shutdown exit code {result['shutdown_exit_code']}")
    return found


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="kplane-fuzz-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        broker = open_broker(args, work)
    except (ServeFailed, OSError) as exc:
        log(f"cannot set up the broker: {exc}")
        return 2
    try:
        result, driver = uvloop.run(fuzz(args, broker, work))
    except OSError as exc:  # the broker never answered ApiVersions
        log(f"cannot reach the broker: {exc!r}")
        return 2
    finally:
        exit_code = broker.stop()
    result["shutdown_exit_code"] = exit_code
    found = scan_log(broker.log_text())
    result["log"] = findings_json(found)
    result["log_cases"] = log_cases(found, driver)
    result["failures"] = failures(result)
    result["ok"] = not result["failures"]
    keep = args.work_dir is not None or not result["ok"]
    result["work_dir"] = str(work) if keep else None
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, indent=2))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
