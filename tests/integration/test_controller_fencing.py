"""A paused controller is fenced (issue 25, item 1): three ``kplane serve`` brokers on a real
ZooKeeper, the controller leading an RF 3 partition with ``min.insync.replicas=2`` under an
acks=all producer; the controller is stopped (SIGSTOP) for twice the session timeout, so
another broker becomes controller, then resumed. Its writes as the old controller must fail
(the ``/controller_epoch`` version check), it resigns, rejoins as a follower, and the ISR
is whole again, with no acknowledged record lost and no flood of log lines."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from kplane.testing.plugin import BrokerProcess

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("cluster")]

SESSION_TIMEOUT_MS = 6000
TOPIC = "fenced"
RECOVERY_S = 30.0
FENCING_EVENTS = re.compile(r"isr|controller moved|resign|refused|fenc", re.IGNORECASE)
"""The log events about ISR changes and fencing, counted across the brokers."""


def _wait(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value


class AckedProducer:
    """acks=all sends of consecutive numbers in a thread; remembers the acknowledged ones."""

    def __init__(self, bootstrap: str) -> None:
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 60000,
                "retry.backoff.ms": 100,
            }
        )
        self.acked: set[int] = set()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="acked-producer", daemon=True)

    def _delivered(self, error: KafkaError | None, message: Message) -> None:
        if error is None:
            self.acked.add(int(message.value()))
        else:
            self.errors.append(str(error))

    def _run(self) -> None:
        deadline = time.monotonic() + 120  # bounded even if the test never stops it
        sent = 0
        while not self._stop.is_set() and time.monotonic() < deadline and sent < 50_000:
            self._producer.produce(TOPIC, str(sent).encode(), on_delivery=self._delivered)
            sent += 1
            self._producer.poll(0)
            time.sleep(0.005)
        self._producer.flush(70)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(80)


def _read_all(bootstrap: str, expected: set[int]) -> set[int]:
    """Every value in the partition, read from the beginning until ``expected`` is seen
    (or 30 s pass)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([KafkaTopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
    seen: set[int] = set()
    deadline = time.monotonic() + 30
    try:
        while not expected <= seen and time.monotonic() < deadline:
            for message in consumer.consume(1000, timeout=0.5):
                if message.error() is None:
                    seen.add(int(message.value()))
    finally:
        consumer.close()
    return seen


def _events(broker: BrokerProcess) -> list[dict[str, Any]]:
    events = []
    for line in broker.log_text().splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return events


def _knows_every_broker(broker: BrokerProcess) -> bool:
    """Whether the broker's Metadata names all three brokers."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    return len(admin.list_topics(timeout=5).brokers) == 3


def _state(zk: KazooClient) -> dict[str, Any]:
    return json.loads(zk.get(f"/brokers/topics/{TOPIC}/partitions/0/state")[0])


def test_a_paused_controller_is_fenced_and_the_isr_heals(
    broker_process: Callable[..., BrokerProcess], zookeeper: str
) -> None:
    common = (
        f"zookeeper.connect={zookeeper}",
        f"zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}",
        "zookeeper.connection.timeout.ms=15000",
        "default.replication.factor=3",
        "replica.fetch.wait.max.ms=100",
        "replica.fetch.backoff.ms=100",
        "replica.lag.time.max.ms=5000",
    )
    brokers = [broker_process(None, "broker.id=0", *common)]
    _wait(lambda: "controller elected" in brokers[0].log_text(), 30, "broker 0 to be controller")
    brokers += [broker_process(None, f"broker.id={i}", *common) for i in (1, 2)]
    bootstrap = ",".join(b.bootstrap_servers for b in brokers)
    client = KazooClient(hosts=zookeeper)
    client.start(timeout=15)
    try:
        for broker in brokers:
            _wait(lambda b=broker: _knows_every_broker(b), 30, "every broker to know the three")
        assert json.loads(client.get("/controller")[0])["brokerid"] == 0

        admin = AdminClient({"bootstrap.servers": bootstrap})
        futures = admin.create_topics(
            [
                NewTopic(
                    TOPIC,
                    num_partitions=1,
                    replica_assignment=[[0, 1, 2]],
                    config={"min.insync.replicas": "2"},
                )
            ]
        )
        futures[TOPIC].result(30)
        _wait(
            lambda: (
                client.exists(f"/brokers/topics/{TOPIC}/partitions/0/state")
                and (s := _state(client))["leader"] == 0
                and len(s["isr"]) == 3
            ),
            30,
            "broker 0 to lead with the whole ISR",
        )

        producer = AckedProducer(bootstrap)
        producer.start()
        _wait(lambda: len(producer.acked) >= 100, 30, "the producer's first acks")

        os.kill(brokers[0].process.pid, signal.SIGSTOP)
        try:
            time.sleep(2 * SESSION_TIMEOUT_MS / 1000)
        finally:
            os.kill(brokers[0].process.pid, signal.SIGCONT)
        assert json.loads(client.get("/controller")[0])["brokerid"] != 0

        def healed() -> bool:
            state = _state(client)
            epoch = int(client.get("/controller_epoch")[0])
            return len(state["isr"]) == 3 and state["controller_epoch"] == epoch

        _wait(healed, RECOVERY_S, "the whole ISR under the new controller's epoch")
        time.sleep(3)  # more records through the healed partition, and time for any flood
        producer.stop()
        state, epoch = _state(client), int(client.get("/controller_epoch")[0])
    finally:
        client.stop()
        client.close()

    assert len(state["isr"]) == 3, state
    assert state["controller_epoch"] == epoch, (state, epoch)
    assert producer.acked, producer.errors
    lost = producer.acked - _read_all(bootstrap, producer.acked)
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {sorted(lost)[:10]}"

    noisy = [
        (i, e["event"])
        for i, b in enumerate(brokers)
        for e in _events(b)
        if FENCING_EVENTS.search(str(e.get("event", "")))
    ]
    assert len(noisy) < 10, f"{len(noisy)} ISR/fencing lines: {noisy[:20]}"
