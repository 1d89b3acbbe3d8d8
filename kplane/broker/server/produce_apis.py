"""Produce, and the producer ids InitProducerId hands out."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from kplane.broker.log.partition import TopicPartition
from kplane.broker.metadata.cache import MetadataCache
from kplane.broker.server.context import Handler, RequestContext
from kplane.broker.server.replica_manager import AppendResult, ReplicaManager
from kplane.broker.utils.purgatory import DelayedOperation, DelayedOperationPurgatory
from kplane.common.acl import AclOperation, AclResourceType
from kplane.protocol.errors import ErrorCode

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
        results: list[tuple[Any, list[tuple[int, TopicPartition | None, AppendResult]]]],
        waiting: dict[TopicPartition, int],
        timeout_ms: float,
    ) -> None:
        super().__init__(max(timeout_ms, 0.0))
        self.apis = apis
        self.ctx = ctx
        self.results = results
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
        for _key, partitions in self.results:
            for _index, tp, result in partitions:
                if tp in self.waiting:
                    error = self.outcome.get(tp, ErrorCode.request_timed_out)
                    if error is not ErrorCode.none:
                        result.error = error
                        result.message = None
        try:
            self.apis._respond(self.ctx, self.results)
        except Exception as exc:  # on a fetch handler's or the timer's thread: answer
            self.ctx.fail(exc)


class ProduceApis:
    """Produce (acks 0, 1, all; idempotent sequences; transactional batches)."""

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
        req = ctx.body
        acks = int(req.acks)
        by_id = ctx.api_version >= 13
        # (topic key, [(partition index, its TopicPartition or None, result)])
        results: list[tuple[Any, list[tuple[int, TopicPartition | None, AppendResult]]]] = []
        # A transactional producer needs Write on its transactional id (KIP-98).
        txn_denied = req.transactional_id is not None and not ctx.authorized(
            AclOperation.WRITE, AclResourceType.TRANSACTIONAL_ID, req.transactional_id
        )
        for topic in req.topic_data:
            key = topic.topic_id if by_id else topic.name
            name = self.cache.topic_name(topic.topic_id) if by_id else topic.name
            writable = name is not None and ctx.authorized(
                AclOperation.WRITE, AclResourceType.TOPIC, name
            )
            partitions: list[tuple[int, TopicPartition | None, AppendResult]] = []
            for pd in topic.partition_data:
                tp = TopicPartition(name, pd.index) if name is not None else None
                if acks not in (0, 1, -1):
                    result = AppendResult(
                        ErrorCode.invalid_required_acks, f"acks={acks} is not 0, 1 or -1"
                    )
                elif txn_denied:
                    result = AppendResult(ErrorCode.transactional_id_authorization_failed, None)
                elif tp is None:
                    result = AppendResult(ErrorCode.unknown_topic_id, "unknown topic id")
                elif not writable:
                    result = AppendResult(ErrorCode.topic_authorization_failed, None)
                else:
                    result = self.replica_manager.append(tp, pd.records, acks, ctx.api_version)
                partitions.append((pd.index, tp, result))
            results.append((key, partitions))
        if acks == 0:
            # Kafka closes the connection so an acks=0 producer notices a failed write.
            if any(r.error is not ErrorCode.none for _, ps in results for _, _, r in ps):
                log.info(
                    "closing acks=0 connection after a failed produce",
                    connection=ctx.request.connection_id,
                )
                ctx.close_connection()
            else:
                ctx.respond_nothing()
            return
        waiting = {
            tp: result.info.last_offset + 1
            for _, ps in results
            for _, tp, result in ps
            if acks == -1 and tp is not None and result.info is not None
        }
        if not waiting or self.produce_purgatory is None:
            self._respond(ctx, results)
            return
        delayed = DelayedProduce(self, ctx, results, waiting, req.timeout.total_seconds() * 1000.0)
        self.produce_purgatory.try_complete_else_watch(delayed, list(waiting))

    def _respond(
        self,
        ctx: RequestContext,
        results: list[tuple[Any, list[tuple[int, TopicPartition | None, AppendResult]]]],
    ) -> None:
        by_id = ctx.api_version >= 13
        topics_out = []
        for key, partitions in results:
            partitions_out = []
            for index, _tp, result in partitions:
                info = result.info
                partitions_out.append(
                    ctx.make(
                        "PartitionProduceResponse",
                        index=index,
                        error_code=result.error,
                        error_message=result.message,
                        base_offset=info.first_offset if info else -1,
                        log_append_time=_ms_to_datetime(info.log_append_time_ms) if info else None,
                        log_start_offset=info.log_start_offset if info else -1,
                        record_errors=self._record_errors(ctx, result),
                    )
                )
            topics_out.append(
                ctx.make(
                    "TopicProduceResponse",
                    name=None if by_id else key,
                    topic_id=key if by_id else None,
                    partition_responses=tuple(partitions_out),
                )
            )
        ctx.respond(ctx.make_response(responses=tuple(topics_out), node_endpoints=()))

    @staticmethod
    def _record_errors(ctx: RequestContext, result: AppendResult) -> tuple[Any, ...]:
        """The refused records of a partition, for Produce v8+ (older versions lack them)."""
        if ctx.api_version < RECORD_ERRORS_SINCE_VERSION:
            return ()
        return tuple(
            ctx.make(
                "BatchIndexAndErrorMessage", batch_index=index, batch_index_error_message=message
            )
            for index, message in result.record_errors
        )


def _ms_to_datetime(ms: int) -> datetime.datetime | None:
    if ms < 0:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000.0, tz=datetime.UTC)
