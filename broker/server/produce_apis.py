"""Produce, and the producer ids InitProducerId hands out."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from broker.log.partition import TopicPartition
from broker.metadata.cache import MetadataCache
from broker.server.context import Handler, RequestContext
from broker.server.replica_manager import AppendResult, ReplicaManager
from common.acl import AclOperation, AclResourceType
from protocol.errors import ErrorCode

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


class ProduceApis:
    """Produce (acks 0, 1, all; idempotent sequences; transactional batches)."""

    def __init__(self, replica_manager: ReplicaManager, cache: MetadataCache) -> None:
        self.replica_manager = replica_manager
        self.cache = cache

    def handlers(self) -> Mapping[int, Handler]:
        return {PRODUCE: self.handle_produce}

    def handle_produce(self, ctx: RequestContext) -> None:
        req = ctx.body
        acks = int(req.acks)
        by_id = ctx.api_version >= 13
        topics_out: list[Any] = []
        any_error = False
        # A transactional producer needs Write on its transactional id (KIP-98).
        txn_denied = req.transactional_id is not None and not ctx.authorized(
            AclOperation.WRITE, AclResourceType.TRANSACTIONAL_ID, req.transactional_id
        )
        for topic in req.topic_data:
            name = self.cache.topic_name(topic.topic_id) if by_id else topic.name
            writable = name is not None and ctx.authorized(
                AclOperation.WRITE, AclResourceType.TOPIC, name
            )
            partitions_out = []
            for pd in topic.partition_data:
                if acks not in (0, 1, -1):
                    result = AppendResult(
                        ErrorCode.invalid_required_acks, f"acks={acks} is not 0, 1 or -1"
                    )
                elif txn_denied:
                    result = AppendResult(ErrorCode.transactional_id_authorization_failed, None)
                elif name is None:
                    result = AppendResult(ErrorCode.unknown_topic_id, "unknown topic id")
                elif not writable:
                    result = AppendResult(ErrorCode.topic_authorization_failed, None)
                else:
                    result = self.replica_manager.append(
                        TopicPartition(name, pd.index), pd.records, acks, ctx.api_version
                    )
                any_error |= result.error is not ErrorCode.none
                info = result.info
                partitions_out.append(
                    ctx.make(
                        "PartitionProduceResponse",
                        index=pd.index,
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
                    name=topic.name if not by_id else None,
                    topic_id=topic.topic_id if by_id else None,
                    partition_responses=tuple(partitions_out),
                )
            )
        if acks == 0:
            # Kafka closes the connection so an acks=0 producer notices a failed write.
            if any_error:
                log.info(
                    "closing acks=0 connection after a failed produce",
                    connection=ctx.request.connection_id,
                )
                ctx.close_connection()
            else:
                ctx.respond_nothing()
            return
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
