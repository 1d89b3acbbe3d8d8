"""The topics of ``kplane loadtest``: create them, then describe the control topic.

The data topic carries the Producers' records; the control topic is what the fake controller's
UpdateMetadata and LeaderAndIsr requests are about, so the data topic is never touched by them.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from common.network.connection import BrokerConnection
from protocol import api
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

DATA_TOPIC = "loadtest-data"
CONTROL_TOPIC = "loadtest-control"
CONTROL_PARTITIONS = 4
READY_TIMEOUT_S = 30.0


class TopicError(Exception):
    """A topic could not be created or described."""


@dataclass(frozen=True)
class TopicState:
    """A topic as Metadata describes it: id, partitions, the highest leader epoch."""

    topic_id: uuid.UUID
    partitions: tuple[int, ...]
    leader_epoch: int


def create_topics(bootstrap: str, topics: dict[str, int]) -> None:
    """Create ``topics`` (name -> partitions; existing ones are kept) and wait until every
    partition has a leader."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = [NewTopic(name, num_partitions=n, replication_factor=1) for name, n in topics.items()]
    for name, future in admin.create_topics(new, operation_timeout=10).items():
        try:
            future.result(timeout=READY_TIMEOUT_S)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
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
    """The id, partitions and highest leader epoch of ``topic``, from a Metadata request."""
    conn = BrokerConnection(host, port, "kplane-loadtest-metadata", int(READY_TIMEOUT_S * 1000))
    try:
        await conn.connect(READY_TIMEOUT_S)
        response = await conn.request(
            ApiKey.METADATA, lambda version: _metadata_request(version, topic)
        )
    finally:
        conn.close()
    for t in response.topics:
        if t.name == topic:
            if t.error_code != ErrorCode.none:
                raise TopicError(f"Metadata for {topic}: {t.error_code.name.upper()}")
            partitions = tuple(sorted(int(p.partition_index) for p in t.partitions))
            epochs = [int(getattr(p, "leader_epoch", 0)) for p in t.partitions]
            topic_id = getattr(t, "topic_id", None) or uuid.UUID(int=0)
            return TopicState(topic_id, partitions, max(epochs, default=0))
    raise TopicError(f"Metadata did not describe {topic}")


def _metadata_request(version: int, topic: str) -> Any:
    module = api.request_module(ApiKey.METADATA, version)
    return api.make(
        api.request_class(ApiKey.METADATA, version),
        topics=(api.make(module.MetadataRequestTopic, name=topic),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
