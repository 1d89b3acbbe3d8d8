"""Share groups across brokers sharing a real ZooKeeper: the group's coordinator (where
AlterShareGroupOffsets and DeleteShareGroupOffsets run) is one broker, the partition's
leader (where ShareFetch acquires records, holding the share partition in memory) the
other. An alteration moves the group's state epoch on; the leader loads the partition
again and hands out records from exactly the altered offset."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

from kplane.broker.group.placement import coordinator_for
from kplane.testing.plugin import KafkaCluster, RunningBroker

from .helpers import wait_until
from .test_kafka_cli import ok
from .test_share_groups import poll_until, produce_values, set_group_config, share_config

OFFSETS_PARTITIONS = 50  # offsets.topic.num.partitions, Kafka's default
LEADER, COORDINATOR = 0, 1


@pytest.fixture
def pair(kafka_cluster: Callable[..., KafkaCluster]) -> KafkaCluster:
    return kafka_cluster(2)


def _group_on(broker_id: int, prefix: str) -> str:
    """A group id the broker ``broker_id`` coordinates."""
    for i in range(1000):
        group = f"{prefix}-{i}"
        if coordinator_for(group, [LEADER, COORDINATOR], OFFSETS_PARTITIONS) == broker_id:
            return group
    raise AssertionError("no group id maps to the broker")


def _topic_led_by(cluster: KafkaCluster, topic: str, broker_id: int) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[broker_id]])])[
        topic
    ].result(15)

    def led() -> bool:
        found = [b.partitions(topic).get(0) for b in cluster.brokers]
        return all(p is not None and p.leader == broker_id for p in found)

    wait_until(led, 30, f"{topic}-0 led by broker {broker_id}")


def _read(broker: RunningBroker, group: str, topic: str, want: int) -> list[int]:
    """The offsets a new member reads (implicit acknowledgement, sent before it closes),
    and what more comes within a few seconds."""
    with ShareConsumer(share_config(broker, group)) as consumer:
        consumer.subscribe([topic])
        got = poll_until(consumer, want, 60)
        got += poll_until(consumer, 1, 3)
    return sorted(m.offset() for m in got)


def _start_offset(cli: tuple[str, ...], group: str) -> str:
    return str(ok(*cli, "--describe", "--group", group).splitlines()[-1].split()[-2])


def test_reset_offsets_at_the_coordinator_reaches_the_leader(pair: KafkaCluster) -> None:
    topic, group = "sc-alter", _group_on(COORDINATOR, "sc-alter")
    _topic_led_by(pair, topic, LEADER)
    leader = pair.broker(LEADER)
    set_group_config(leader, group, share_auto_offset_reset="earliest")
    produce_values(leader, topic, [f"a{i}".encode() for i in range(10)])
    cli = ("share-groups", "--bootstrap-server", pair.bootstrap_servers)

    assert _read(leader, group, topic, 10) == list(range(10))
    wait_until(lambda: _start_offset(cli, group) == "10", 30, "start offset 10")

    back = ok(*cli, "--reset-offsets", "--group", group, "--topic", topic, "--to-offset", "4",
              "--execute")  # fmt: skip
    assert back.splitlines()[-1].split() == [group, topic, "0", "4"]
    assert _read(leader, group, topic, 6) == [4, 5, 6, 7, 8, 9]
    wait_until(lambda: _start_offset(cli, group) == "10", 30, "start offset 10 again")

    produce_values(leader, topic, [f"b{i}".encode() for i in range(5)])  # 10..14
    ok(*cli, "--reset-offsets", "--group", group, "--topic", topic, "--to-offset", "12",
       "--execute")  # fmt: skip
    assert _read(leader, group, topic, 3) == [12, 13, 14]


def test_delete_offsets_at_the_coordinator_reaches_the_leader(pair: KafkaCluster) -> None:
    topic, group = "sc-delete", _group_on(COORDINATOR, "sc-delete")
    _topic_led_by(pair, topic, LEADER)
    leader = pair.broker(LEADER)
    set_group_config(leader, group, share_auto_offset_reset="earliest")
    produce_values(leader, topic, [f"a{i}".encode() for i in range(6)])
    cli = ("share-groups", "--bootstrap-server", pair.bootstrap_servers)

    assert _read(leader, group, topic, 6) == list(range(6))
    wait_until(lambda: _start_offset(cli, group) == "6", 30, "start offset 6")

    deleted = ok(*cli, "--delete-offsets", "--group", group, "--topic", topic)
    assert deleted.splitlines()[-1].split() == [topic, "Successful"]
    # share.auto.offset.reset (earliest) applies again at the leader
    assert _read(leader, group, topic, 6) == list(range(6))
