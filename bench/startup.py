"""Start-up of kplane as a client test sees it, against librdkafka's mock cluster and Tansu.

Prints JSON:

* ``in_process``: an in-process broker (what the ``kafka_broker`` fixture starts): from the
  config to an answered ApiVersions on its listener, the first broker of the process (imports
  included: ``cold_ms``) and the next ``--brokers`` ones (``warm_p50_ms``, ``warm_max_ms``),
  and how long each takes to shut down.
* ``serve``: ``kplane serve configs/server.properties`` (memory log) from process start to
  an answered ApiVersions, median of ``--runs``.
* ``help``: ``kplane --help`` to exit, median of ``--runs``.
* ``baselines``: librdkafka's mock cluster (created in this process by a client with
  ``test.mock.num.brokers``, to the first answered Metadata) and Tansu (spawn to an answered
  ApiVersions; skipped with the reason when its binary is missing and ``--no-install``).

Bounded: a few dozen brokers started and stopped. ``.venv/bin/python bench/startup.py``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _baselines import (
    REPO_ROOT,
    TansuTarget,
    TargetError,
    emit_json,
    find_kplane,
    free_port,
    machine,
)


def _api_versions(port: int, timeout_s: float = 30.0) -> None:
    """Wait until 127.0.0.1:``port`` answers ApiVersions."""
    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    from kplane.testing.wire import WireClient

    deadline = time.perf_counter() + timeout_s
    while True:
        try:
            with WireClient("127.0.0.1", port, timeout=2) as client:
                client.request(
                    ApiVersionsRequest(client_software_name="bench", client_software_version="1")
                )
            return
        except OSError:
            if time.perf_counter() > deadline:
                raise
            time.sleep(0.002)


def in_process(brokers: int) -> dict[str, Any]:
    """Ready and shutdown times of in-process brokers, the first one with its imports."""
    began = time.perf_counter()
    from kplane.broker.config.kafka_config import KafkaConfig
    from kplane.broker.logging_setup import configure_logging
    from kplane.broker.server.kafka_server import KafkaServer
    from kplane.testing.broker_view import BrokerView
    from kplane.testing.plugin import TEST_DEFAULTS

    configure_logging(cache_loggers=False)
    ready: list[float] = []
    stops: list[float] = []
    for i in range(brokers + 1):
        started = began if i == 0 else time.perf_counter()
        props = {**TEST_DEFAULTS, "log.dirs": tempfile.mkdtemp(prefix="bench-startup-")}
        server = KafkaServer(KafkaConfig.from_properties(props))
        server.startup()
        _api_versions(BrokerView(server).address("PLAINTEXT")[1])
        ready.append((time.perf_counter() - started) * 1000)
        stopping = time.perf_counter()
        server.shutdown()
        stops.append((time.perf_counter() - stopping) * 1000)
    warm = ready[1:]
    return {
        "cold_ms": round(ready[0], 1),
        "warm_p50_ms": round(statistics.median(warm), 1),
        "warm_max_ms": round(max(warm), 1),
        "shutdown_p50_ms": round(statistics.median(stops), 1),
        "brokers": brokers,
        "target_warm_ms": 50,
    }


def serve(runs: int) -> dict[str, Any]:
    """``kplane serve`` from spawn to an answered ApiVersions."""
    times = []
    for _ in range(runs):
        port = free_port()
        work = tempfile.mkdtemp(prefix="bench-startup-serve-")
        started = time.perf_counter()
        process = subprocess.Popen(
            [find_kplane(), "serve", str(REPO_ROOT / "configs/server.properties"),
             "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
             "--override", f"log.dirs={work}", "--override", "kplane.log.storage=memory",
             "--override", "kplane.metrics.port=0"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO_ROOT,
        )
        try:
            _api_versions(port)
            times.append((time.perf_counter() - started) * 1000)
        finally:
            process.terminate()
            process.wait(30)
    return {"ready_p50_ms": round(statistics.median(times), 1),
            "ready_runs_ms": [round(t, 1) for t in times], "target_ms": 300}


def help_time(runs: int) -> dict[str, Any]:
    """``kplane --help`` to exit."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([find_kplane(), "--help"], stdout=subprocess.DEVNULL, check=True)
        times.append((time.perf_counter() - started) * 1000)
    return {"p50_ms": round(statistics.median(times), 1), "target_ms": 200}


def mock_cluster(runs: int) -> dict[str, Any]:
    """librdkafka's mock cluster: client created with ``test.mock.num.brokers`` to the
    first answered Metadata."""
    from confluent_kafka.admin import AdminClient

    times = []
    for _ in range(runs):
        started = time.perf_counter()
        admin = AdminClient({"test.mock.num.brokers": 1})
        admin.list_topics(timeout=10)
        times.append((time.perf_counter() - started) * 1000)
        del admin
    return {"ready_p50_ms": round(statistics.median(times), 1), "in_process": True}


def tansu(runs: int, install: bool) -> dict[str, Any]:
    """Tansu (memory storage) from spawn to an answered ApiVersions."""
    times = []
    for _ in range(runs):
        try:
            target = TansuTarget(install=install, log=lambda *_: None)
        except TargetError as exc:
            return {"skipped": str(exc)}
        started = time.perf_counter()  # spawned here: Target.start polls every 0.2 s
        process = subprocess.Popen(
            target.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            _api_versions(target.port)
            times.append((time.perf_counter() - started) * 1000)
        finally:
            process.terminate()
            process.wait(30)
    return {"ready_p50_ms": round(statistics.median(times), 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=20, help="warm in-process brokers")
    parser.add_argument("--runs", type=int, default=5, help="runs of each process timing")
    parser.add_argument("--no-install", action="store_true", help="do not download Tansu")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args(argv)
    os.environ.setdefault("KPLANE_LOG_LEVEL", "warning")
    result = {
        "machine": machine(),
        "in_process": in_process(args.brokers),
        "serve": serve(args.runs),
        "help": help_time(args.runs),
        "baselines": {
            "librdkafka_mock": mock_cluster(args.runs),
            "tansu": tansu(args.runs, not args.no_install),
        },
    }
    emit_json(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
