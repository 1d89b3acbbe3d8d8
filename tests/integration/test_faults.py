"""Fault injection on a real broker (librdkafka mock cluster's faults), seen by real clients."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.list_offsets.v7.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.types import TopicName
from kio.static.primitive import i8, i32, i64

from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode
from kplane.protocol.records import build_batch
from kplane.testing.plugin import RunningBroker
from tests.repo import REPO_ROOT

from .helpers import command_config, produce, recs, secured_broker_overrides


def _count(broker: RunningBroker, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "count"})
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    consumer.close()
    return high - low


def test_pushed_produce_errors_are_retried_and_every_record_lands_once(
    broker: RunningBroker,
) -> None:
    broker.create_topic("retried")
    broker.push_request_errors(
        "Produce", "NOT_LEADER_OR_FOLLOWER", "REQUEST_TIMED_OUT", "NOT_LEADER_OR_FOLLOWER"
    )
    assert broker.injected_error_count("Produce") == 3
    producer = Producer({
        "bootstrap.servers": broker.bootstrap_servers, "enable.idempotence": True,
        "linger.ms": 0, "retry.backoff.ms": 10,
    })
    errors: list[KafkaError | None] = []
    for i in range(10):
        producer.produce("retried", b"%d" % i, on_delivery=lambda err, _m: errors.append(err))
        producer.flush(30)
    assert errors == [None] * 10
    assert broker.injected_error_count("Produce") == 0
    assert _count(broker, "retried") == 10


def test_an_injected_error_fills_every_partition_of_the_answer(broker: RunningBroker) -> None:
    broker.create_topic("shaped", partitions=2)
    broker.push_request_errors(ApiKey.LIST_OFFSETS, ErrorCode.leader_not_available)
    request = ListOffsetsRequest(
        replica_id=i32(-1),
        isolation_level=i8(0),
        topics=(
            ListOffsetsTopic(
                name=TopicName("shaped"),
                partitions=tuple(
                    ListOffsetsPartition(
                        partition_index=i32(p), current_leader_epoch=i32(-1), timestamp=i64(-1)
                    )
                    for p in (0, 1)
                ),
            ),
        ),
    )
    with broker.wire() as client:
        (topic,) = client.request(request).topics
        assert topic.name == "shaped"
        assert [(p.partition_index, p.error_code) for p in topic.partitions] == [
            (0, ErrorCode.leader_not_available), (1, ErrorCode.leader_not_available)
        ]
        (topic,) = client.request(request).topics  # the next one is served
        assert {p.error_code for p in topic.partitions} == {ErrorCode.none}


def test_rtt_delays_responses_on_its_listener(broker: RunningBroker) -> None:
    broker.create_topic("slow")
    broker.set_rtt(300)
    with broker.wire() as client:
        started = time.monotonic()
        produce(client, "slow", build_batch(recs("a", 1)))
        delayed = time.monotonic() - started
    broker.set_rtt(0)
    assert delayed >= 0.3  # a lower bound the fault sets, not a speed claim


def test_broker_down_and_up_keep_the_ports(broker: RunningBroker) -> None:
    broker.create_topic("flap")
    host, port = broker.address()
    bootstrap = broker.bootstrap_servers
    broker.broker_down()
    try:
        socket.create_connection((host, port), timeout=2).close()
        raise AssertionError("a listener that is down accepted a connection")
    except ConnectionRefusedError:
        pass
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    delivered: list[KafkaError | None] = []
    producer.produce("flap", b"late", on_delivery=lambda err, _m: delivered.append(err))
    producer.poll(0.5)
    assert delivered == []
    broker.broker_up()
    assert broker.address() == (host, port)
    producer.flush(30)
    assert delivered == [None]


def test_drop_connections_closes_open_ones(broker: RunningBroker) -> None:
    broker.create_topic("dropped")
    with broker.wire() as client:
        produce(client, "dropped", build_batch(recs("a", 1)))
        broker.drop_connections()
        assert client.is_closed_by_peer()
    with broker.wire() as client:  # the listener accepts again at once
        produce(client, "dropped", build_batch(recs("b", 1)))
    assert _count(broker, "dropped") == 2


def _faults(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kplane", "faults", "--bootstrap-server", bootstrap, *args],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=60, check=False,
    )


def test_kplane_faults_drives_a_serve_process(broker_process) -> None:  # type: ignore[no-untyped-def]
    served = broker_process("configs/server.properties", "kplane.faults.enable=true",
                            "kplane.log.storage=memory")
    bootstrap = served.bootstrap_servers
    done = _faults(bootstrap, "push-errors", "--api", "Produce", "NOT_LEADER_OR_FOLLOWER",
                   "NOT_LEADER_OR_FOLLOWER")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["produce: 2 error(s) queued", "push-errors: done"]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0,
                         "retry.backoff.ms": 10})
    errors: list[KafkaError | None] = []
    producer.produce("served", b"x", on_delivery=lambda err, _m: errors.append(err))
    producer.flush(30)
    assert errors == [None]
    assert _faults(bootstrap, "describe").stdout == "describe: done\n"
    assert _faults(bootstrap, "down", "--seconds", "1").returncode == 0
    deadline = time.monotonic() + 10
    while "fault injected: listeners down" not in served.log_text():  # just after the answer
        assert time.monotonic() < deadline, "the listeners never went down"
        time.sleep(0.02)
    producer.produce("served", b"y", on_delivery=lambda err, _m: errors.append(err))
    producer.flush(30)
    assert errors == [None, None]
    assert "fault injected: listeners up" in served.log_text()


def test_kplane_faults_is_refused_when_off(broker: RunningBroker) -> None:
    done = _faults(broker.bootstrap_servers, "describe")
    assert done.returncode == 1
    assert done.stderr == (
        "kplane faults: fault injection is off on this broker: start it with "
        "kplane.faults.enable=true\n"
    )


def test_kplane_faults_is_for_super_users_under_an_authorizer(
    broker_factory, tmp_path: Path  # type: ignore[no-untyped-def]
) -> None:
    broker = broker_factory(secured_broker_overrides(**{"kplane.faults.enable": "true"}))
    bootstrap = broker.bootstrap("SASL_PLAINTEXT")
    for user, expected in (("alice", 1), ("admin", 0)):
        config = command_config(tmp_path / f"{user}.properties", user)
        done = _faults(bootstrap, "--command-config", str(config), "rtt", "--ms", "1")
        assert done.returncode == expected, done.stderr
        if user == "alice":
            assert "CLUSTER_AUTHORIZATION_FAILED" in done.stderr.upper()


def test_move_leader_and_move_coordinator_on_a_cluster(kafka_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster = kafka_cluster(brokers=3)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic("moved", 1, 3)])["moved"].result(15)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                         "enable.idempotence": True})
    errors: list[KafkaError | None] = []
    for target in (1, 2, 0):
        deadline = time.monotonic() + 30
        while set(admin.list_topics("moved", timeout=10).topics["moved"].partitions[0].isrs) != {
            0, 1, 2
        }:
            assert time.monotonic() < deadline, "the ISR never held three replicas"
            time.sleep(0.05)
        cluster.move_leader("moved", 0, target)
        (part,) = admin.list_topics("moved", timeout=10).topics["moved"].partitions.values()
        assert part.leader == target
        producer.produce("moved", b"%d" % target, on_delivery=lambda err, _m: errors.append(err))
        producer.flush(30)
    assert errors == [None, None, None]

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "movers",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["moved"])
    first = consumer.poll(20)
    assert first is not None and first.error() is None
    consumer.commit(first, asynchronous=False)
    coordinator = admin.describe_consumer_groups(["movers"])["movers"].result(15).coordinator.id
    elsewhere = next(b for b in (0, 1, 2) if b != coordinator)
    cluster.move_coordinator("movers", elsewhere)
    read = 1
    while read < 3:  # the consumer finds its new coordinator and goes on
        message = consumer.poll(20)
        assert message is not None and message.error() is None
        consumer.commit(message, asynchronous=False)
        read += 1
    fresh = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})  # no cached lookup
    described = fresh.describe_consumer_groups(["movers"])["movers"].result(15)
    consumer.close()
    assert described.coordinator.id == elsewhere
