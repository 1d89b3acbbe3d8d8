"""Helpers shared by the integration tests: raw-wire records, Produce v9 and Fetch v12, and
confluent-kafka's produce-everything / read-everything loops, and ``kplane serve`` refusing a
bad config."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.static.primitive import i16, i32, i64

from kplane.protocol.errors import ErrorCode
from kplane.protocol.records import Record
from kplane.testing.wire import WireClient
from kplane.tools.serve_process import json_events
from tests.repo import REPO_ROOT


def recs(prefix: str, count: int, size: int = 8) -> list[Record]:
    """``count`` records keyed ``{prefix}{i}``, values padded with ``x`` to ``size`` bytes."""
    return [
        Record(key=f"{prefix}{i}".encode(), value=f"{prefix}{i}:".encode().ljust(size, b"x"))
        for i in range(count)
    ]


def produce_request(
    topic: str, records: bytes, *, partition: int = 0, acks: int = -1
) -> ProduceRequest:
    return ProduceRequest(
        transactional_id=None,
        acks=i16(acks),
        timeout=datetime.timedelta(milliseconds=10_000),
        topic_data=(
            TopicProduceData(
                name=topic,
                partition_data=(PartitionProduceData(index=i32(partition), records=records),),
            ),
        ),
    )


def produce(client: WireClient, topic: str, records: bytes, **kwargs: int) -> Any:
    """Send one Produce; returns the PartitionProduceResponse."""
    response = client.request(produce_request(topic, records, **kwargs))
    (topic_response,) = response.responses
    assert topic_response.name == topic
    (partition_response,) = topic_response.partition_responses
    return partition_response


def fetch_request(
    topic: str,
    offset: int,
    *,
    partition: int = 0,
    max_wait_ms: int = 0,
    min_bytes: int = 0,
    max_bytes: int = 50 * 1024 * 1024,
    partition_max_bytes: int = 1024 * 1024,
) -> FetchRequest:
    return FetchRequest(
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=i32(min_bytes),
        max_bytes=i32(max_bytes),
        topics=(
            FetchTopic(
                topic=topic,
                partitions=(
                    FetchPartition(
                        partition=i32(partition),
                        fetch_offset=i64(offset),
                        partition_max_bytes=i32(partition_max_bytes),
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )


def fetch_partition(client: WireClient, request: FetchRequest) -> Any:
    """Send a one-partition Fetch; returns its FetchablePartitionResponse."""
    response = client.request(request)
    assert response.error_code == ErrorCode.none, response
    (topic,) = response.responses
    (part,) = topic.partitions
    return part


# confluent-kafka ----------------------------------------------------------------------------
def produce_all(
    producer: Producer, topic: str, messages: Iterable[Mapping[str, Any]], partitions: int
) -> dict[int, list[int]]:
    """Produce each message (keyword arguments of ``Producer.produce``), waiting whenever the
    local queue is full; flush and check that every delivery succeeded. Returns the offsets
    delivered to each partition, in delivery order."""
    errors: list[str] = []
    delivered: dict[int, list[int]] = {p: [] for p in range(partitions)}

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            delivered[msg.partition()].append(msg.offset())

    for message in messages:
        while True:
            try:
                producer.produce(topic, on_delivery=on_delivery, **message)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(60) == 0, "records still undelivered after flush"
    assert errors == []
    return delivered


def read_from_beginning(
    bootstrap: str,
    group: str,
    topic: str,
    counts: Mapping[int, int],
    *,
    batch: int,
    timeout: float,
) -> dict[int, list[Message]]:
    """Every message of ``topic``'s partitions ``0..len(counts)-1``, read with assign() from the
    beginning (``group`` only because librdkafka wants one: no subscribe, no commits), until each
    partition reports its end after at least ``counts[p]`` records or ``timeout`` passes."""
    partitions = len(counts)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([CkTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got: dict[int, list[Message]] = {p: [] for p in range(partitions)}
    done: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while len(done) < partitions and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=batch, timeout=1.0):
                err = msg.error()
                p = msg.partition()
                if err is not None:
                    assert err.code() == KafkaError._PARTITION_EOF, str(err)
                    if len(got[p]) >= counts[p]:
                        done.add(p)
                    continue
                got[p].append(msg)
    finally:
        consumer.close()
    return got


def numbered_round_trip(config: Mapping[str, Any], topic: str, count: int) -> list[bytes]:
    """Produce ``b"rt-<i>"`` for i < count with confluent-kafka under ``config`` (security
    settings included), then read partition 0 back from the start: the values read."""
    producer = Producer({**config, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, b"rt-%d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer({**config, "group.id": "round-trip", "enable.auto.commit": False})
    consumer.assign([CkTopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    return got


def kafka_python_round_trip(common: Mapping[str, Any], topic: str, count: int) -> list[bytes]:
    """Produce ``b"kp-<i>"`` for i < count with kafka-python under ``common`` (security
    settings included), then read the topic back from the earliest offset: the values."""
    producer = KafkaProducer(**common)
    for i in range(count):
        producer.send(topic, b"kp-%d" % i)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(
        topic, auto_offset_reset="earliest", consumer_timeout_ms=5000, **common
    )
    values = [m.value for m in consumer]
    consumer.close()
    return values


def with_inter_broker_sasl(overrides: Mapping[str, str]) -> dict[str, str]:
    """``overrides`` plus an INTERNAL SASL_PLAINTEXT listener for inter-broker traffic, on
    which the controller authenticates as the super user ``User:broker`` — with an
    authorizer on, controller requests need ClusterAction, as in Kafka."""
    props = dict(overrides)
    listeners = props.get("listeners", "PLAINTEXT://127.0.0.1:0")
    names = [item.split("://", 1)[0] for item in listeners.split(",")]
    protocol_map = props.get("listener.security.protocol.map", ",".join(f"{n}:{n}" for n in names))
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="broker" password="broker-secret" user_broker="broker-secret";'
    )
    super_users = [u for u in props.get("super.users", "").split(";") if u]
    props.update(
        {
            "listeners": f"{listeners},INTERNAL://127.0.0.1:0",
            "listener.security.protocol.map": f"{protocol_map},INTERNAL:SASL_PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.internal.plain.sasl.jaas.config": jaas,
            "super.users": ";".join([*super_users, "User:broker"]),
        }
    )
    return props


def run_cli(tmp_path: Path, *overrides: str, config: str = "configs/server.properties"
            ) -> subprocess.CompletedProcess[str]:
    """``kplane serve CONFIG`` with ``overrides`` and a log dir under ``tmp_path``, expected
    to stop by itself (a bad config): the finished process."""
    args = [sys.executable, "-m", "kplane", "serve", str(REPO_ROOT / config),
            "--override", f"log.dirs={tmp_path / 'bad'}"]
    for item in overrides:
        args += ["--override", item]
    env = dict(os.environ, KPLANE_LOG_FORMAT="json")
    try:
        return subprocess.run(args, capture_output=True, text=True, env=env, cwd=REPO_ROOT,
                              timeout=30, check=False)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"kplane serve kept running with a bad config: {exc.stderr!r}")


def assert_one_error_line(done: subprocess.CompletedProcess[str], *mentions: str) -> None:
    """It failed with exactly one error line, naming each of ``mentions``, and no traceback."""
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "Traceback" not in output, output
    errors = [e for e in json_events(output) if e.get("level") in ("error", "critical")]
    assert len(errors) == 1, output
    line = json.dumps(errors[0])
    for mention in mentions:
        assert mention in line, f"{mention!r} not in the error line {line}"


PLAIN_USERS_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_admin="admin-secret" user_alice="alice-secret";'
)
"""A SASL/PLAIN listener's users: admin and alice, each with the password ``<user>-secret``."""


def secured_broker_overrides(**extra: str) -> dict[str, str]:
    """One SASL_PLAINTEXT listener with :data:`PLAIN_USERS_JAAS`'s users, an authorizer with
    ``User:admin`` as super user, and the broker's own SASL inter-broker listener."""
    return with_inter_broker_sasl(
        {
            "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_USERS_JAAS,
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:admin",
            **extra,
        }
    )


def command_config(path: Path, user: str) -> Path:
    """A ``--command-config`` file logging in as ``user`` (password ``<user>-secret``) with
    SASL/PLAIN over SASL_PLAINTEXT."""
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        f"sasl.username={user}\nsasl.password={user}-secret\n"
    )
    return path


def wait_until(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    """Poll ``predicate`` every 50 ms until it gives something true, and return that;
    fails the test after ``timeout`` seconds, naming ``what``."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value
