"""The topics of ``kplane loadtest``: create them, then describe them with Metadata.

The data topic carries the Producers' records; the control topic is what the fake controller's
UpdateMetadata and LeaderAndIsr requests are about (in a cluster scenario: the partitions whose
leaders the real controller moves), so the data topic is never touched by them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from kplane.common.network.connection import BrokerConnection
from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode

DATA_TOPIC = "loadtest-data"
CONTROL_TOPIC = "loadtest-control"
CONTROL_PARTITIONS = 4
READY_TIMEOUT_S = 30.0
GOING_ON = (KafkaError.TOPIC_ALREADY_EXISTS, KafkaError.REQUEST_TIMED_OUT)
"""CreateTopics errors after which the topic is there (or soon will be)."""


class TopicError(Exception):
    """A topic could not be created or described."""


@dataclass(frozen=True)
class PartitionState:
    """One partition as Metadata describes it."""

    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]


@dataclass(frozen=True)
class TopicState:
    """A topic as Metadata describes it: id, partitions, the highest leader epoch; each
    partition's leader and replicas, the brokers' endpoints (of the listener asked) by id and
    the controller's id."""

    topic_id: uuid.UUID
    partitions: tuple[int, ...]
    leader_epoch: int
    states: Mapping[int, PartitionState] = field(default_factory=dict)
    brokers: Mapping[int, tuple[str, int]] = field(default_factory=dict)
    controller_id: int = -1


def create_topics(bootstrap: str, topics: dict[str, int], replication_factor: int = 1) -> None:
    """Create ``topics`` (name -> partitions; existing ones are kept) and wait until every
    partition has a leader. A creation the broker timed out goes on (Kafka's
    REQUEST_TIMED_OUT: the topic exists, its leaders are still being elected), so that is
    waited for too."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = [
        NewTopic(name, num_partitions=n, replication_factor=replication_factor)
        for name, n in topics.items()
    ]
    for name, future in admin.create_topics(new, operation_timeout=10).items():
        try:
            future.result(timeout=READY_TIMEOUT_S)
        except KafkaException as exc:
            if exc.args[0].code() not in GOING_ON:
                raise TopicError(f"cannot create {name}: {exc.args[0].str()}") from None
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not _have_leaders(admin, topics):
        if time.monotonic() > deadline:
            raise TopicError(f"topics {', '.join(topics)} have no leaders after {READY_TIMEOUT_S}s")
        time.sleep(0.1)


def _have_leaders(admin: AdminClient, topics: dict[str, int]) -> bool:
    metadata = admin.list_topics(timeout=10)
    for name in topics:
        topic = metadata.topics.get(name)
        if topic is None or topic.error is not None or not topic.partitions:
            return False
        if any(p.leader < 0 for p in topic.partitions.values()):
            return False
    return True


async def describe_topic(host: str, port: int, topic: str) -> TopicState:
    """``topic`` as the broker at host:port describes it, from a Metadata request."""
    conn = BrokerConnection(host, port, "kplane-loadtest-metadata", int(READY_TIMEOUT_S * 1000))
    try:
        await conn.connect(READY_TIMEOUT_S)
        return await topic_metadata(conn, topic)
    finally:
        conn.close()


async def topic_metadata(conn: BrokerConnection, topic: str) -> TopicState:
    """``topic`` as Metadata on the open ``conn`` describes it; TopicError when the answer
    has an error for it or does not name it."""
    response = await conn.request(
        ApiKey.METADATA, lambda version: _metadata_request(version, topic)
    )
    for t in response.topics:
        if t.name == topic:
            if t.error_code != ErrorCode.none:
                raise TopicError(f"Metadata for {topic}: {t.error_code.name.upper()}")
            states = {
                int(p.partition_index): PartitionState(
                    int(p.leader_id),
                    int(getattr(p, "leader_epoch", 0)),
                    tuple(int(r) for r in p.replica_nodes),
                )
                for p in t.partitions
            }
            topic_id = getattr(t, "topic_id", None) or uuid.UUID(int=0)
            return TopicState(
                topic_id,
                tuple(sorted(states)),
                max((s.leader_epoch for s in states.values()), default=0),
                states,
                {int(b.node_id): (str(b.host), int(b.port)) for b in response.brokers},
                int(getattr(response, "controller_id", -1)),
            )
    raise TopicError(f"Metadata did not describe {topic}")


def _metadata_request(version: int, topic: str) -> Any:
    module = api.request_module(ApiKey.METADATA, version)
    return api.make(
        api.request_class(ApiKey.METADATA, version),
        topics=(api.make(module.MetadataRequestTopic, name=topic),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
