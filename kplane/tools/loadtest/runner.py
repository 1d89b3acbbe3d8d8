"""``kplane loadtest``: KIP-291's effect, measured.

Runs scenarios one after the other, each on a fresh ``kplane serve`` process (or once against
a running broker): a fake controller sends UpdateMetadata and LeaderAndIsr at a fixed rate
while Producers saturate the data plane, and the broker's metrics are scraped every
``--scrape-interval`` seconds.

* ``idle``: control plane separated, no data load (the baseline);
* ``shared``: controller requests arrive on the inter-broker listener (the data plane);
* ``separated``: controller requests arrive on ``control.plane.listener.name``.

The cluster scenarios (``cluster`` for both) start ZooKeeper and three brokers, create the
topics with replication factor 3 (so followers fetch every record over INTERNAL beside the
Producers on CLIENT) and let the cluster's own controller move leaders
(``loadtest_leader_moves``), its LeaderAndIsr and UpdateMetadata timed by the brokers:

* ``cluster-shared``: no CONTROLLER listener; controller requests wait on INTERNAL behind
  the followers' fetches and in the data queue behind client requests;
* ``cluster-separated``: controller requests arrive on CONTROLLER, the control plane.

Writes requests.parquet, samples.parquet and summary.json (see ``loadtest_results``) and
prints the summary on stdout. Exit code 0, or 1 when a scenario could not run.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import multiprocessing.connection
import os
import signal
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import uvloop
from confluent_kafka import KafkaException

from kplane.common.network.connection import UnsupportedApi
from kplane.tools.loadtest import client_telemetry
from kplane.tools.loadtest.cli import add_arguments
from kplane.tools.loadtest.controller import API_TITLES, ControlPlan, ControlResult, FakeController
from kplane.tools.loadtest.leader_moves import LeaderMover
from kplane.tools.loadtest.metrics import Scraper
from kplane.tools.loadtest.placement import (
    Placement,
    available_cpus,
    default_split,
    describe_placement,
    parse_cpus,
)
from kplane.tools.loadtest.producers import (
    FLUSH_TIMEOUT_S,
    READY_TIMEOUT_S,
    LoadConfig,
    LoadProcess,
    LoadResult,
    run_load,
    start_load,
)
from kplane.tools.loadtest.progress import Progress
from kplane.tools.loadtest.publish import publish_results
from kplane.tools.loadtest.results import ScenarioRun, summarize, write_parquet, write_summary
from kplane.tools.loadtest.scenarios import (
    ALL_SCENARIOS,
    CLUSTER_BROKERS,
    SCENARIO_GROUPS,
    ClusterTarget,
    ScenarioError,
    Target,
    external_target,
    is_loopback,
    started_broker,
    started_cluster,
)
from kplane.tools.loadtest.table import summary_table
from kplane.tools.loadtest.topics import (
    CONTROL_PARTITIONS,
    CONTROL_TOPIC,
    DATA_TOPIC,
    TopicError,
    create_topics,
    describe_topic,
)
from kplane.tools.loadtest.wire_load import run_wire_load

PROGRESS_INTERVAL_S = 0.5
RESULT_MARGIN_S = 10.0
"""How much longer than the load's own bounds the parent waits for its result."""


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m kplane.tools.loadtest.runner ...``."""
    parser = argparse.ArgumentParser(prog="kplane loadtest", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Run every scenario, write the results, print the summary; 0, 1 (a scenario could not
    run) or 2 (bad options)."""
    try:
        scenarios, external = _check(args)
        placement = _placement(args)
    except ValueError as exc:
        print(f"kplane loadtest: {exc}", file=sys.stderr)
        return 2
    if importlib.util.find_spec("pyarrow") is None:  # checked before minutes of measuring
        print("kplane loadtest: pyarrow is missing; pip install 'kplane[report]'", file=sys.stderr)
        return 1
    out: Path = args.out or Path("loadtest-results") / datetime.now().strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    progress = Progress()
    runs: list[ScenarioRun] = []
    failures: list[str] = []
    try:
        with (
            _sigterm_interrupts(),
            placement.client_pinned(),
            tempfile.TemporaryDirectory(prefix="kplane-lt-") as workdir,
        ):
            for name in scenarios:
                progress.message(f"kplane loadtest: scenario {name}")
                try:
                    runs.append(
                        _scenario(name, args, external, placement, out, Path(workdir), progress)
                    )
                except ScenarioError as exc:
                    failures.append(f"scenario {name} could not run: {exc}")
                finally:
                    progress.done()
    except KeyboardInterrupt:
        failures.append("interrupted")
    if runs:
        write_parquet(out, runs)
        summary = summarize(runs, _options(args, out))
        write_summary(out, summary)
        print(json.dumps(summary, indent=2) if args.json else summary_table(summary))
        if args.to_topic:
            count = publish_results(args.to_bootstrap_server, args.to_topic, runs, summary)
            print(f"kplane loadtest: {count} records published to {args.to_topic}")
    for failure in failures:
        print(f"kplane loadtest: {failure}", file=sys.stderr)
    return 1 if failures else 0


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt meanwhile, so brokers and load are stopped as on
    Ctrl-C (only in the main thread, where signal handlers can be set)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _check(args: argparse.Namespace) -> tuple[list[str], Target | None]:
    """The scenarios to run and the external target, if any; ValueError on bad options.
    ``--producers`` left out becomes the load client's default (500 wire, 64 confluent)."""
    if args.producers is None:
        args.producers = 500 if args.load_client == "wire" else 64
    for name in (
        "duration",
        "producers",
        "record_size",
        "sample_every",
        "control_rate",
        "batch_records",
        "scrape_interval",
        "move_rate",
        "move_partitions",
    ):
        if getattr(args, name) <= 0:
            raise ValueError(f"--{name.replace('_', '-')} must be positive")
    if args.max_messages <= 0 or (args.partitions or 1) <= 0:
        raise ValueError("--max-messages and --partitions must be positive")
    if args.rate < 0 or args.warmup < 0:
        raise ValueError("--rate and --warmup must be at least 0")
    if bool(args.to_topic) != bool(args.to_bootstrap_server):
        raise ValueError("--to-topic and --to-bootstrap-server go together")
    if args.metrics_url is not None:
        host = urllib.parse.urlsplit(args.metrics_url).hostname
        if not host or not is_loopback(host):
            raise ValueError(f"--metrics-url {args.metrics_url} is not a loopback URL")
    if args.bootstrap_server:
        target = external_target(
            args.bootstrap_server,
            args.control_server,
            args.listener,
            args.broker_id,
            args.metrics_url,
            args.controller_epoch,
        )
        return [args.scenario_name], target
    if args.control_server or args.listener or args.metrics_url:
        raise ValueError("--control-server, --listener and --metrics-url need --bootstrap-server")
    names = [
        name
        for n in str(args.scenarios).split(",")
        if n.strip()
        for name in SCENARIO_GROUPS.get(n.strip(), (n.strip(),))
    ]
    unknown = [n for n in names if n not in ALL_SCENARIOS]
    if unknown or not names:
        raise ValueError(
            f"unknown scenario(s) {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join([*ALL_SCENARIOS, *SCENARIO_GROUPS])}"
        )
    return list(dict.fromkeys(names)), None


def _placement(args: argparse.Namespace) -> Placement:
    """The processes' CPU sets: as the options say, else (started brokers, two CPUs or more,
    no ``--no-placement``) the broker on the first CPU and the rest for the fake controller
    and the load, under SCHED_IDLE; ValueError on bad options. ``args.placement`` says in
    words what ran and why."""
    if args.broker_cpus and args.bootstrap_server:
        raise ValueError("--broker-cpus applies to started brokers, not --bootstrap-server")
    if not (args.broker_cpus or args.client_cpus or args.no_placement or args.bootstrap_server):
        split = default_split(sorted(available_cpus()))
        if split is not None:
            args.broker_cpus, args.client_cpus = split
            args.load_idle = True
    placement = Placement(
        parse_cpus(args.broker_cpus) if args.broker_cpus else None,
        parse_cpus(args.client_cpus) if args.client_cpus else None,
    )
    args.placement = describe_placement(
        args.broker_cpus, args.client_cpus, args.load_idle, len(available_cpus())
    )
    return placement


def _scenario(
    name: str,
    args: argparse.Namespace,
    external: Target | None,
    placement: Placement,
    out: Path,
    workdir: Path,
    progress: Progress,
) -> ScenarioRun:
    """Run one scenario on ``external`` or on a broker started for it."""
    partitions = args.partitions or args.producers
    if external is not None:
        return uvloop.run(_measure(name, external, True, args, partitions, progress))
    spec = ALL_SCENARIOS[name]
    if spec.brokers > 1:
        with started_cluster(
            spec, workdir, out, partitions, args.broker_override, placement.broker_preexec()
        ) as cluster:
            return uvloop.run(_measure_cluster(name, cluster, args, partitions, progress))
    with started_broker(
        spec,
        workdir,
        out / f"{name}-broker.log",
        partitions,
        args.broker_override,
        placement.broker_preexec(),
    ) as target:
        return uvloop.run(_measure(name, target, spec.data_load, args, partitions, progress))


async def _measure(
    name: str,
    target: Target,
    data_load: bool,
    args: argparse.Namespace,
    partitions: int,
    progress: Progress,
) -> ScenarioRun:
    """Set up the topics and the controller, then load and measure for ``args.duration``."""
    bootstrap = f"{target.data.host}:{target.data.port}"
    scraper = Scraper(target.metrics_url, args.scrape_interval) if target.metrics_url else None
    try:
        await asyncio.to_thread(
            create_topics, bootstrap, {DATA_TOPIC: partitions, CONTROL_TOPIC: CONTROL_PARTITIONS}
        )
        topic = await describe_topic(target.data.host, target.data.port, CONTROL_TOPIC)
        plan = ControlPlan(
            target.broker_id,
            target.endpoints,
            target.control,
            CONTROL_TOPIC,
            topic.topic_id,
            topic.partitions,
            target.controller_epoch,
        )
        controller = FakeController(
            target.control.host,
            target.control.port,
            plan,
            topic.leader_epoch,
            args.control_rate,
            args.control_timeout,
            scraper.nudge if scraper is not None else lambda: None,
        )
        versions = await controller.connect()
    except (TopicError, KafkaException, UnsupportedApi, OSError) as exc:
        raise ScenarioError(str(exc) or repr(exc)) from None
    run = ScenarioRun(
        name, target, {API_TITLES[k]: v for k, v in versions.items()}, float(args.duration)
    )
    pushing = data_load and client_telemetry.pushes(args.load_client)
    if pushing:
        run.client_telemetry = await client_telemetry.subscribe(bootstrap)
    try:
        async with _data_load(args, bootstrap, partitions, data_load) as load:
            if scraper is not None:
                asyncio.get_running_loop().call_later(args.warmup, scraper.start)
            try:
                run.load = await _run_loaded(name, controller, args, load, progress)
            finally:
                if scraper is not None:  # before the load stops
                    run.samples = scraper.stop()
                    run.scrape_failures = scraper.failures
    finally:
        controller.close()
        if pushing:
            await client_telemetry.unsubscribe(bootstrap)
    run.control = controller.results
    run.connect_failures = controller.connect_failures
    return run


async def _measure_cluster(
    name: str, cluster: ClusterTarget, args: argparse.Namespace, partitions: int, progress: Progress
) -> ScenarioRun:
    """Create the topics with replication factor 3, then load the data plane and move
    leaders for ``args.duration``."""
    topics = {DATA_TOPIC: partitions, CONTROL_TOPIC: args.move_partitions}
    mover = LeaderMover(cluster.brokers, CONTROL_TOPIC, args.move_rate, args.control_timeout)
    try:
        await asyncio.to_thread(create_topics, cluster.bootstrap, topics, CLUSTER_BROKERS)
        versions = await mover.connect()
    except (TopicError, KafkaException, UnsupportedApi, OSError) as exc:
        mover.close()
        raise ScenarioError(str(exc) or repr(exc)) from None
    run = ScenarioRun(
        name,
        cluster.brokers[mover.controller_id],
        versions,
        float(args.duration),
        brokers=cluster.brokers,
    )
    pushing = client_telemetry.pushes(args.load_client)
    if pushing:
        run.client_telemetry = await client_telemetry.subscribe(cluster.bootstrap)
    try:
        async with _data_load(args, cluster.bootstrap, partitions, True) as load:
            run.load = await _run_loaded(name, mover, args, load, progress)
    finally:
        mover.close()
        if pushing:
            await client_telemetry.unsubscribe(cluster.bootstrap)
    run.control = mover.results
    run.propagation = mover.propagation
    run.samples = mover.samples
    run.scrape_failures = mover.scrape_failures
    run.moves = mover.counts.as_dict()
    return run


class Measurer(Protocol):
    """What runs while the data plane is loaded: the fake controller or the leader mover."""

    results: list[ControlResult]

    async def run(self, seconds: float, warmup: float = 0.0) -> None: ...


@dataclass
class _Load:
    """The running data load (None: the scenario has none) and its result once received."""

    process: LoadProcess | None
    result: LoadResult | None = None


@asynccontextmanager
async def _data_load(
    args: argparse.Namespace, bootstrap: str, partitions: int, enabled: bool
) -> AsyncIterator[_Load]:
    """Start the load process (when ``enabled``), wait until it is ready and let it go; it
    is stopped when the block ends."""
    entry = run_wire_load if args.load_client == "wire" else run_load
    load = _Load(start_load(_load_config(args, bootstrap, partitions), entry) if enabled else None)
    try:
        if load.process is not None:
            ready = await _receive(load.process, READY_TIMEOUT_S)
            if ready != "ready":
                raise ScenarioError(str(ready))
            load.process.conn.send("go")
        yield load
    finally:
        if load.process is not None:
            _stop(load.process.process, finished=load.result is not None)


async def _run_loaded(
    name: str, measurer: Measurer, args: argparse.Namespace, load: _Load, progress: Progress
) -> LoadResult | None:
    """Run ``measurer`` for the warm-up and the duration; the load's result."""
    await _with_progress(name, measurer, args, load.process, progress)
    if load.process is not None:
        result = await _receive(load.process, FLUSH_TIMEOUT_S + RESULT_MARGIN_S)
        if not isinstance(result, LoadResult):
            raise ScenarioError(str(result))
        load.result = result
    return load.result


async def _receive(load: LoadProcess, timeout: float) -> Any:
    """The next message of the load process; ScenarioError when none comes in ``timeout``
    seconds or the process is gone."""
    loop = asyncio.get_running_loop()
    readable: asyncio.Future[None] = loop.create_future()

    def on_readable() -> None:
        if not readable.done():
            readable.set_result(None)

    fd = load.conn.fileno()
    loop.add_reader(fd, on_readable)
    try:
        await asyncio.wait_for(readable, timeout)
    except TimeoutError:
        raise ScenarioError(f"the load process sent nothing within {timeout:.0f} s") from None
    finally:
        loop.remove_reader(fd)
        os.set_blocking(fd, True)  # the event loop made it non-blocking
    try:
        return load.conn.recv()
    except EOFError:
        raise ScenarioError("the load process exited unexpectedly") from None


async def _with_progress(
    name: str,
    measurer: Measurer,
    args: argparse.Namespace,
    load: LoadProcess | None,
    progress: Progress,
) -> None:
    """Run ``measurer`` for the warm-up and the duration, updating the progress line."""
    task = asyncio.ensure_future(measurer.run(args.duration, args.warmup))
    total = args.warmup + args.duration
    start = time.monotonic()
    while not task.done():
        await asyncio.wait([task], timeout=PROGRESS_INTERVAL_S)
        latencies = [r.latency_ms for r in measurer.results]
        p99 = float(np.percentile(latencies, 99)) if latencies else None
        sent = int(load.progress[0]) if load is not None else 0
        progress.update(name, time.monotonic() - start, total, sent, len(latencies), p99)
    task.result()


def _stop(process: multiprocessing.process.BaseProcess, finished: bool) -> None:
    """Let a ``finished`` load process exit, else terminate it; kill it if that fails."""
    if finished:
        process.join(5.0)
    if process.is_alive():
        process.terminate()
        process.join(5.0)
    if process.is_alive():
        process.kill()
        process.join()


def _load_config(args: argparse.Namespace, bootstrap: str, partitions: int) -> LoadConfig:
    return LoadConfig(
        bootstrap=bootstrap,
        topic=DATA_TOPIC,
        producers=args.producers,
        warmup=args.warmup,
        duration=args.duration,
        rate=args.rate,
        max_messages=args.max_messages,
        record_size=args.record_size,
        linger_ms=args.linger_ms,
        sample_every=args.sample_every,
        idle_priority=args.load_idle,
        partitions=partitions,
        batch_records=args.batch_records,
    )


def _options(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """The options as summary.json records them."""
    options = {k: v for k, v in vars(args).items() if k not in ("func", "command")}
    options["out"] = str(out)
    if options.get("partitions") is None:
        options["partitions"] = args.producers
    return options


if __name__ == "__main__":
    sys.exit(main())
