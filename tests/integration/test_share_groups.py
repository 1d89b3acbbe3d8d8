"""KIP-932 share groups: membership on the wire (ShareGroupHeartbeat, ShareGroupDescribe,
ListGroups, DeleteGroups), then confluent-kafka's ShareConsumer (librdkafka 2.16) reading
through ShareFetch and ShareAcknowledge. Every wait is on a condition with a deadline."""

from __future__ import annotations

import datetime
import logging
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.describe_share_group_offsets.v1.request import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequestGroup,
)
from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.share_acknowledge.v1.request import (
    AcknowledgementBatch as AcknowledgeBatch,
)
from kio.schema.share_acknowledge.v1.request import (
    AcknowledgePartition,
    AcknowledgeTopic,
    ShareAcknowledgeRequest,
)
from kio.schema.share_fetch.v1.request import (
    AcknowledgementBatch,
    FetchPartition,
    FetchTopic,
    ShareFetchRequest,
)
from kio.schema.share_group_describe.v1.request import ShareGroupDescribeRequest
from kio.schema.share_group_heartbeat.v1.request import ShareGroupHeartbeatRequest
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from kplane.protocol.errors import ErrorCode
from kplane.testing.plugin import RunningBroker
from kplane.testing.wire import WireClient

from .helpers import PLAIN_USERS_JAAS, wait_until, with_inter_broker_sasl
from .test_kafka_cli import kplane, ok


def heartbeat(
    broker: RunningBroker,
    group: str,
    member_id: str,
    epoch: int,
    topics: tuple[str, ...] | None = None,
) -> Any:
    with broker.wire() as wire:
        return wire.request(
            ShareGroupHeartbeatRequest(
                group_id=GroupId(group),
                member_id=member_id,
                member_epoch=i32(epoch),
                subscribed_topic_names=(
                    tuple(TopicName(t) for t in topics) if topics is not None else None
                ),
            )
        )


def describe(broker: RunningBroker, group: str) -> Any:
    with broker.wire() as wire:
        response = wire.request(
            ShareGroupDescribeRequest(
                group_ids=(GroupId(group),), include_authorized_operations=False
            )
        )
    return response.groups[0]


def list_groups(broker: RunningBroker, *types: str) -> dict[str, tuple[str, str]]:
    with broker.wire() as wire:
        response = wire.request(ListGroupsRequest(states_filter=(), types_filter=types))
    return {g.group_id: (g.group_type, g.group_state) for g in response.groups}


def test_members_share_partitions_and_the_group_is_listed_and_deleted(
    broker: RunningBroker,
) -> None:
    broker.create_topic("sg-one", 1)
    group = "sg-membership"
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    joined = heartbeat(broker, group, a, 0, ("sg-one",))
    assert joined.error_code == ErrorCode.none, joined
    assert joined.member_epoch == 1
    (assigned,) = joined.assignment.topic_partitions
    assert tuple(assigned.partitions) == (0,)
    second = heartbeat(broker, group, b, 0, ("sg-one",))
    assert second.error_code == ErrorCode.none
    assert second.member_epoch == 2
    assert tuple(second.assignment.topic_partitions[0].partitions) == (0,), "shared partition"
    described = describe(broker, group)
    assert described.error_code == ErrorCode.none
    assert described.group_state == "Stable"
    assert described.assignor_name == "simple"
    assert {m.member_id for m in described.members} == {a, b}
    assert all(m.assignment.topic_partitions[0].topic_name == "sg-one" for m in described.members)
    assert list_groups(broker, "share")[group] == ("share", "Stable")
    assert group not in list_groups(broker, "consumer")
    with broker.wire() as wire:
        refused = wire.request(DeleteGroupsRequest(groups_names=(GroupId(group),)))
    assert refused.results[0].error_code == ErrorCode.non_empty_group
    fenced = heartbeat(broker, group, a, 7)
    assert fenced.error_code == ErrorCode.fenced_member_epoch
    for member in (a, b):
        left = heartbeat(broker, group, member, -1)
        assert left.error_code == ErrorCode.none and left.member_epoch == -1
    assert describe(broker, group).group_state == "Empty"
    with broker.wire() as wire:
        deleted = wire.request(DeleteGroupsRequest(groups_names=(GroupId(group),)))
    assert deleted.results[0].error_code == ErrorCode.none
    assert describe(broker, group).error_code == ErrorCode.group_id_not_found


def test_a_join_group_leaves_an_empty_share_group_a_share_group(broker: RunningBroker) -> None:
    """Kafka's classicGroupJoin: the id of a share group (here an empty one) answers a
    JoinGroup INCONSISTENT_GROUP_PROTOCOL; the group is not turned into a classic one."""
    topic, group, member = "sg-join", "sg-join-group", str(uuid.uuid4())
    broker.create_topic(topic, 1)
    assert heartbeat(broker, group, member, 0, (topic,)).error_code == ErrorCode.none
    assert heartbeat(broker, group, member, -1).error_code == ErrorCode.none
    assert list_groups(broker)[group] == ("share", "Empty")
    with broker.wire() as wire:
        joined = wire.request(
            JoinGroupRequest(
                group_id=GroupId(group),
                session_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
                rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
                member_id="",
                protocol_type="consumer",
                protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),),
            )
        )
    assert (joined.error_code, joined.member_id) == (ErrorCode.inconsistent_group_protocol, "")
    assert list_groups(broker)[group] == ("share", "Empty")


def test_bad_heartbeats_get_kafkas_errors(broker: RunningBroker) -> None:
    broker.create_topic("sg-bad", 1)
    member = str(uuid.uuid4())
    assert heartbeat(broker, "sg-bad", member, 0).error_code == ErrorCode.invalid_request
    assert heartbeat(broker, "sg-bad", "", 0, ("sg-bad",)).error_code == ErrorCode.invalid_request
    assert (
        heartbeat(broker, "sg-bad-unknown", member, 3, ("sg-bad",)).error_code
        == ErrorCode.group_id_not_found
    )
    assert heartbeat(broker, "sg-bad", member, 0, ("sg-bad",)).error_code == ErrorCode.none
    other = str(uuid.uuid4())
    assert heartbeat(broker, "sg-bad", other, 5, ("sg-bad",)).error_code == (
        ErrorCode.unknown_member_id
    )


def test_share_groups_can_be_turned_off(broker_factory: Any) -> None:
    off = broker_factory({"group.share.enable": "false"})
    with off.wire() as wire:
        versions = wire.request(
            ApiVersionsRequest(client_software_name="t", client_software_version="1")
        )
    keys = {int(k.api_key) for k in versions.api_keys}
    assert 76 not in keys and 77 not in keys


# -- confluent-kafka's ShareConsumer ----------------------------------------------------


def share_config(broker: RunningBroker, group: str, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": broker.bootstrap(),
        "group.id": group,
        "logger": logging.getLogger("test-librdkafka-share"),
        **extra,
    }


def produce_values(
    broker: RunningBroker, topic: str, values: list[bytes], partition: int | None = None
) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap(), "linger.ms": 5})
    for value in values:
        if partition is None:
            producer.produce(topic, value=value)
        else:
            producer.produce(topic, value=value, partition=partition)
    assert producer.flush(30) == 0


def set_group_config(broker: RunningBroker, group: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap()})
    resource = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
            for k, v in configs.items()
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def poll_until(
    consumer: ShareConsumer, want: int, timeout: float = 60.0, on_message: Any = None
) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for msg in consumer.poll(0.5) or []:
            assert msg.error() is None, msg.error()
            got.append(msg)
            if on_message is not None:
                on_message(msg)
    return got


def test_two_share_consumers_read_every_record_once_between_them(broker: RunningBroker) -> None:
    topic, group = "sg-two", "sg-two-group"
    broker.create_topic(topic, 2)
    set_group_config(broker, group, share_auto_offset_reset="earliest")
    values = [f"v{i}".encode() for i in range(2000)]
    seen: dict[int, list[bytes]] = {0: [], 1: []}
    stop = threading.Event()
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            with ShareConsumer(share_config(broker, group, **{"client.id": f"c{index}"})) as c:
                c.subscribe([topic])
                while not stop.is_set():
                    for msg in c.poll(0.2) or []:
                        assert msg.error() is None, msg.error()
                        seen[index].append(msg.value() or b"")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    try:
        wait_until(
            lambda: (
                sum(bool(m.assignment.topic_partitions) for m in describe(broker, group).members)
                == 2
            ),
            60,
            "both members assigned",
        )
        for chunk in range(0, 2000, 200):  # in steps: a member's fetch may still name the
            produce_values(broker, topic, values[chunk : chunk + 200])  # partitions of its
            time.sleep(0.2)  # assignment before the second member joined
        wait_until(lambda: len(seen[0]) + len(seen[1]) >= 2000 or errors, 90, "2000 records")
        time.sleep(1.0)  # nothing more should come
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not errors, errors
    both = seen[0] + seen[1]
    assert sorted(both) == sorted(values), "every record exactly once"
    assert seen[0] and seen[1], "both consumers received records"


def test_explicit_release_is_delivered_again_and_reject_never(broker: RunningBroker) -> None:
    topic, group = "sg-explicit", "sg-explicit-group"
    broker.create_topic(topic, 1)
    set_group_config(broker, group, share_auto_offset_reset="earliest")
    produce_values(broker, topic, [f"r{i}".encode() for i in range(10)])
    config = share_config(broker, group, **{"share.acknowledgement.mode": "explicit"})
    deliveries: list[tuple[bytes, int]] = []
    with ShareConsumer(config) as consumer:
        consumer.subscribe([topic])
        first = poll_until(consumer, 10)
        assert sorted(m.value() for m in first) == sorted(f"r{i}".encode() for i in range(10))
        for msg in first:
            value = msg.value()
            kind = (
                AcknowledgeType.RELEASE
                if value in (b"r1", b"r2")
                else AcknowledgeType.REJECT
                if value == b"r3"
                else AcknowledgeType.ACCEPT
            )
            consumer.acknowledge(msg, kind)
        consumer.commit_sync()
        again = poll_until(consumer, 2, 30)
        for msg in again:
            deliveries.append((msg.value(), msg.offset()))
            consumer.acknowledge(msg, AcknowledgeType.ACCEPT)
        consumer.commit_sync()
        assert sorted(v for v, _ in deliveries) == [b"r1", b"r2"]
        assert poll_until(consumer, 1, 3) == [], "a rejected or accepted record came back"


def test_records_of_a_consumer_closed_without_acknowledging_go_to_another(
    broker: RunningBroker,
) -> None:
    topic, group = "sg-close", "sg-close-group"
    broker.create_topic(topic, 1)
    set_group_config(broker, group, share_auto_offset_reset="earliest")
    values = [f"c{i}".encode() for i in range(20)]
    produce_values(broker, topic, values)
    explicit = {"share.acknowledgement.mode": "explicit"}
    first = ShareConsumer(share_config(broker, group, **explicit))
    first.subscribe([topic])
    held = poll_until(first, 20)
    assert len(held) == 20
    first.close()  # nothing acknowledged: the records go back to the group
    with ShareConsumer(share_config(broker, group)) as second:
        second.subscribe([topic])
        got = poll_until(second, 20, 60)
    assert sorted(m.value() for m in got) == sorted(values)


_HOLDER = """
import sys, time
from confluent_kafka import ShareConsumer
bootstrap, group, topic, want = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                          "share.acknowledgement.mode": "explicit"})
consumer.subscribe([topic])
held, deadline = 0, time.monotonic() + 90
while held < want and time.monotonic() < deadline:
    held += len(consumer.poll(0.5) or [])
print("held", held, flush=True)
time.sleep(600)
"""


def test_records_of_a_killed_consumer_go_to_another_when_its_connection_closes(
    broker_factory: Any,
) -> None:
    """A consumer killed (-9) while it holds records without acknowledging them: its
    connection closes, its share session goes and the records are released at once. The
    group's lock duration and session timeout are ten minutes, so only that release can
    explain another member getting them within the test's wait."""
    broker = broker_factory(
        {
            "group.share.max.record.lock.duration.ms": "3600000",
            "group.share.max.session.timeout.ms": "3600000",
            "group.share.session.timeout.ms": "600000",
        }
    )
    topic, group = "sg-killed", "sg-killed-group"
    broker.create_topic(topic, 1)
    set_group_config(
        broker,
        group,
        share_auto_offset_reset="earliest",
        share_record_lock_duration_ms="600000",
    )
    values = [f"k{i}".encode() for i in range(20)]
    produce_values(broker, topic, values)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, broker.bootstrap(), group, topic, str(len(values))],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().split() == ["held", str(len(values))]
        holder.kill()
        holder.wait(30)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(30)
    with ShareConsumer(share_config(broker, group)) as second:
        second.subscribe([topic])
        got = poll_until(second, len(values), 60)
    assert sorted(m.value() for m in got) == sorted(values)


def test_a_new_group_reads_only_records_produced_after_it_joined(broker: RunningBroker) -> None:
    topic, group = "sg-latest", "sg-latest-group"
    broker.create_topic(topic, 1)
    produce_values(broker, topic, [b"before"] * 5)
    with ShareConsumer(share_config(broker, group)) as consumer:
        consumer.subscribe([topic])
        assert poll_until(consumer, 1, 5) == []  # joined, its share partition initialized
        produce_values(broker, topic, [b"after"] * 3)
        got = poll_until(consumer, 3)
    assert [m.value() for m in got] == [b"after"] * 3


def test_a_record_released_past_the_delivery_limit_is_archived(broker_factory: Any) -> None:
    broker = broker_factory({"group.share.delivery.count.limit": "2"})
    topic, group = "sg-limit", "sg-limit-group"
    broker.create_topic(topic, 1)
    set_group_config(broker, group, share_auto_offset_reset="earliest")
    produce_values(broker, topic, [b"poison", b"fine"])
    config = share_config(broker, group, **{"share.acknowledgement.mode": "explicit"})
    poison_deliveries = 0
    fine = 0
    with ShareConsumer(config) as consumer:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for msg in consumer.poll(0.5) or []:
                if msg.value() == b"poison":
                    poison_deliveries += 1
                    consumer.acknowledge(msg, AcknowledgeType.RELEASE)
                else:
                    fine += 1
                    consumer.acknowledge(msg, AcknowledgeType.ACCEPT)
            consumer.commit_sync()
            if poison_deliveries >= 2 and fine:
                break
        assert poll_until(consumer, 1, 4) == [], "archived past the limit"
    assert poison_deliveries == 2
    assert fine == 1


def test_read_committed_skips_aborted_transactions(broker: RunningBroker) -> None:
    topic, group = "sg-txn", "sg-txn-group"
    broker.create_topic(topic, 1)
    set_group_config(
        broker, group, share_auto_offset_reset="earliest", share_isolation_level="read_committed"
    )
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap(), "transactional.id": "sg-txn-producer"}
    )
    producer.init_transactions(30)
    for value, commit in ((b"aborted", False), (b"committed", True)):
        producer.begin_transaction()
        for _ in range(3):
            producer.produce(topic, value=value)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    with ShareConsumer(share_config(broker, group)) as consumer:
        consumer.subscribe([topic])
        got = poll_until(consumer, 3)
        got += poll_until(consumer, 1, 3)
    assert [m.value() for m in got] == [b"committed"] * 3


def test_a_groups_progress_survives_a_kplane_serve_restart(
    broker_process: Any, tmp_path: Path
) -> None:
    topic, group = "sg-restart", "sg-restart-group"
    serve = [f"log.dirs={tmp_path / 'data'}", "num.partitions=1"]
    first = broker_process(None, *serve)
    bootstrap = f"127.0.0.1:{first.port}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)
    values = [f"p{i}".encode() for i in range(10)]
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "share.acknowledgement.mode": "explicit",
    }
    alter = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(
                "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET
            )
        ],
    )
    for future in admin.incremental_alter_configs([alter]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(30) == 0
    consumer = ShareConsumer(config)
    consumer.subscribe([topic])
    got = poll_until(consumer, 10)
    assert len(got) == 10
    for msg in got:
        if msg.offset() < 6:
            consumer.acknowledge(msg, AcknowledgeType.ACCEPT)
    consumer.commit_sync()
    first.kill()  # no clean stop: what was accepted was stored before the answer
    consumer.close()

    again = broker_process(None, *serve)
    config["bootstrap.servers"] = f"127.0.0.1:{again.port}"
    with WireClient("127.0.0.1", again.port) as wire:
        listed = wait_until(
            lambda: (
                wire.request(ListGroupsRequest(states_filter=(), types_filter=("share",))).groups
            ),
            what="the share group listed after the restart",
        )
        # its member, whose leave found no broker, is kept until its session expires
        assert [(g.group_id, g.group_state) for g in listed] == [(group, "Stable")]
        offsets = wire.request(
            DescribeShareGroupOffsetsRequest(
                groups=(
                    DescribeShareGroupOffsetsRequestGroup(group_id=GroupId(group), topics=None),
                )
            )
        )
    (described,) = offsets.groups[0].topics[0].partitions
    assert (described.start_offset, described.lag) == (6, 4)
    with ShareConsumer({**config, "share.acknowledgement.mode": "implicit"}) as second:
        second.subscribe([topic])
        redelivered = poll_until(second, 4, 60)
        redelivered += poll_until(second, 1, 3)
    assert sorted(m.value() for m in redelivered) == values[6:]


# -- admin: kplane share-groups over DescribeShareGroupOffsets, Alter..., Delete... ------


def test_share_groups_cli_lists_describes_resets_and_deletes(broker: RunningBroker) -> None:
    topic, group = "sg-cli", "sg-cli-group"
    broker.create_topic(topic, 1)
    set_group_config(broker, group, share_auto_offset_reset="earliest")
    produce_values(broker, topic, [f"a{i}".encode() for i in range(8)])
    b = ("share-groups", "--bootstrap-server", broker.bootstrap_servers)
    with ShareConsumer(share_config(broker, group, **{"client.id": "cli-member"})) as consumer:
        consumer.subscribe([topic])
        assert len(poll_until(consumer, 8)) == 8
        consumer.poll(0.5)  # the implicit acknowledgement of the 8 goes out
        assert ok(*b, "--list").split() == [group]
        members = ok(*b, "--describe", "--group", group, "--members").splitlines()
        assert members[1].split()[:2] == ["GROUP", "CONSUMER-ID"]
        assert members[2].split()[0] == group and members[2].split()[-1] == f"{topic}:0"
        state = ok(*b, "--describe", "--group", group, "--state").splitlines()
        assert state[2].split()[-2:] == ["Stable", "1"]
        busy = kplane(*b, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
                      "--execute")  # fmt: skip
        assert busy.returncode == 1 and "is not empty" in busy.stderr
    wait_until(lambda: ok(*b, "--describe", "--group", group).splitlines()[-1].split()[-2:]
               == ["8", "0"], 30, "start offset 8, lag 0")  # fmt: skip
    reset = ok(*b, "--reset-offsets", "--group", group, "--topic", topic, "--to-offset", "3",
               "--execute")  # fmt: skip
    assert reset.splitlines()[-1].split() == [group, topic, "0", "3"]
    offsets = ok(*b, "--describe", "--group", group).splitlines()
    assert offsets[-2].split() == ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]
    assert offsets[-1].split() == [group, topic, "0", "3", "5"]
    with ShareConsumer(share_config(broker, group)) as again:
        again.subscribe([topic])
        got = poll_until(again, 5)
        assert sorted(m.offset() for m in got) == [3, 4, 5, 6, 7]
    deleted = ok(*b, "--delete-offsets", "--group", group, "--topic", topic)
    assert deleted.splitlines()[-1].split() == [topic, "Successful"]
    assert ok(*b, "--describe", "--group", group).splitlines()[-1].split()[0] == "GROUP"
    assert ok(*b, "--delete", "--group", group) == (
        f"Deletion of requested share groups ('{group}') was successful.\n"
    )
    assert ok(*b, "--list") == ""
    missing = kplane(*b, "--describe", "--group", group)
    assert missing.returncode == 1 and "does not exist" in missing.stderr


# -- ACLs -------------------------------------------------------------------------------


def share_fetch(
    broker: RunningBroker,
    group: str,
    member: str,
    topic_id: Any,
    epoch: int = 0,
    acks: tuple[tuple[int, int, int], ...] = (),
    partitions: tuple[int, ...] = (0,),
    max_records: int = 100,
    wire: WireClient | None = None,
) -> Any:
    """One ShareFetch of ``partitions`` (``acks``: (first, last, type) batches of the
    first), on ``wire`` (a share session lives as long as the connection that opened it),
    else on a connection of its own."""
    if wire is None:
        with broker.wire("PLAINTEXT") as own:
            return share_fetch(
                broker, group, member, topic_id, epoch, acks, partitions, max_records, own
            )
    return wire.request(
        ShareFetchRequest(
            group_id=GroupId(group),
            member_id=member,
            share_session_epoch=i32(epoch),
            max_wait=i32Timedelta.parse(datetime.timedelta(0)),
            min_bytes=i32(1),
            max_records=i32(max_records),
            batch_size=i32(max_records),
            topics=(
                FetchTopic(
                    topic_id=topic_id,
                    partitions=tuple(
                        FetchPartition(
                            partition_index=i32(index),
                            acknowledgement_batches=tuple(
                                AcknowledgementBatch(
                                    first_offset=i64(f),
                                    last_offset=i64(last),
                                    acknowledge_types=(i8(t),),
                                )
                                for f, last, t in (acks if index == partitions[0] else ())
                            ),
                        )
                        for index in partitions
                    ),
                ),
            ),
            forgotten_topics_data=(),
        )
    )


def test_share_sessions_and_acknowledgements_get_kafkas_errors(broker: RunningBroker) -> None:
    topic, group, member = "sg-session", "sg-session-group", str(uuid.uuid4())
    broker.create_topic(topic, 1)
    set_group_config(broker, group, share_auto_offset_reset="earliest")
    produce_values(broker, topic, [b"x", b"y"], partition=0)
    topic_id = wait_until(lambda: broker.topics().get(topic), what="the topic")
    assert heartbeat(broker, group, member, 0, (topic,)).error_code == ErrorCode.none
    with broker.wire("PLAINTEXT") as wire:
        missing = share_fetch(broker, group, member, topic_id, epoch=1, wire=wire)
        assert missing.error_code == ErrorCode.share_session_not_found
        acks_first = share_fetch(broker, group, member, topic_id, acks=((0, 0, 1),), wire=wire)
        assert acks_first.error_code == ErrorCode.invalid_request
        opened = share_fetch(broker, group, member, topic_id, wire=wire)
        (part,) = opened.responses[0].partitions
        assert [
            (a.first_offset, a.last_offset, a.delivery_count) for a in part.acquired_records
        ] == [(0, 1, 1)]
        stale = share_fetch(broker, group, member, topic_id, epoch=2, wire=wire)
        assert stale.error_code == ErrorCode.invalid_share_session_epoch
        other = share_fetch(broker, group, str(uuid.uuid4()), topic_id, epoch=1, wire=wire)
        assert other.error_code == ErrorCode.share_session_not_found
        # ACCEPT 0, RELEASE 1 on the next fetch: offset 1 comes back at once, delivered twice.
        again = share_fetch(
            broker, group, member, topic_id, epoch=1, acks=((0, 0, 1), (1, 1, 2)), wire=wire
        )
        (part,) = again.responses[0].partitions
        assert part.acknowledge_error_code == ErrorCode.none
        assert [
            (a.first_offset, a.last_offset, a.delivery_count) for a in part.acquired_records
        ] == [(1, 1, 2)]
        twice = share_fetch(broker, group, member, topic_id, epoch=2, acks=((0, 0, 1),), wire=wire)
        (part,) = twice.responses[0].partitions
        assert part.acknowledge_error_code == ErrorCode.invalid_record_state
        closed = share_fetch(
            broker, group, member, topic_id, epoch=-1, acks=((1, 1, 1),), wire=wire
        )
        assert closed.error_code == ErrorCode.none
        assert share_fetch(broker, group, member, topic_id, epoch=-1, wire=wire).error_code == (
            ErrorCode.share_session_not_found
        )
    # A session goes with the connection that opened it (Kafka 4.1).
    with broker.wire("PLAINTEXT") as wire:
        opened = share_fetch(broker, group, member, topic_id, wire=wire)
        assert opened.error_code == ErrorCode.none
    wait_until(
        lambda: (
            share_fetch(broker, group, member, topic_id, epoch=1).error_code
            == ErrorCode.share_session_not_found
        ),
        30,
        "the session gone with its connection",
    )


def test_a_share_fetch_of_the_zero_topic_id_gets_unknown_topic_id(broker: RunningBroker) -> None:
    """The zero UUID (found by bench/fuzz.py) names no topic: answered, not failed."""
    group, member = "sg-zero-id", str(uuid.uuid4())
    answer = share_fetch(broker, group, member, None)
    assert answer.error_code == ErrorCode.none
    ((topic,),) = [answer.responses]
    assert topic.topic_id is None  # the zero UUID, decoded
    assert [p.error_code for p in topic.partitions] == [ErrorCode.unknown_topic_id]


def test_a_share_acknowledge_adds_no_partition_to_the_share_session(
    broker: RunningBroker,
) -> None:
    """As Kafka's acknowledgeSessionUpdate: a ShareAcknowledge checks and moves the
    session's epoch; what it names is not fetched for the member afterwards."""
    topic, group, member = "sg-ack-session", "sg-ack-session-group", str(uuid.uuid4())
    broker.create_topic(topic, 2)
    set_group_config(broker, group, share_auto_offset_reset="earliest")
    for partition in (0, 1):
        produce_values(broker, topic, [b"x", b"y"], partition=partition)
    topic_id = wait_until(lambda: broker.topics().get(topic), what="the topic")
    assert heartbeat(broker, group, member, 0, (topic,)).error_code == ErrorCode.none
    with broker.wire("PLAINTEXT") as wire:
        opened = share_fetch(broker, group, member, topic_id, partitions=(0,), wire=wire)
        assert [p.partition_index for p in opened.responses[0].partitions] == [0]
        acked = wire.request(
            ShareAcknowledgeRequest(
                group_id=GroupId(group),
                member_id=member,
                share_session_epoch=i32(1),
                topics=(
                    AcknowledgeTopic(
                        topic_id=topic_id,
                        partitions=(
                            AcknowledgePartition(
                                partition_index=i32(1),
                                acknowledgement_batches=(
                                    AcknowledgeBatch(
                                        first_offset=i64(0),
                                        last_offset=i64(0),
                                        acknowledge_types=(i8(1),),
                                    ),
                                ),
                            ),
                        ),
                    ),
                ),
            )
        )
        assert acked.error_code == ErrorCode.none
        later = share_fetch(broker, group, member, topic_id, epoch=2, partitions=(0,), wire=wire)
        assert later.error_code == ErrorCode.none
        fetched_from = {
            p.partition_index for t in later.responses for p in t.partitions if p.acquired_records
        }
        assert 1 not in fetched_from, "a partition only acknowledged was fetched"


def test_a_member_the_group_does_not_know_fetches_through_its_share_session(
    broker: RunningBroker,
) -> None:
    """As Kafka (KafkaApis.handleShareFetchRequest, SharePartitionManager.newContext): the
    share-partition leader does not ask the group coordinator about the member; its share
    session is what a ShareFetch must name."""
    topic, group, stranger = "sg-stranger", "sg-stranger-group", str(uuid.uuid4())
    broker.create_topic(topic, 1)
    set_group_config(broker, group, share_auto_offset_reset="earliest")
    produce_values(broker, topic, [b"s"], partition=0)
    topic_id = wait_until(lambda: broker.topics().get(topic), what="the topic")
    with broker.wire("PLAINTEXT") as wire:
        opened = share_fetch(broker, group, stranger, topic_id, wire=wire)
        assert opened.error_code == ErrorCode.none
        (part,) = opened.responses[0].partitions
        assert [(a.first_offset, a.last_offset) for a in part.acquired_records] == [(0, 0)]
        accepted = share_fetch(broker, group, stranger, topic_id, 1, ((0, 0, 1),), wire=wire)
        assert accepted.responses[0].partitions[0].acknowledge_error_code == ErrorCode.none


def test_read_on_the_group_and_the_topic_as_kafka_checks_them(broker_factory: Any) -> None:
    broker = broker_factory(
        with_inter_broker_sasl(
            {
                "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                "sasl.enabled.mechanisms": "PLAIN",
                "sasl.jaas.config": PLAIN_USERS_JAAS,
                "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                "super.users": "User:admin",
            }
        )
    )
    admin = AdminClient(
        {
            "bootstrap.servers": broker.bootstrap("SASL_PLAINTEXT"),
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "admin",
            "sasl.password": "admin-secret",
        }
    )
    topic, group, member = "sg-acl", "sg-acl-group", str(uuid.uuid4())
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)

    def allow(kind: ResourceType, name: str, operation: AclOperation) -> None:
        binding = AclBinding(
            kind, name, ResourcePatternType.LITERAL, "User:ANONYMOUS", "*", operation,
            AclPermissionType.ALLOW,
        )  # fmt: skip
        for future in admin.create_acls([binding]).values():
            future.result(30)

    def joined() -> Any:
        with broker.wire("PLAINTEXT") as wire:
            return wire.request(
                ShareGroupHeartbeatRequest(
                    group_id=GroupId(group),
                    member_id=member,
                    member_epoch=i32(0),
                    subscribed_topic_names=(TopicName(topic),),
                )
            )

    topic_id = wait_until(lambda: broker.topics().get(topic), what="the topic")
    assert joined().error_code == ErrorCode.group_authorization_failed
    assert share_fetch(broker, group, member, topic_id).error_code == (
        ErrorCode.group_authorization_failed
    )
    allow(ResourceType.GROUP, group, AclOperation.READ)
    wait_until(lambda: joined().error_code == ErrorCode.topic_authorization_failed, 10)
    allow(ResourceType.TOPIC, topic, AclOperation.DESCRIBE)
    wait_until(lambda: joined().error_code == ErrorCode.none, 10)
    refused = share_fetch(broker, group, member, topic_id)
    assert refused.error_code == ErrorCode.none
    assert refused.responses[0].partitions[0].error_code == ErrorCode.topic_authorization_failed
    allow(ResourceType.TOPIC, topic, AclOperation.READ)

    def fetched() -> bool:
        answer = share_fetch(broker, group, member, topic_id)
        return answer.responses[0].partitions[0].error_code == ErrorCode.none

    wait_until(fetched, 10, "a fetch allowed by READ on the topic")


def test_acknowledgements_sent_on_close_after_the_leave_are_kept(broker: RunningBroker) -> None:
    """librdkafka's close sends the leaving heartbeat first, then the last acknowledgements
    in the final ShareAcknowledge: they still settle the records."""
    topic, group = "sg-close-acks", "sg-close-acks-group"
    broker.create_topic(topic, 1)
    set_group_config(broker, group, share_auto_offset_reset="earliest")
    produce_values(broker, topic, [f"k{i}".encode() for i in range(10)])
    first = ShareConsumer(share_config(broker, group, **{"share.acknowledgement.mode": "explicit"}))
    first.subscribe([topic])
    got = poll_until(first, 10)
    for msg in got:
        first.acknowledge(msg, AcknowledgeType.ACCEPT)
    first.close()
    with ShareConsumer(share_config(broker, group)) as second:
        second.subscribe([topic])
        assert poll_until(second, 1, 5) == [], "an accepted record was delivered again"


def test_a_leader_move_neither_loses_nor_repeats_accepted_records(kafka_cluster: Any) -> None:
    cluster = kafka_cluster(2)
    topic, group = "sg-move", "sg-move-group"
    first_broker = cluster.brokers[0]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    for future in admin.create_topics([NewTopic(topic, 1, 2)]).values():
        future.result(30)
    for b in cluster.brokers:
        b.wait_for_partitions(topic, 1)
    leader = cluster.brokers[0].partitions(topic)[0].leader
    bootstrap = cluster.bootstrap_servers
    set_group_config(first_broker, group, share_auto_offset_reset="earliest")
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    values = [f"m{i}".encode() for i in range(10)]
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(30) == 0
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "share.acknowledgement.mode": "explicit",
    }
    consumer = ShareConsumer(config)
    consumer.subscribe([topic])
    got = poll_until(consumer, 10)
    assert len(got) == 10
    for msg in got:
        if msg.offset() < 6:
            consumer.acknowledge(msg, AcknowledgeType.ACCEPT)
    consumer.commit_sync()
    consumer.close()  # the other four go back to the group
    wait_until(
        lambda: len(first_broker.partitions(topic)[0].isr) == 2, 30, "the follower in the ISR"
    )
    cluster.move_leader(topic, 0, 1 - leader)
    with ShareConsumer({**config, "share.acknowledgement.mode": "implicit"}) as second:
        second.subscribe([topic])
        rest = poll_until(second, 4, 60)
        rest += poll_until(second, 1, 3)
    assert sorted(m.value() for m in rest) == values[6:]


def test_a_sessions_partitions_take_turns_at_max_records(broker: RunningBroker) -> None:
    topic, group, member = "sg-turns", "sg-turns-group", str(uuid.uuid4())
    broker.create_topic(topic, 2)
    set_group_config(broker, group, share_auto_offset_reset="earliest")
    for partition in (0, 1):
        for _ in range(3):  # three batches each
            produce_values(broker, topic, [b"r"] * 10, partition=partition)
    topic_id = wait_until(lambda: broker.topics().get(topic), what="the topic")
    assert heartbeat(broker, group, member, 0, (topic,)).error_code == ErrorCode.none
    served: set[int] = set()
    with broker.wire("PLAINTEXT") as wire:
        for epoch in (0, 1):
            answer = share_fetch(
                broker, group, member, topic_id, epoch, partitions=(0, 1), max_records=5, wire=wire
            )
            assert answer.error_code == ErrorCode.none
            served |= {
                p.partition_index
                for t in answer.responses
                for p in t.partitions
                if p.acquired_records
            }
    assert served == {0, 1}


def test_a_deleted_topics_share_state_goes_with_it(broker: RunningBroker) -> None:
    topic, group, member = "sg-deleted", "sg-deleted-group", str(uuid.uuid4())
    broker.create_topic(topic, 1)
    set_group_config(broker, group, share_auto_offset_reset="earliest")
    produce_values(broker, topic, [b"a", b"b"], partition=0)
    topic_id = wait_until(lambda: broker.topics().get(topic), what="the topic")
    assert heartbeat(broker, group, member, 0, (topic,)).error_code == ErrorCode.none
    with broker.wire("PLAINTEXT") as wire:
        fetched = share_fetch(broker, group, member, topic_id, wire=wire)
        assert fetched.responses[0].partitions[0].acquired_records
        accepted = share_fetch(broker, group, member, topic_id, 1, ((0, 1, 1),), wire=wire)
        assert accepted.error_code == ErrorCode.none
    node = f"/share_groups/{group}"
    assert broker.znode_children(node) == [topic]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap()})
    for future in admin.delete_topics([topic]).values():
        future.result(30)
    wait_until(lambda: broker.znode_children(node) == [], 30, "the topic's share state gone")
