"""Fault injection on a real broker (librdkafka mock cluster's faults), seen by real clients."""

from __future__ import annotations

import socket
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from kio.schema.list_offsets.v7.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.types import TopicName
from kio.static.primitive import i8, i32, i64

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.records import build_batch
from testing.plugin import RunningBroker

from .helpers import produce, recs


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
