"""Controller failover on a real ZooKeeper: the broker elected controller next takes the
replicas of brokers that died while nobody was controller out of the ISR at once, as
Kafka's replica state machine does at failover, so acks=all producers of partitions whose
leader lives do not wait for the follower lag timeout. The controller is killed (kill -9:
no controlled shutdown takes its replicas out first); its ZooKeeper session expires, and
with it both its registration and its controllership, so the next controller never sees
it leave."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from kplane.testing.plugin import BrokerProcess

from .helpers import wait_until

TOPIC = "failover-isr"
SESSION_TIMEOUT_MS = 6000
LAG_TIMEOUT_MS = 120_000  # far beyond the wait below: the leader's own ISR shrink is not it


def _controller_id(zk: KazooClient) -> int | None:
    """The broker ``/controller`` names, None while there is none (an election)."""
    try:
        return int(json.loads(zk.get("/controller")[0])["brokerid"])
    except NoNodeError:
        return None


def _state(zk: KazooClient) -> dict[str, Any]:
    return json.loads(zk.get(f"/brokers/topics/{TOPIC}/partitions/0/state")[0])


def test_the_next_controller_takes_a_dead_controllers_replicas_out_of_the_isr(
    broker_process: Callable[..., BrokerProcess], zookeeper: str
) -> None:
    common = (
        f"zookeeper.connect={zookeeper}",
        f"zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}",
        "zookeeper.connection.timeout.ms=15000",
        "replica.fetch.wait.max.ms=100",
        "replica.fetch.backoff.ms=100",
        f"replica.lag.time.max.ms={LAG_TIMEOUT_MS}",
    )
    controller = broker_process(None, "broker.id=0", *common)
    wait_until(
        lambda: "controller elected" in controller.log_text(), 30, "broker 0 to be controller"
    )
    survivor = broker_process(None, "broker.id=1", *common)
    zk = KazooClient(hosts=zookeeper)
    zk.start(timeout=15)
    try:
        wait_until(lambda: len(zk.get_children("/brokers/ids")) == 2, 30, "both brokers registered")
        admin = AdminClient({"bootstrap.servers": survivor.bootstrap_servers})
        # the survivor leads, the controller follows
        admin.create_topics([NewTopic(TOPIC, num_partitions=1, replica_assignment=[[1, 0]])])[
            TOPIC
        ].result(30)
        wait_until(
            lambda: (
                zk.exists(f"/brokers/topics/{TOPIC}/partitions/0/state")
                and _state(zk)["leader"] == 1
                and sorted(_state(zk)["isr"]) == [0, 1]
            ),
            30,
            "broker 1 to lead with broker 0 in the ISR",
        )

        controller.process.send_signal(signal.SIGKILL)
        controller.process.wait(10)

        wait_until(lambda: _controller_id(zk) == 1, 30, "broker 1 to be controller")
        wait_until(lambda: _state(zk)["isr"] == [1], 20, "the dead controller out of the ISR")
    finally:
        zk.stop()
        zk.close()
    producer = Producer({"bootstrap.servers": survivor.bootstrap_servers, "acks": "all"})
    for i in range(10):
        producer.produce(TOPIC, value=str(i).encode())
    assert producer.flush(30) == 0
