"""The command line of ``kplane loadtest``, kept light: the load test itself (confluent-kafka,
numpy, pyarrow) is imported only when the command runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> None:
    """Register the ``loadtest`` subcommand."""
    parser = sub.add_parser(
        "loadtest",
        help="measure controller-request latency with and without a separate control plane",
        description="Saturate the data plane and time controller requests (KIP-291): "
        "idle, shared and separated scenarios side by side; cluster-shared and "
        "cluster-separated: three brokers on ZooKeeper, replication factor 3, the real "
        "controller moving leaders.",
    )
    add_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the load test; exit code 1 when its extra is not installed."""
    try:
        from kplane.tools.loadtest import runner as loadtest
    except ImportError as exc:
        print(
            f"kplane loadtest: {exc.name} is missing: pip install 'kplane[report]'",
            file=sys.stderr,
        )
        return 1
    return loadtest.run(args)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``kplane loadtest``."""
    parser.add_argument(
        "--scenarios",
        default="idle,shared,separated",
        help="comma-separated scenarios to run, in order (default: idle,shared,separated); "
        "also cluster-shared and cluster-separated, or cluster for both",
    )
    parser.add_argument(
        "--duration", type=float, default=10.0, help="measured seconds per scenario (default 10)"
    )
    parser.add_argument(
        "--warmup",
        type=float,
        default=1.0,
        help="seconds of load before measuring, not recorded (default 1)",
    )
    parser.add_argument(
        "--producers",
        type=int,
        default=None,
        help="data connections (default 500 with the wire load, 64 with confluent: a broker "
        "works on one request per connection at a time, so the data queue fills only with "
        "many connections)",
    )
    parser.add_argument(
        "--partitions",
        type=int,
        default=None,
        help="partitions of the data topic (default: the number of producers)",
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="messages per second over all producers; 0 = as fast as possible (default)",
    )
    parser.add_argument(
        "--max-messages",
        type=int,
        default=20_000_000,
        help="at most this many messages per scenario (default 20000000)",
    )
    parser.add_argument(
        "--load-client",
        choices=("confluent", "wire"),
        default="wire",
        help="wire (default): light connections sending one Produce each at a time, for "
        "hundreds of connections (a data queue hundreds deep); confluent: librdkafka Producers",
    )
    parser.add_argument("--record-size", type=int, default=512, help="value bytes (default 512)")
    parser.add_argument(
        "--batch-records",
        type=int,
        default=10,
        help="records per Produce request of the wire client (default 10)",
    )
    parser.add_argument("--linger-ms", type=float, default=2.0, help="producer linger.ms (2)")
    parser.add_argument(
        "--sample-every",
        type=int,
        default=100,
        help="keep the latency of every Nth message in requests.parquet (default 100)",
    )
    parser.add_argument(
        "--control-rate",
        type=float,
        default=50.0,
        help="controller requests per second, one in flight (default 50)",
    )
    cluster = parser.add_argument_group(
        "cluster scenarios", "the real controller moves leaders (see loadtest_leader_moves)"
    )
    cluster.add_argument(
        "--move-rate",
        type=float,
        default=4.0,
        help="leader-move steps per second at most, one at a time: a reassignment that "
        "rotates the replicas, then a preferred election (default 4)",
    )
    cluster.add_argument(
        "--move-partitions",
        type=int,
        default=1,
        help="partitions of the topic whose leaders move, replication factor 3 (default 1: "
        "one LeaderAndIsr per broker and step, so each row is one request's own time)",
    )
    parser.add_argument(
        "--control-timeout",
        type=float,
        default=30.0,
        help="seconds before a controller request counts as timed out (default 30)",
    )
    parser.add_argument(
        "--scrape-interval",
        type=float,
        default=1.0,
        help="seconds between scrapes of the broker's metrics (default 1; each scrape holds "
        "the broker's interpreter for a few milliseconds)",
    )
    parser.add_argument(
        "--broker-override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="broker property for every scenario's broker (repeatable)",
    )
    placement = parser.add_argument_group(
        "placement", "keep the load generator off the broker's CPUs (see loadtest_placement)"
    )
    placement.add_argument(
        "--broker-cpus",
        metavar="CPUS",
        help="CPU list for the started brokers, as taskset -c takes it (default: any)",
    )
    placement.add_argument(
        "--client-cpus",
        metavar="CPUS",
        help="CPU list for the fake controller, the scraper and the producers (default: any)",
    )
    placement.add_argument(
        "--no-placement",
        action="store_true",
        help="let the OS place every process (by default, with two CPUs or more, started "
        "brokers get the first CPU and the fake controller and the load the others, the load "
        "under SCHED_IDLE)",
    )
    placement.add_argument(
        "--load-idle",
        action="store_true",
        help="run the producers under SCHED_IDLE: they take only CPU time nothing else wants, "
        "so they never delay the fake controller",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output directory (default ./loadtest-results/<timestamp>)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the whole summary (summary.json) instead of the table",
    )
    parser.add_argument(
        "--to-topic",
        metavar="TOPIC",
        help="also publish the results (requests, samples, summary) as records to TOPIC, "
        "for kplane report --from-topic",
    )
    parser.add_argument(
        "--to-bootstrap-server",
        metavar="HOST:PORT",
        help="the broker --to-topic publishes to (required with it)",
    )
    external = parser.add_argument_group("a running broker instead of started ones")
    external.add_argument("--bootstrap-server", metavar="HOST:PORT", help="data endpoint")
    external.add_argument(
        "--control-server",
        metavar="HOST:PORT",
        help="where controller requests go (default: the bootstrap server)",
    )
    external.add_argument("--metrics-url", help="the broker's Prometheus /metrics URL")
    external.add_argument("--broker-id", type=int, default=0, help="the broker's id (default 0)")
    external.add_argument(
        "--controller-epoch",
        type=int,
        default=1,
        help="the cluster's controller epoch (/controller_epoch; default 1): the fake "
        "controller speaks as that controller",
    )
    external.add_argument(
        "--listener",
        action="append",
        default=[],
        metavar="NAME=HOST:PORT",
        help="every endpoint of the broker, for UpdateMetadata (repeatable, required)",
    )
    external.add_argument(
        "--scenario-name", default="external", help="name of the one scenario (default external)"
    )
