"""KIP-291 benchmark: controller-request latency with the data plane saturated.

Runs ``kplane loadtest`` (idle, shared, separated) with fixed settings and prints JSON: the
client-side control-plane p50/p99 per scenario, the broker-side mean TotalTimeMs and
RequestQueueTimeMs of controller requests, data throughput, and the two target ratios
(separated p99 <= 2x idle p99; shared p99 >= 20x separated p99). Bounded: three scenarios of
``--duration`` seconds each plus set-up.

The data load is KIP-291's case: 500 light connections (``--load-client wire``) keep the data
queue near ``queued.max.requests``. On a machine with two or more CPUs the broker gets the
first CPU and the fake controller and the load the others, the load under SCHED_IDLE
(``loadtest_placement``), so the figures are the broker's and not the load generator's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from pathlib import Path

from kplane.tools.loadtest.runner import main as loadtest


def figures(summary: dict) -> dict:
    """The benchmark's figures from a loadtest summary."""
    out: dict = {
        "scenarios": {},
        "ratios": summary.get("ratios"),
        "targets": summary.get("targets"),
    }
    for name, scenario in summary["scenarios"].items():
        control = scenario["control"]["latency_ms"] or {}
        broker_total = {
            k: round(v, 3)
            for k, v in scenario.get("total_time_ms_mean", {}).items()
            if not k.startswith("Produce")
        }
        broker_queue = {
            k: round(v, 3)
            for k, v in scenario.get("request_queue_time_ms_mean", {}).items()
            if not k.startswith("Produce")
        }
        data = scenario.get("data") or {}
        out["scenarios"][name] = {
            "control_p50_ms": round(control.get("p50", 0.0), 3),
            "control_p99_ms": round(control.get("p99", 0.0), 3),
            "control_requests": scenario["control"]["requests"],
            "broker_total_time_ms_mean": broker_total,
            "broker_queue_time_ms_mean": broker_queue,
            "data_messages_per_s": round(data.get("messages_per_s", 0.0)),
            "request_queue_size_mean": round(
                scenario.get("queues", {}).get("RequestQueueSize", {}).get("mean", 0.0), 1
            ),
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument(
        "--producers",
        type=int,
        default=500,
        help="data connections (default 500: the data queue of queued.max.requests=500 fills)",
    )
    parser.add_argument("--load-client", choices=("confluent", "wire"), default="wire")
    parser.add_argument("--out", type=Path, default=None, help="keep the loadtest results here")
    parser.add_argument(
        "--switch-interval-us",
        type=int,
        default=5000,
        help="the brokers' kplane.gil.switch.interval.us (default 5000, CPython's own)",
    )
    parser.add_argument(
        "--data-thread-nice",
        type=int,
        default=0,
        help="the brokers' kplane.data.plane.thread.nice (default 0)",
    )
    parser.add_argument(
        "--no-placement",
        action="store_true",
        help="let the OS place broker, producers and fake controller on any CPU",
    )
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="kplane-bench-cp-"))
    placement = ["--no-placement"] if args.no_placement else []  # else the loadtest's own
    with contextlib.redirect_stdout(sys.stderr):  # the loadtest's own summary
        code = loadtest(
            [
                "--duration",
                str(args.duration),
                "--producers",
                str(args.producers),
                "--load-client",
                args.load_client,
                "--out",
                str(out),
                # One data-plane handler: the request queue really fills (mean ~390-490 of
                # 500), so "shared" shows KIP-291's queueing, not only CPU contention.
                "--broker-override",
                "num.io.threads=1",
                "--broker-override",
                f"kplane.gil.switch.interval.us={args.switch_interval_us}",
                "--broker-override",
                f"kplane.data.plane.thread.nice={args.data_thread_nice}",
                *placement,
            ]
        )
    if code != 0:
        return code
    summary = json.loads((out / "summary.json").read_text())
    json.dump(figures(summary), sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
