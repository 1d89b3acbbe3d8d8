"""Produce latency against the offered rate: single-record requests, rising rates.

Every target (default: kplane with its file log, kplane with its memory log, Tansu and
librdkafka's mock cluster) gets 1 KiB records from one confluent-kafka producer at a fixed
offered rate, each record its own Produce request (linger.ms=0, batch.num.messages=1,
acks=1), for ``--seconds`` per run, at each of ``--rates`` in turn. The order is
interleaved: per repetition, per rate, every target in turn, so a change in the machine's
load falls on all of them alike. A target stops rising once saturated (in its first
repetition, it delivered under 90 % of the offered rate or its p99 passed
``--saturation-ms``), except at 5,000 and 8,000 requests/s, the issue's rates, which every
target runs.

Reported per target and rate: the medians over ``--repeat`` runs of p50 and p99 (each run
kept beside them), of the rate achieved, and of the broker process's CPU time and context
switches per request (from ``/proc``; none for the in-process mock), which a busy machine
moves much less than latency; per target, the highest rate held (median p99
at most ``--p99-limit-ms``, at least 90 % of the offered rate delivered); per rate, kplane's
p50 and p99 over Tansu's. ``issue27`` checks the targets of the per-request-cost issue: at
5,000 and 8,000 requests/s kplane's p50 at most 2x Tansu's (or at most 2 ms) and its p99 at
most 2x Tansu's (or at most 20 ms), and the rate it holds at least Tansu's.

    .venv/bin/python bench/latency_sweep.py [--rates 1000,2000,5000,8000] [--repeat 3]
        [--seconds 5] [--targets kplane,kplane-memory,tansu,mock] [--out FILE]
        [any option of bench/throughput.py that sets up targets, e.g. --no-install]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import statistics
import sys
import time
from typing import Any

import throughput
from _baselines import emit_json
from throughput import TargetRun, log

DEFAULT_RATES = (1000, 2000, 3000, 5000, 8000, 12000, 16000)
DELIVERED_SHARE = 0.9
ISSUE27_RATES = (5000, 8000)


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, argparse.Namespace]:
    """The sweep's own options, and bench/throughput.py's (targets and their set-up)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--targets", default="kplane,kplane-memory,tansu,mock")
    ap.add_argument(
        "--rates",
        default=",".join(map(str, DEFAULT_RATES)),
        help="offered rates, records (= requests) a second, rising",
    )
    ap.add_argument("--seconds", type=float, default=5.0, help="length of one run (default 5)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per target and rate (default 3)")
    ap.add_argument("--p99-limit-ms", type=float, default=20.0)
    ap.add_argument("--saturation-ms", type=float, default=1000.0)
    ap.add_argument("--out", help="also write the JSON to this file")
    args, rest = ap.parse_known_args(argv)
    args.rates = sorted(int(r) for r in args.rates.split(","))
    if args.repeat < 1 or args.seconds <= 0 or not args.rates or min(args.rates) <= 0:
        ap.error("--repeat, --seconds and every rate must be positive")
    return args, throughput.parse_args(["--targets", args.targets, *rest])


def _saturated(run: dict[str, Any], rate: int, saturation_ms: float) -> bool:
    p99 = run.get("p99_ms")
    delivered = run.get("records_delivered", 0) / max(1, run.get("records_sent", 0))
    achieved = run.get("achieved_rate") or 0
    return (
        not run.get("valid")
        or p99 is None
        or p99 > saturation_ms
        or achieved < DELIVERED_SHARE * rate
        or delivered < DELIVERED_SHARE
    )


def _median(runs: list[dict[str, Any]], field: str) -> float | None:
    values = [r[field] for r in runs if r.get(field) is not None]
    return round(statistics.median(values), 3) if values else None


def summarise(runs: dict[int, list[dict[str, Any]]], limit_ms: float) -> dict[str, Any]:
    """Per rate the medians and the runs; the highest rate held within ``limit_ms``."""
    rates: dict[str, Any] = {}
    held = None
    for rate, done in sorted(runs.items()):
        if not done:
            continue
        p99 = _median(done, "p99_ms")
        achieved = _median(done, "achieved_rate")
        rates[str(rate)] = {
            "p50_ms": _median(done, "p50_ms"),
            "p99_ms": p99,
            "achieved_rate": achieved,
            "broker_cpu_us_per_request": _median(done, "broker_cpu_us_per_request"),
            "broker_context_switches_per_request": _median(
                done, "broker_context_switches_per_request"
            ),
            "runs": [
                {k: r.get(k) for k in ("p50_ms", "p99_ms", "max_ms", "achieved_rate", "valid")}
                for r in done
            ],
        }
        if p99 is not None and p99 <= limit_ms and (achieved or 0) >= DELIVERED_SHARE * rate:
            held = rate
    return {"rates": rates, "highest_rate_held": held}


def _ratio(num: float | None, den: float | None) -> float | None:
    return round(num / den, 3) if num is not None and den else None


def compare(targets: dict[str, Any], name: str, base: str) -> dict[str, Any]:
    """``name``'s p50 and p99 over ``base``'s at each rate both ran, and both held rates."""
    a, b = targets.get(name, {}), targets.get(base, {})
    per_rate = {}
    for rate, mine in a.get("rates", {}).items():
        theirs = b.get("rates", {}).get(rate)
        if theirs:
            per_rate[rate] = {
                "p50": _ratio(mine["p50_ms"], theirs["p50_ms"]),
                "p99": _ratio(mine["p99_ms"], theirs["p99_ms"]),
            }
    return {
        "per_rate": per_rate,
        "highest_rate_held": [a.get("highest_rate_held"), b.get("highest_rate_held")],
    }


def issue27(targets: dict[str, Any], name: str = "kplane") -> dict[str, Any]:
    """The per-request-cost issue's latency targets, each True, False or None (not run)."""
    mine, tansu = targets.get(name, {}), targets.get("tansu", {})
    out: dict[str, Any] = {}
    for rate in ISSUE27_RATES:
        a = mine.get("rates", {}).get(str(rate))
        b = tansu.get("rates", {}).get(str(rate))
        if not a or not b or None in (a["p50_ms"], a["p99_ms"], b["p50_ms"], b["p99_ms"]):
            out[str(rate)] = None
            continue
        out[str(rate)] = {
            "p50_ok": a["p50_ms"] <= max(2 * b["p50_ms"], 2.0),
            "p99_ok": a["p99_ms"] <= max(2 * b["p99_ms"], 20.0),
        }
    held, tansu_held = mine.get("highest_rate_held"), tansu.get("highest_rate_held")
    out["held_rate_ok"] = None if held is None or tansu_held is None else held >= tansu_held
    return out


def sweep(args: argparse.Namespace, runs: list[TargetRun]) -> dict[str, dict[int, list[Any]]]:
    """Every run, interleaved: per repetition, per rate, each target not yet saturated, and
    at the issue's rates (``ISSUE27_RATES``) every target, saturated or not, since the
    issue's targets compare latencies there."""
    results: dict[str, dict[int, list[Any]]] = {tr.name: {r: [] for r in args.rates} for tr in runs}
    ceiling: dict[str, int] = {}
    for repetition in range(args.repeat):
        for rate in args.rates:
            for tr in runs:
                past_ceiling = rate > ceiling.get(tr.name, rate)
                if not tr.active or (past_ceiling and rate not in ISSUE27_RATES):
                    continue
                assert tr.bench is not None
                try:
                    run = tr.bench.latency(rate, args.seconds)
                except Exception as exc:  # a dead or stuck target: it stops here
                    log(f"   {tr.name} at {rate}/s: {exc!r}")
                    tr.active = False
                    continue
                results[tr.name][rate].append(run)
                log(
                    f"   {tr.name} at {rate}/s (run {repetition + 1}): p50 {run['p50_ms']} ms, "
                    f"p99 {run['p99_ms']} ms, achieved {run['achieved_rate']}/s, broker "
                    f"{run['broker_cpu_us_per_request']} us CPU and "
                    f"{run['broker_context_switches_per_request']} context switches a request"
                )
                if (
                    repetition == 0
                    and not past_ceiling
                    and _saturated(run, rate, args.saturation_ms)
                ):
                    ceiling[tr.name] = rate
    return results


def main(argv: list[str] | None = None) -> int:
    args, target_args = parse_args(argv)
    started = throughput.begin_run()
    runs = [TargetRun(name, target_args) for name in target_args.target_list]
    interrupted = False
    results: dict[str, dict[int, list[Any]]] = {}
    try:
        for tr in runs:
            tr.setup()
        results = sweep(args, runs)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        for tr in runs:
            tr.close()
    targets = {
        tr.name: {**summarise(results.get(tr.name, {}), args.p99_limit_ms), "status": tr.out}
        for tr in runs
    }
    result = {
        "machine": throughput.machine_info(),
        "started_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "settings": {
            "rates": args.rates,
            "seconds": args.seconds,
            "repeat": args.repeat,
            "p99_limit_ms": args.p99_limit_ms,
            "producer": {"acks": "1", "linger.ms": 0, "batch.num.messages": 1, "record": "1 KiB"},
            "order": "per repetition, per rate, every target in turn",
            "aggregate": "median over repeated runs (each run alongside)",
        },
        "targets": targets,
        "ratios": {
            "kplane_vs_tansu": compare(targets, "kplane", "tansu"),
            "kplane_memory_vs_tansu": compare(targets, "kplane-memory", "tansu"),
            "kplane_vs_mock": compare(targets, "kplane", "mock"),
        },
        "issue27": issue27(targets),
        "wall_seconds": round(time.monotonic() - started, 1),
    }
    result["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    emit_json(result, args.out)
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
