"""KIP-932 share groups' membership survives its coordinator (issue 29): a confluent-kafka
ShareConsumer keeps reading through a `kplane serve` killed and started again, and through
its coordinator's broker stopping in a ZooKeeper cluster; the group keeps its group epoch,
the member its member id and epoch (it is not fenced and does not join again)."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.share_group_describe.v1.request import ShareGroupDescribeRequest
from kio.schema.share_group_heartbeat.v1.request import ShareGroupHeartbeatRequest
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i8, i32

from kplane.protocol.errors import ErrorCode
from kplane.testing.plugin import KafkaCluster, free_port, wait_for_port
from kplane.testing.wire import WireClient

from .helpers import wait_until

PARTITIONS = 2


class ShareMember:
    """A ShareConsumer polling in its own thread (implicit acknowledgement), every value it
    received in ``seen``."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.config = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "logger": logging.getLogger("test-librdkafka-share-restart"),
        }
        self.topic = topic
        self.seen: list[bytes] = []
        self.error: BaseException | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            with ShareConsumer(self.config) as consumer:
                consumer.subscribe([self.topic])
                while not self.stop.is_set():
                    for msg in consumer.poll(0.2) or []:
                        if msg.error() is None:
                            self.seen.append(msg.value() or b"")
        except BaseException as exc:
            self.error = exc

    def leave(self) -> None:
        self.stop.set()
        self.thread.join(30)
        assert self.error is None, repr(self.error)


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(30) == 0


def prepare(bootstrap: str, topic: str, group: str, replicas: int) -> None:
    """The topic, and the group reading from the earliest offset."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, replicas)])[topic].result(30)
    earliest = ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[earliest])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def visit(wire: Callable[[], WireClient], group: str, topic: str) -> None:
    """A member joins and leaves on the wire: the group epoch is 2 before the consumer
    joins, so a group that forgot its epoch and began again is told apart."""
    member_id = str(uuid.uuid4())
    for epoch, topics in ((0, (TopicName(topic),)), (-1, None)):
        with wire() as client:
            answer = client.request(
                ShareGroupHeartbeatRequest(
                    group_id=GroupId(group),
                    member_id=member_id,
                    member_epoch=i32(epoch),
                    subscribed_topic_names=topics,
                )
            )
        assert answer.error_code == ErrorCode.none, answer


def describe(wire: Callable[[], WireClient], group: str) -> Any:
    with wire() as client:
        response = client.request(
            ShareGroupDescribeRequest(
                group_ids=(GroupId(group),), include_authorized_operations=False
            )
        )
    return response.groups[0]


def members(described: Any) -> list[tuple[str, int]]:
    return sorted((m.member_id, m.member_epoch) for m in described.members)


def listed(wire: Callable[[], WireClient]) -> list[tuple[str, str]]:
    with wire() as client:
        response = client.request(ListGroupsRequest(states_filter=(), types_filter=("share",)))
    return [(g.group_id, g.group_type) for g in response.groups]


def stable_with_one_member(wire: Callable[[], WireClient], group: str) -> Any:
    described = describe(wire, group)
    assigned = [m for m in described.members if m.assignment.topic_partitions]
    return described if described.group_state == "Stable" and len(assigned) == 1 else None


def test_the_members_and_epochs_survive_a_kplane_serve_restart(
    broker_process: Any, tmp_path: Path
) -> None:
    topic, group = "sgr-restart", "sgr-restart-group"
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    serve = [f"log.dirs={tmp_path / 'data'}", f"listeners=PLAINTEXT://{bootstrap}"]

    def wire() -> WireClient:
        return WireClient("127.0.0.1", port)

    def start() -> Any:  # on the same port: the running consumer reconnects to it
        process = broker_process(None, *serve, plaintext_port=False)
        wait_for_port("127.0.0.1", port, 60)
        return process

    first = start()
    prepare(bootstrap, topic, group, 1)
    visit(wire, group, topic)
    member = ShareMember(bootstrap, group, topic)
    try:
        produce(bootstrap, topic, [f"a{i}".encode() for i in range(10)])
        wait_until(lambda: len(member.seen) >= 10, 60, "the records before the restart")
        before = wait_until(lambda: stable_with_one_member(wire, group), 30, "one member")
        assert before.group_epoch == 3
        first.kill()  # no clean stop: the group was stored before each heartbeat's answer

        start()
        wait_until(lambda: listed(wire) == [(group, "share")], 60, "the group listed")
        after = describe(wire, group)
        assert (after.error_code, after.group_epoch) == (ErrorCode.none, before.group_epoch)
        assert members(after) == members(before)
        later = [f"b{i}".encode() for i in range(10)]
        produce(bootstrap, topic, later)
        wait_until(lambda: set(later) <= set(member.seen), 90, "the records after the restart")
        resumed = describe(wire, group)
        assert resumed.group_epoch == before.group_epoch, "the member joined again"
        assert members(resumed) == members(before)
    finally:
        member.leave()


def test_the_share_group_goes_on_at_another_broker_when_its_coordinator_stops(
    kafka_cluster: Callable[..., KafkaCluster],
) -> None:
    cluster = kafka_cluster(2)
    topic, group = "sgr-moved", "sgr-moved-group"
    bootstrap = cluster.bootstrap_servers
    prepare(bootstrap, topic, group, 2)
    for broker in cluster.brokers:
        broker.wait_for_partitions(topic, PARTITIONS)
    with cluster.brokers[0].wire() as client:
        found = client.request(FindCoordinatorRequest(key_type=i8(0), coordinator_keys=(group,)))
    coordinator = cluster.broker(int(found.coordinators[0].node_id))
    survivor = next(b for b in cluster.brokers if b is not coordinator)
    visit(coordinator.wire, group, topic)
    member = ShareMember(bootstrap, group, topic)
    try:
        produce(bootstrap, topic, [f"a{i}".encode() for i in range(10)])
        wait_until(lambda: len(member.seen) >= 10, 60, "the records before the move")
        before = wait_until(
            lambda: stable_with_one_member(coordinator.wire, group), 30, "one member"
        )
        assert before.group_epoch == 3
        coordinator.stop()
        wait_until(
            lambda: all(
                p.leader == survivor.broker_id and list(p.isr) == [survivor.broker_id]
                for p in survivor.partitions(topic).values()
            ),
            60,
            "the survivor leading every partition, alone in its ISR (acks=all next)",
        )
        later = [f"b{i}".encode() for i in range(10)]
        produce(survivor.bootstrap(), topic, later)
        wait_until(lambda: set(later) <= set(member.seen), 90, "the records after the move")
        after = describe(survivor.wire, group)
        assert (after.error_code, after.group_epoch) == (ErrorCode.none, before.group_epoch)
        assert members(after) == members(before)
    finally:
        member.leave()
