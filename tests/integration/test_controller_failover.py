"""Controller failover on a real ZooKeeper: the broker elected controller next takes the
replicas of brokers that died while nobody was controller out of the ISR at once, as
Kafka's replica state machine does at failover, so acks=all producers of partitions whose
leader lives do not wait for the follower lag timeout."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kplane.testing.plugin import KafkaCluster

LAG_TIMEOUT_MS = 120_000  # far beyond the wait below: the leader's own ISR shrink is not it


def test_the_next_controller_takes_a_dead_controllers_replicas_out_of_the_isr(
    kafka_cluster: Callable[..., KafkaCluster],
) -> None:
    cluster = kafka_cluster(2, replica_lag_time_max_ms=str(LAG_TIMEOUT_MS))
    topic = "failover-isr"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 2, 2)])[topic].result(30)
    for broker in cluster.brokers:
        broker.wait_for_partitions(topic, 2)
    controller = next(b for b in cluster.brokers if b.is_controller())
    survivor = next(b for b in cluster.brokers if b is not controller)
    for partition in (0, 1):  # the survivor leads, the controller follows
        cluster.move_leader(topic, partition, survivor.broker_id)
    deadline = time.monotonic() + 30
    while not all(len(p.isr) == 2 for p in survivor.partitions(topic).values()):
        assert time.monotonic() < deadline, "the controller's replicas never joined the ISR"
        time.sleep(0.05)

    controller.stop()

    deadline = time.monotonic() + 30
    while not all(
        p.leader == survivor.broker_id and list(p.isr) == [survivor.broker_id]
        for p in survivor.partitions(topic).values()
    ):
        assert time.monotonic() < deadline, (
            f"the dead controller is still in the ISR: {survivor.partitions(topic)}"
        )
        time.sleep(0.05)
    assert survivor.is_controller()
    producer = Producer({"bootstrap.servers": survivor.bootstrap(), "acks": "all"})
    for i in range(10):
        producer.produce(topic, value=str(i).encode(), partition=i % 2)
    assert producer.flush(30) == 0
