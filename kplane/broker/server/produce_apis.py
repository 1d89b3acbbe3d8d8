"""Produce, and the producer ids InitProducerId hands out."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import structlog

from kplane.broker.log.partition import TopicPartition
from kplane.broker.metadata.cache import MetadataCache
from kplane.broker.server.context import Handler, RequestContext
from kplane.broker.server.replica_manager import AppendResult, ReplicaManager
from kplane.broker.utils.purgatory import DelayedOperation, DelayedOperationPurgatory
from kplane.common.acl import AclOperation, AclResourceType
from kplane.protocol.errors import ErrorCode
from kplane.protocol.produce_codec import (
    TOPIC_ID_SINCE,
    PartitionResult,
    ProduceRequestData,
    TopicResult,
    encode_produce_response,
)

log = structlog.get_logger(__name__)

PRODUCE = 0
RECORD_ERRORS_SINCE_VERSION = 8


class ProducerIdManager:
    """Hands out producer ids from blocks claimed in the metadata store."""

    def __init__(self, claim_block: Callable[[], range]) -> None:
        self._claim_block = claim_block
        self._block: range = range(0)
        self._next = 0
        self._lock = threading.Lock()

    def generate(self) -> int:
        """A producer id no other producer of the cluster got."""
        with self._lock:
            if self._next >= self._block.stop:
                self._block = self._claim_block()
                self._next = self._block.start
            pid = self._next
            self._next += 1
            return pid


class DelayedProduce(DelayedOperation):
    """An acks=all Produce waiting until the ISR has its records (the high watermark
    passed them) or for its ``timeout_ms``: REQUEST_TIMED_OUT then, as Kafka answers."""

    def __init__(
        self,
        apis: ProduceApis,
        ctx: RequestContext,
        produce: list[ProducePartition],
        waiting: dict[TopicPartition, int],
        timeout_ms: float,
    ) -> None:
        super().__init__(max(timeout_ms, 0.0))
        self.apis = apis
        self.ctx = ctx
        self.produce = produce
        self.waiting = waiting
        self.outcome: dict[TopicPartition, ErrorCode] = {}

    def try_complete(self) -> bool:
        for tp, required in self.waiting.items():
            if tp not in self.outcome:
                error = self.apis.replica_manager.replicated(tp, required)
                if error is not None:
                    self.outcome[tp] = error
        if len(self.outcome) == len(self.waiting):
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        for p in self.produce:
            if p.tp in self.waiting:
                error = self.outcome.get(p.tp, ErrorCode.request_timed_out)
                if error is not ErrorCode.none:
                    p.result = AppendResult(error)
        try:
            respond(self.ctx, self.produce)
        except Exception as exc:  # on a fetch handler's or the timer's thread: answer
            self.ctx.fail(exc)


@dataclass(slots=True)
class ProducePartition:
    """One partition of a Produce request on its way through: where it goes (``tp`` None
    for an unknown topic id), its records, and the outcome (set when it was refused
    before the append, or by the append)."""

    key: str | uuid.UUID | None
    """The topic as the request named it: its name, or its id from v13."""
    index: int
    tp: TopicPartition | None
    records: memoryview | None
    records_at: int | None
    """Where ``records`` starts in the request's frame (``records.obj``), if known."""
    result: AppendResult | None = None


class ProduceApis:
    """Produce (acks 0, 1, all; idempotent sequences; transactional batches) in four
    steps: decode (the hand codec, before the handler), validate, append, encode."""

    def __init__(
        self,
        replica_manager: ReplicaManager,
        cache: MetadataCache,
        produce_purgatory: DelayedOperationPurgatory | None = None,
    ) -> None:
        self.replica_manager = replica_manager
        self.cache = cache
        self.produce_purgatory = produce_purgatory

    def handlers(self) -> Mapping[int, Handler]:
        return {PRODUCE: self.handle_produce}

    def handle_produce(self, ctx: RequestContext) -> None:
        request: ProduceRequestData = ctx.body
        produce = self.validate(ctx, request)
        self.append(produce, request.acks, ctx.api_version)
        self.answer(ctx, request, produce)

    def validate(self, ctx: RequestContext, request: ProduceRequestData) -> list[ProducePartition]:
        """Every partition of the request, those that may not be appended already answered
        (acks, the transactional id's and topics' WRITE authorization, unknown topic ids)."""
        acks = request.acks
        by_id = ctx.api_version >= TOPIC_ID_SINCE
        refused: AppendResult | None = None
        if acks not in (0, 1, -1):
            refused = AppendResult(
                ErrorCode.invalid_required_acks, f"acks={acks} is not 0, 1 or -1"
            )
        elif request.transactional_id is not None and not ctx.authorized(
            AclOperation.WRITE, AclResourceType.TRANSACTIONAL_ID, request.transactional_id
        ):  # a transactional producer needs Write on its transactional id (KIP-98)
            refused = AppendResult(ErrorCode.transactional_id_authorization_failed)
        produce: list[ProducePartition] = []
        for topic in request.topic_data:
            key: str | uuid.UUID | None = topic.name
            name = topic.name
            if by_id:  # v13+: the codec read an id, no name
                key = topic_id = cast(uuid.UUID, topic.topic_id)
                name = self.cache.topic_name(topic_id)
            outcome = refused
            if outcome is None:
                if name is None:
                    outcome = AppendResult(ErrorCode.unknown_topic_id, "unknown topic id")
                elif not ctx.authorized(AclOperation.WRITE, AclResourceType.TOPIC, name):
                    outcome = AppendResult(ErrorCode.topic_authorization_failed)
            for pd in topic.partition_data:
                tp = TopicPartition(name, pd.index) if name is not None else None
                produce.append(
                    ProducePartition(key, pd.index, tp, pd.records, pd.records_at, outcome)
                )
        return produce

    def append(self, produce: list[ProducePartition], acks: int, version: int) -> None:
        """Append every partition not refused yet, as leader, on one clock reading."""
        now_ms = int(time.time() * 1000)
        append = self.replica_manager.append
        for p in produce:
            if p.result is None and p.tp is not None:
                p.result = append(p.tp, p.records, acks, version, now_ms, p.records_at)

    def answer(
        self, ctx: RequestContext, request: ProduceRequestData, produce: list[ProducePartition]
    ) -> None:
        """Answer now (acks 0 and 1, or nothing to wait for) or once the ISR has the
        records (acks=all, in the produce purgatory)."""
        acks = request.acks
        if acks == 0:
            # Kafka closes the connection so an acks=0 producer notices a failed write.
            if any(cast(AppendResult, p.result).error is not ErrorCode.none for p in produce):
                log.info(
                    "closing acks=0 connection after a failed produce",
                    connection=ctx.request.connection_id,
                )
                ctx.close_connection()
            else:
                ctx.respond_nothing()
            return
        waiting = {
            p.tp: p.result.info.last_offset + 1
            for p in produce
            if acks == -1 and p.tp is not None and p.result is not None and p.result.info
        }
        if not waiting or self.produce_purgatory is None:
            respond(ctx, produce)
            return
        delayed = DelayedProduce(self, ctx, produce, waiting, request.timeout_ms)
        self.produce_purgatory.try_complete_else_watch(delayed, list(waiting))


def respond(ctx: RequestContext, produce: list[ProducePartition]) -> None:
    """Encode the response straight to bytes and send it."""
    version = ctx.api_version
    by_id = version >= TOPIC_ID_SINCE
    errors_wanted = version >= RECORD_ERRORS_SINCE_VERSION
    topics: dict[Any, TopicResult] = {}
    for p in produce:
        topic = topics.get(p.key)
        if topic is None:
            topic = topics[p.key] = TopicResult(
                None if by_id else cast(str, p.key),
                cast(uuid.UUID, p.key) if by_id else None,
            )
        result = cast(AppendResult, p.result)  # every partition has one once appended
        info = result.info
        topic.partitions.append(
            PartitionResult(
                p.index,
                result.error,
                info.first_offset if info else -1,
                info.log_append_time_ms if info else -1,
                info.log_start_offset if info else -1,
                result.message,
                result.record_errors if errors_wanted else (),
            )
        )
    ctx.respond_pieces([encode_produce_response(version, list(topics.values()))])
