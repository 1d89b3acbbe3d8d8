"""A log dir on a full disk (issue 25, KIP-112): its replicas go offline and answer
KAFKA_STORAGE_ERROR instead of closing the connection, the controller moves their
leaderships to the rest of the ISR, a broker whose every log dir failed shuts down with one
line, and no acknowledged record is lost. The disks are small tmpfs mounts (root only)."""

from __future__ import annotations

import errno
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from structlog.testing import capture_logs

from kplane.protocol.errors import ErrorCode
from kplane.protocol.records import Record, build_batch
from kplane.testing.plugin import RunningBroker
from kplane.tools.serve_process import json_events
from tests.integration.helpers import fetch_partition, fetch_request, produce, wait_until

pytestmark = pytest.mark.slow

VALUE = b"x" * 1000
CLUSTER = {
    "kplane.log.storage": "file",
    "zookeeper.session.timeout.ms": "10000",
    "replica.fetch.wait.max.ms": "100",
    "replica.fetch.backoff.ms": "100",
}


@pytest.fixture
def tmpfs() -> Iterator[Callable[..., Path]]:
    """``tmpfs(path, size="4m")``: a tmpfs of ``size`` mounted at ``path``; the test is
    skipped, with the reason, when that is not possible. Unmounted at teardown."""
    mounted: list[Path] = []

    def mount(path: Path, size: str = "4m") -> Path:
        if os.geteuid() != 0:
            pytest.skip("mounting a tmpfs needs root")
        path.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip() or done.returncode}")
        mounted.append(path)
        return path

    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)], check=False)


def _fill(directory: Path, leave: int = 0) -> Path:
    """Write a file in ``directory`` until its file system is full, then give back
    ``leave`` bytes of it."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)
    if leave:
        os.truncate(filler, max(0, filler.stat().st_size - leave))
    return filler



def _create(bootstrap: str, topic: str, replicas: list[int], **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, num_partitions=1, replica_assignment=[replicas], config=configs)
    admin.create_topics([new])[topic].result(15)


def _isr(broker: RunningBroker, topic: str) -> tuple[int, ...]:
    p = broker.partitions(topic).get(0)
    return p.isr if p is not None else ()


def _read_values(bootstrap: str, topic: str, at_least: int) -> set[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: set[bytes] = set()
    deadline = time.monotonic() + 60
    try:
        while len(values) < at_least and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                values.add(msg.value())
    finally:
        consumer.close()
    return values


class Delivered:
    """What a producer's delivery reports said: the values acknowledged, the errors."""

    def __init__(self) -> None:
        self.acked: list[bytes] = []
        self.errors: list[KafkaError] = []

    def __call__(self, err: KafkaError | None, msg: Any) -> None:
        if err is None:
            self.acked.append(msg.value())
        else:
            self.errors.append(err)


def _errors(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e.get("level", e.get("log_level")) in ("error", "critical")]


def test_a_full_disk_answers_storage_errors_and_the_broker_stops_then_recovers(
    tmp_path: Path, tmpfs, broker_process  # type: ignore[no-untyped-def]
) -> None:
    log_dir = tmpfs(tmp_path / "disk")
    broker = broker_process("configs/server.properties", f"log.dirs={log_dir}")
    _create(broker.bootstrap, "full", [0])
    _fill(log_dir, leave=256 * 1024)
    delivered = Delivered()
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": "all",
            "retries": 0,
            "enable.idempotence": False,
        }
    )
    for i in range(10_000):
        producer.produce("full", VALUE + b"-%d" % i, on_delivery=delivered)
        producer.flush(30)
        if delivered.errors:
            break
    assert delivered.acked, "nothing was acknowledged before the disk filled"
    (error,) = delivered.errors
    assert error.code() == KafkaError.KAFKA_STORAGE_ERROR, error  # not a closed connection

    # Its only log dir failed: the broker stops by itself (exit 1, as Kafka halts), in few
    # lines and no traceback.
    assert broker.process.wait(timeout=60) == 1
    text = broker.log_text()
    assert "Traceback" not in text, text
    events = json_events(text)
    assert [e["event"] for e in _errors(events)] == [
        "log dir failed: its replicas go offline",
        "shutdown broker because all log dirs have failed",
    ], text
    warnings = [e for e in events if e.get("level") == "warning"]
    assert len(warnings) <= 5, warnings
    assert not [e for e in events if "closing connection" in e["event"]], text

    # Space freed and a restart: every acknowledged record is there.
    (log_dir / "filler").unlink()
    again = broker_process("configs/server.properties", f"log.dirs={log_dir}")
    values = _read_values(again.bootstrap, "full", len(delivered.acked))
    assert set(delivered.acked) <= values
    again.terminate()


def test_a_leader_whose_only_disk_fills_hands_over_and_shuts_down(
    tmp_path: Path, tmpfs, kafka_cluster  # type: ignore[no-untyped-def]
) -> None:
    # kafka_cluster puts broker 0's log dir at <tmp_path>/broker-0: a tmpfs here.
    log_dir = tmpfs(tmp_path / "broker-0", size="8m")
    cluster = kafka_cluster(3, CLUSTER)
    leader, others = cluster.broker(0), [cluster.broker(1), cluster.broker(2)]
    assert leader.current_config("log.dirs") == str(log_dir)
    _create(cluster.bootstrap_servers, "orders", [0, 1, 2], **{"min.insync.replicas": "2"})
    wait_until(lambda: len(_isr(others[0], "orders")) == 3, what="an ISR of three")
    delivered = Delivered()
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 5}
    )

    def send(count: int, start: int) -> None:
        for i in range(start, start + count):
            producer.produce("orders", VALUE + b"-%d" % i, on_delivery=delivered)
            producer.poll(0)
        producer.flush(60)

    send(200, 0)
    with capture_logs() as logs:
        _fill(log_dir)
        filled = time.monotonic()
        i = 200
        while (p := others[0].partitions("orders")[0]).leader in (0, -1):
            assert time.monotonic() - filled < 30, f"leadership still at {p}"
            send(10, i)
            i += 10
        send(200, i)  # on the new leader, acks=all
        wait_until(lambda: 0 not in others[0].alive_brokers(), what="broker 0 gone")
        wait_until(lambda: any(e["event"] == "stopped" for e in logs), what="broker 0 stopped")
    assert len(delivered.acked) >= 400
    values = _read_values(others[0].bootstrap(), "orders", len(delivered.acked))
    assert set(delivered.acked) <= values  # not one acknowledged record lost
    assert [e["event"] for e in _errors(logs)] == [
        "log dir failed: its replicas go offline",
        "shutdown broker because all log dirs have failed",
    ], _errors(logs)
    assert not [e for e in logs if "exc_info" in e or "exception" in e]


def test_a_failed_log_dir_takes_its_replicas_offline_and_the_controller_moves_them(
    tmp_path: Path, tmpfs, broker_factory, zookeeper  # type: ignore[no-untyped-def]
) -> None:
    failing = tmpfs(tmp_path / "failing", size="8m")
    healthy = tmp_path / "healthy"
    common = {**CLUSTER, "zookeeper.connect": zookeeper}
    brokers = [
        broker_factory({**common, "broker.id": "0", "log.dirs": f"{failing},{healthy}"}),
        broker_factory({**common, "broker.id": "1"}),
        broker_factory({**common, "broker.id": "2"}),
    ]
    for b in brokers:
        wait_until(lambda b=b: len(b.alive_brokers()) == 3, what="three brokers")
    b0, b1 = brokers[0], brokers[1]
    bootstrap = ",".join(b.bootstrap() for b in brokers)
    # A new log goes to the dir holding the fewest: led, on the healthy disk, followed.
    for topic, replicas, home in (
        ("led", [0, 1, 2], failing),
        ("kept", [0, 1, 2], healthy),
        ("followed", [1, 0, 2], failing),
    ):
        _create(bootstrap, topic, replicas, **{"min.insync.replicas": "2"})
        wait_until(lambda t=topic: b0.replica(t, 0) is not None, what=f"{topic} on broker 0")
        assert (home / f"{topic}-0").is_dir()
    for topic in ("led", "kept", "followed"):
        wait_until(lambda t=topic: len(_isr(b1, t)) == 3, what=f"{topic}: ISR of three")

    with capture_logs() as logs:
        _fill(failing)
        with b0.wire() as client:  # the leader's disk is full: an error, not a close
            part = produce(client, "led", build_batch([Record(key=None, value=VALUE)]))
            assert part.error_code == ErrorCode.kafka_storage_error

        def moved(topic: str, leader: int) -> bool:
            return all(
                (p := b.partitions(topic)[0]).leader == leader
                and 0 not in p.isr
                and p.offline_replicas == (0,)
                for b in brokers
            )

        wait_until(lambda: moved("led", 1), what="led: leader 1, replica 0 offline")
        wait_until(lambda: moved("followed", 1), what="followed: replica 0 offline")
        assert b0.replica("led", 0) is None and b0.replica("followed", 0) is None
        assert not [f for f in b0.replica_fetchers() if f.leader == 1]  # followed: not fetched
        with b0.wire() as client:
            part = produce(client, "led", build_batch([Record(key=None, value=VALUE)]))
            assert part.error_code == ErrorCode.kafka_storage_error
            part = fetch_partition(client, fetch_request("led", 0))
            assert part.error_code == ErrorCode.kafka_storage_error
        assert b0.znode_children("/log_dir_event_notification") == []

        # Broker 0 lives on with its healthy dir; the moved partition takes writes elsewhere.
        assert 0 in b1.alive_brokers()
        kept = b1.partitions("kept")[0]
        assert (kept.leader, len(kept.isr), kept.offline_replicas) == (0, 3, ())
        delivered = Delivered()
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(100):
            for topic in ("led", "kept"):
                producer.produce(topic, b"%s-%d" % (topic.encode(), i), on_delivery=delivered)
        producer.flush(60)
        assert (len(delivered.acked), delivered.errors) == (200, [])
    errors = _errors(logs)
    assert [e["event"] for e in errors] == ["log dir failed: its replicas go offline"], errors
    assert errors[0]["log_dir"] == str(failing)
    assert not [e for e in logs if "exc_info" in e or "exception" in e]
    for topic in ("led", "kept"):
        values = _read_values(b1.bootstrap(), topic, 100)
        assert {v for v in delivered.acked if v.startswith(topic.encode())} <= values
