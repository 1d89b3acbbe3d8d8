"""A broker's leader side without sockets, for the hot path's unit tests: broker 0 leading
``t-0`` and ``t-1`` on in-memory logs, with a real ReplicaManager, metadata store (topic
configs), metadata cache and purgatories; requests go in as bytes, as KafkaApis reads them,
and their answers come back as the response frames' pieces."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable
from typing import Any, cast

from kplane.broker.config.endpoint import SecurityProtocol
from kplane.broker.config.kafka_config import KafkaConfig
from kplane.broker.log.log_config import LogConfigs
from kplane.broker.log.log_manager import LogManager
from kplane.broker.log.partition import ReplicaAssignment, TopicPartition
from kplane.broker.metadata.cache import MetadataCache, PartitionInfo, TopicInfo
from kplane.broker.metadata.kafka_store import KafkaMetadataClient
from kplane.broker.metadata.store import EmbeddedMetadataStore
from kplane.broker.network.request_channel import Request, Response
from kplane.broker.server.context import RequestContext
from kplane.broker.server.fetch_apis import FetchApis
from kplane.broker.server.produce_apis import ProduceApis
from kplane.broker.server.replica_manager import ReplicaManager, ReplicaState
from kplane.broker.utils.purgatory import DelayedOperationPurgatory
from kplane.broker.utils.timer import SystemTimer
from kplane.protocol import api
from kplane.protocol.framing import encode_request_frame, parse_request_header
from kplane.protocol.records import Record, build_batch

PRODUCE = 0
TOPIC = "t"


class Answers:
    """The channel a RequestContext answers through: keeps what it was given."""

    throttler = None  # no client quotas

    def __init__(self) -> None:
        self.responses: list[Response] = []

    def send_response(self, response: Response) -> None:
        self.responses.append(response)


class Broker:
    """Broker 0 leading ``t-0`` and ``t-1`` (ISR: itself) on the in-memory log."""

    def __init__(self, **broker_configs: str) -> None:
        self.store = EmbeddedMetadataStore(None)
        self.client = KafkaMetadataClient(self.store)
        self.config = KafkaConfig.from_properties({"broker.id": "0", **broker_configs})
        self.log_configs = LogConfigs(self.client, lambda: self.config)
        self.logs = LogManager()
        self.cache = MetadataCache("cluster", 0)
        self.topic_id = uuid.uuid4()
        partitions = {p: PartitionInfo(p, 0, 0, (0,), (0,)) for p in (0, 1)}
        self.cache.update(topics=[TopicInfo(TOPIC, self.topic_id, partitions)])
        self.timer = SystemTimer("produce-test")
        self.purgatory = DelayedOperationPurgatory("Produce", self.timer)
        self.fetch_purgatory = DelayedOperationPurgatory("Fetch", self.timer)
        self.replicas = ReplicaManager(
            0,
            self.logs,
            self.cache,
            self.fetch_purgatory,
            self.log_configs,
            self.purgatory,
        )
        assignment = ReplicaAssignment(0, 0, 0, (0,), (0,))
        self.replicas.become_leader_or_follower(
            1, [ReplicaState(TopicPartition(TOPIC, p), assignment) for p in (0, 1)]
        )
        self.apis = ProduceApis(self.replicas, self.cache, self.purgatory)
        self.fetch_apis = FetchApis(self.replicas, self.cache, self.fetch_purgatory, 1 << 20)

    def set_topic_config(self, name: str, value: str) -> None:
        self.client.set_entity_config("topics", TOPIC, {name: value})
        self.log_configs.on_config_change(f"topics/{TOPIC}")

    def produce(
        self,
        partitions: dict[int, bytes | None],
        acks: int = 1,
        version: int = 9,
        topic: str = TOPIC,
        answers: Answers | None = None,
    ) -> Response:
        """One Produce request, as bytes, through the handler; its one answer (or, with
        ``answers`` given, none yet: they arrive there)."""
        module = api.request_module(PRODUCE, version)
        by_id = version >= 13
        body = api.make(
            api.request_class(PRODUCE, version),
            acks=acks,
            timeout=datetime.timedelta(seconds=5),
            topic_data=(
                api.make(
                    module.TopicProduceData,
                    name=None if by_id else topic,
                    topic_id=self.topic_id if by_id else None,
                    partition_data=tuple(
                        api.make(module.PartitionProduceData, index=p, records=r)
                        for p, r in partitions.items()
                    ),
                ),
            ),
        )
        return self.handle(self.apis.handle_produce, PRODUCE, version, body, answers)

    def handle(
        self,
        handler: Callable[[RequestContext], None],
        api_key: int,
        version: int,
        body: Any,
        answers: Answers | None = None,
    ) -> Response:
        """``body`` encoded, read back as KafkaApis reads it, and handled; its one answer
        (or, with ``answers`` given, none yet: they arrive there)."""
        frame = encode_request_frame(api_key, version, 7, "test", api.encode(body))[4:]
        header = parse_request_header(frame)
        waiting = answers is not None
        answers = answers or Answers()
        request = Request(
            processor=cast(Any, None),
            connection_id="c",
            listener_name="PLAINTEXT",
            security_protocol=SecurityProtocol.PLAINTEXT,
            principal="User:ANONYMOUS",
            client_host="127.0.0.1",
            client_port=1,
            header=header,
            frame=frame,
        )
        decoded = api.read_request(api_key, version, frame, header.body_offset)
        handler(RequestContext(request, decoded, cast(Any, answers)))
        if waiting:
            assert answers.responses == []
            return cast(Response, None)
        (response,) = answers.responses
        return response

    def close(self) -> None:
        self.timer.shutdown()


def batch(*values: bytes, key: bytes | None = b"k") -> bytes:
    """One record batch of ``values`` (each with ``key``)."""
    return build_batch([Record(key, v) for v in values])


def body_of(response: Response) -> bytes:
    """A response's body: its pieces after the frame prefix and header, joined."""
    assert response.pieces is not None
    _prefix, *body = response.pieces
    return b"".join(bytes(cast(bytes, p)) for p in body)
