"""DeleteTopics then CreateTopics of the same name at once. DeleteTopics is answered once the
topic is gone from the answering broker's metadata (Kafka's DelayedDeleteTopics), so on a
single broker the name is free when the client is told the topic is deleted (it answered
TOPIC_ALREADY_EXISTS in 16 of 20 tries); another broker of a cluster that still has the
topic answers as Kafka does: "Topic 'x' is marked for deletion."."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from kplane.testing.plugin import KafkaCluster, RunningBroker


def test_a_single_broker_frees_the_name_before_it_answers(broker: RunningBroker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    for _ in range(20):
        admin.create_topics([NewTopic("again", 2, 1)])["again"].result(15)
        admin.delete_topics(["again"])["again"].result(15)
        assert "again" not in broker.topics()
    admin.create_topics([NewTopic("again", 2, 1)])["again"].result(15)


def test_another_broker_of_a_cluster_says_marked_for_deletion(
    kafka_cluster: Callable[..., KafkaCluster],
) -> None:
    cluster = kafka_cluster(brokers=2)
    first, second = (
        AdminClient({"bootstrap.servers": b.bootstrap_servers}) for b in cluster.brokers
    )
    refusals = []
    for _ in range(10):
        first.create_topics([NewTopic("again", 1, 2)])["again"].result(15)
        first.delete_topics(["again"])["again"].result(15)
        try:
            second.create_topics([NewTopic("again", 1, 2)])["again"].result(15)
        except KafkaException as exc:
            refusals.append(exc.args[0].str())
            deadline = time.monotonic() + 15
            while "again" in cluster.brokers[1].topics():
                assert time.monotonic() < deadline, "broker 1 kept the deleted topic"
                time.sleep(0.02)
            second.create_topics([NewTopic("again", 1, 2)])["again"].result(15)
        first.delete_topics(["again"])["again"].result(15)
    assert all(r == "Topic 'again' is marked for deletion." for r in refusals), refusals
