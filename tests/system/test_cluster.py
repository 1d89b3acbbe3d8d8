"""Three kplane brokers on a real ZooKeeper (`kplane cluster up`), driven by confluent-kafka:
registration, one controller, partitions led by all, records through one broker, the
controller's requests on the control plane (or the inter-broker listener), failover after
kill -9, and a restarted broker rejoining."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from prometheus_client.parser import text_string_to_metric_families

from kplane.tools.cluster import STARTUP_TIMEOUT_S, start_broker

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("cluster")]
SESSION_TIMEOUT_MS = 3000


def _kplane(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kplane", *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def _cluster(directory: Path, *extra: str) -> Iterator[dict[str, Any]]:
    up = _kplane(
        "cluster",
        "up",
        "--brokers",
        "3",
        "--dir",
        str(directory),
        "--base-port",
        "0",
        "--session-timeout-ms",
        str(SESSION_TIMEOUT_MS),
        *extra,
    )
    assert up.returncode == 0, up.stderr
    try:
        yield json.loads((directory / "cluster.json").read_text())
    finally:
        _kplane("cluster", "down", "--dir", str(directory))


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[dict[str, Any]]:
    yield from _cluster(tmp_path / "cluster")


def _bootstrap(state: dict[str, Any], broker: str) -> str:
    return f"127.0.0.1:{state['brokers'][broker]['ports']['CLIENT']}"


def _zk(state: dict[str, Any]) -> KazooClient:
    zk = KazooClient(hosts=state["zookeeper"]["connect"] + "/kplane")
    zk.start(timeout=10)
    return zk


def _requests_by_plane(state: dict[str, Any], broker: str, request: str) -> dict[str, float]:
    """plane -> RequestsPerSec count of ``request`` on one broker (its /metrics)."""
    log = Path(state["brokers"][broker]["log"]).read_text()
    url = next(json.loads(line)["url"] for line in log.splitlines() if '"metrics exposed"' in line)
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name.startswith("kafka_network_requestmetrics_requestspersec"):
            for sample in family.samples:
                if sample.labels.get("request") == request and sample.name.endswith("_total"):
                    plane = sample.labels["plane"]
                    counts[plane] = counts.get(plane, 0.0) + sample.value
    return counts


def _wait(predicate, timeout: float = 30.0, what: str = "condition") -> Any:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_cluster_end_to_end(cluster: dict[str, Any]) -> None:
    zk = _zk(cluster)
    try:
        # Registration JSON of three brokers, with every listener (KIP-291's example shape).
        assert sorted(zk.get_children("/brokers/ids")) == ["0", "1", "2"]
        for broker_id in ("0", "1", "2"):
            doc = json.loads(zk.get(f"/brokers/ids/{broker_id}")[0])
            assert doc["listener_security_protocol_map"] == {
                "CLIENT": "PLAINTEXT",
                "INTERNAL": "PLAINTEXT",
                "CONTROLLER": "PLAINTEXT",
            }
            ports = cluster["brokers"][broker_id]["ports"]
            assert sorted(doc["endpoints"]) == sorted(
                f"{name}://127.0.0.1:{port}" for name, port in ports.items()
            )
            assert (doc["host"], doc["port"], doc["jmx_port"], doc["version"]) == (None, -1, -1, 4)
            assert "timestamp" in doc and "rack" in doc
        # Exactly one controller, the same seen through every broker.
        controller = json.loads(zk.get("/controller")[0])["brokerid"]
        for broker_id in ("0", "1", "2"):
            md = AdminClient({"bootstrap.servers": _bootstrap(cluster, broker_id)}).list_topics(
                timeout=10
            )
            assert sorted(md.brokers) == [0, 1, 2] and md.controller_id == controller
    finally:
        zk.stop()

    # A 6-partition topic created through broker 1, led by all three.
    bootstrap = _bootstrap(cluster, "1")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("spread", 6, 1)])["spread"].result(timeout=15)

    def led() -> dict[int, int] | None:
        topic = admin.list_topics(topic="spread", timeout=10).topics["spread"]
        leaders = {p.id: p.leader for p in topic.partitions.values()}
        return leaders if len(leaders) == 6 and min(leaders.values()) >= 0 else None

    leaders = _wait(led, what="6 led partitions")
    assert set(leaders.values()) == {0, 1, 2}

    # 10,000 records through broker 1's CLIENT listener (the client follows the leaders).
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    for i in range(10_000):
        producer.produce("spread", b"r%d" % i)
    assert producer.flush(60) == 0
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "spread", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe(["spread"])
    seen: set[bytes] = set()
    deadline = time.monotonic() + 60
    while len(seen) < 10_000 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen.add(message.value())
    consumer.close()
    assert seen == {b"r%d" % i for i in range(10_000)}

    # The controller's UpdateMetadata arrived on every broker's CONTROLLER listener.
    for broker_id in ("0", "1", "2"):
        planes = _requests_by_plane(cluster, broker_id, "UpdateMetadata")
        assert planes.get("control", 0) > 0 and planes.get("data", 0) == 0, planes

    # kill -9 of the controller: another broker takes over, the dead one leaves metadata,
    # its partitions go offline (no replica of them is in sync).
    dead = str(controller)
    os.kill(cluster["brokers"][dead]["pid"], signal.SIGKILL)
    survivor = next(b for b in ("0", "1", "2") if b != dead)
    admin = AdminClient({"bootstrap.servers": _bootstrap(cluster, survivor)})

    def failed_over() -> Any:
        md = admin.list_topics(topic="spread", timeout=10)
        return (
            md if int(dead) not in md.brokers and md.controller_id not in (-1, int(dead)) else None
        )

    md = _wait(failed_over, timeout=SESSION_TIMEOUT_MS / 1000 + 20, what="a new controller")
    assert sorted(md.brokers) == sorted(int(b) for b in ("0", "1", "2") if b != dead)
    offline = {p.id for p in md.topics["spread"].partitions.values() if p.leader == -1}
    assert offline == {p for p, leader in leaders.items() if leader == int(dead)}

    # The dead broker restarts and rejoins; its partitions come back.
    entry = cluster["brokers"][dead]
    serve = start_broker(int(dead), Path(entry["log"]).parent, entry["overrides"])
    process = serve.process
    try:
        serve.wait_started(STARTUP_TIMEOUT_S)
        back = _wait(
            lambda: (
                (m := admin.list_topics(topic="spread", timeout=10)).brokers.keys() == {0, 1, 2}
                and all(p.leader >= 0 for p in m.topics["spread"].partitions.values())
            ),
            what="the broker to rejoin",
        )
        assert back
    finally:
        process.terminate()
        process.wait(20)


def test_controller_requests_use_the_inter_broker_listener_without_a_control_plane(
    tmp_path: Path,
) -> None:
    for state in _cluster(tmp_path / "shared", "--override", "control.plane.listener.name="):
        for broker_id in ("0", "1", "2"):
            planes = _requests_by_plane(state, broker_id, "UpdateMetadata")
            assert planes.get("data", 0) > 0 and planes.get("control", 0) == 0, planes
