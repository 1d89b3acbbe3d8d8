"""Fetch (with ``max_wait_ms``/``min_bytes`` through the fetch purgatory), ListOffsets and
DeleteRecords: the requests on partition logs other than Produce.

READ_COMMITTED (``isolation_level`` 1) Fetch reads below the last stable offset and lists
the aborted transactions of what it read; ListOffsets latest answers the LSO for it.

A consumer under a fetch quota reads at most what its quota window allows (``max_bytes``
and ``min_bytes`` capped, Kafka's getMaxValueInQuotaWindow); a fetch the quotas throttle
is answered empty by the response path (``ClientQuotas.throttle_time_ms``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kplane.broker.log.log_dir_failure_channel import KafkaStorageError
from kplane.broker.log.partition import TopicPartition
from kplane.broker.metadata.cache import MetadataCache
from kplane.broker.quota.client_quotas import ClientQuotas
from kplane.broker.server.context import Handler, RequestContext
from kplane.broker.server.replica_manager import (
    FETCH_LOG_END,
    READ_COMMITTED,
    ReadResult,
    ReplicaManager,
    fetchable_end,
)
from kplane.broker.server.replication_quota import ReplicationQuota
from kplane.broker.utils.file_region import Transferable
from kplane.broker.utils.purgatory import DelayedOperation, DelayedOperationPurgatory
from kplane.common.acl import AclOperation, AclResourceType
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode, KafkaError
from kplane.protocol.fetch_codec import (
    FetchPartitionResult,
    FetchRequestData,
    FetchTopicResult,
    encode_fetch_response,
)

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5


@dataclass(slots=True)
class FetchPartitionSpec:
    """One partition of a fetch request, resolved to a name."""

    topic_key: Any  # the topic name, or its id for v13+
    tp: TopicPartition | None  # None: the topic is unknown or may not be read
    offset: int
    max_bytes: int
    partition: int
    error: ErrorCode = ErrorCode.unknown_topic_id
    current_leader_epoch: int = -1  # KIP-320 (Fetch v9+)


class DelayedFetch(DelayedOperation):
    """A fetch waiting for ``min_bytes`` of new data or for ``max_wait_ms``."""

    def __init__(
        self,
        apis: FetchApis,
        ctx: RequestContext,
        specs: list[FetchPartitionSpec],
        delay_ms: float,
        max_bytes: int,
        min_bytes: int,
    ) -> None:
        super().__init__(delay_ms)
        self.apis = apis
        self.ctx = ctx
        self.specs = specs
        self.max_bytes = max_bytes
        self.min_bytes = min_bytes

    def try_complete(self) -> bool:
        available = 0
        min_bytes = self.min_bytes
        isolation_level = _isolation_level(self.ctx)
        for spec in self.specs:
            if spec.tp is None:
                continue
            partition = self.apis.replica_manager.log_manager.get(spec.tp)
            if partition is None or spec.current_leader_epoch not in (-1, partition.leader_epoch):
                return self.force_complete()  # gone, or the epoch moved: answer the error
            limit = (
                partition.log.log_end_offset
                if isolation_level == FETCH_LOG_END
                else partition.high_watermark
            )
            if spec.offset > limit or spec.offset < partition.log.log_start_offset:
                return self.force_complete()
            bound = fetchable_end(partition, isolation_level)
            if spec.offset < bound and not self.apis.held_back(self.ctx, spec.tp):
                try:
                    views = partition.log.read(
                        spec.offset,
                        spec.max_bytes,
                        True,
                        None if isolation_level == FETCH_LOG_END else bound,
                    )
                except KafkaStorageError:  # its log dir failed: answer the error
                    return self.force_complete()
                available += sum(len(v) for v in views)
                if available >= min_bytes:
                    return self.force_complete()
        return False

    def on_complete(self) -> None:
        if self.ctx.request.disconnected:
            self.ctx.respond_nothing()  # nobody reads the answer: read no data for it
            return
        try:
            self.apis.respond(self.ctx, self.apis.read(self.ctx, self.specs, self.max_bytes))
        except Exception as exc:  # on the timer's or a producer's thread: still answer
            self.ctx.fail(exc)


class FetchApis:
    """Fetch from leaders; ListOffsets by timestamp."""

    def __init__(
        self,
        replica_manager: ReplicaManager,
        cache: MetadataCache,
        purgatory: DelayedOperationPurgatory,
        fetch_max_bytes: int,
        quotas: ClientQuotas | None = None,
    ) -> None:
        self.replica_manager = replica_manager
        self.cache = cache
        self.purgatory = purgatory
        self.fetch_max_bytes = fetch_max_bytes
        self._quotas = quotas

    def handlers(self) -> Mapping[int, Handler]:
        return {
            ApiKey.FETCH: self.handle_fetch,
            ApiKey.LIST_OFFSETS: self.handle_list_offsets,
            ApiKey.DELETE_RECORDS: self.handle_delete_records,
        }

    # DeleteRecords ---------------------------------------------------------------------
    def handle_delete_records(self, ctx: RequestContext) -> None:
        """Per partition: the new low watermark, or Kafka's error (DELETE on the topic
        when an authorizer is on)."""
        topics = []
        for topic in ctx.body.topics:
            allowed = ctx.authorized(AclOperation.DELETE, AclResourceType.TOPIC, topic.name)
            results = []
            for p in topic.partitions:
                if not allowed:
                    error, low = ErrorCode.topic_authorization_failed, -1
                else:
                    tp = TopicPartition(topic.name, int(p.partition_index))
                    error, low = self.replica_manager.delete_records(tp, int(p.offset))
                results.append(
                    ctx.make(
                        "DeleteRecordsPartitionResult",
                        partition_index=p.partition_index,
                        low_watermark=low,
                        error_code=error,
                    )
                )
            topics.append(
                ctx.make("DeleteRecordsTopicResult", name=topic.name, partitions=tuple(results))
            )
        ctx.respond(ctx.make_response(topics=tuple(topics)))

    # Fetch ---------------------------------------------------------------------------
    def handle_fetch(self, ctx: RequestContext) -> None:
        """Decoded by :mod:`protocol.fetch_codec`: resolve the partitions, then answer now
        or when ``min_bytes`` arrive or ``max_wait_ms`` passes."""
        req: FetchRequestData = ctx.body
        by_id = ctx.api_version >= 13
        replica_id = req.replica_id
        # A follower's fetch needs ClusterAction; its topics are not checked for Read.
        follower_allowed = replica_id >= 0 and ctx.authorized(
            AclOperation.CLUSTER_ACTION, AclResourceType.CLUSTER
        )
        specs: list[FetchPartitionSpec] = []
        for topic in req.topics:
            key: Any = topic.topic_id if by_id else topic.topic
            name = self.cache.topic_name(topic.topic_id) if topic.topic_id else topic.topic
            readable = name is not None and (
                follower_allowed
                if replica_id >= 0
                else ctx.authorized(AclOperation.READ, AclResourceType.TOPIC, name)
            )
            error = (
                ErrorCode.unknown_topic_id if name is None else ErrorCode.topic_authorization_failed
            )
            for p in topic.partitions:
                tp = TopicPartition(name, p.partition) if readable and name is not None else None
                specs.append(
                    FetchPartitionSpec(
                        key,
                        tp,
                        p.fetch_offset,
                        p.partition_max_bytes,
                        p.partition,
                        error,
                        p.current_leader_epoch,
                    )
                )
        if follower_allowed:
            for spec in specs:
                if spec.tp is not None:
                    self.replica_manager.update_follower_fetch(spec.tp, replica_id, spec.offset)
        max_bytes = min(req.max_bytes, self.fetch_max_bytes)
        quotas = self._quotas
        if replica_id < 0 and quotas is not None and quotas.fetch.enabled:
            window = quotas.max_fetch_bytes(ctx.request)
            if window is not None:  # more would be throttled even after a quiet window
                max_bytes = min(max_bytes, window)
        min_bytes = min(req.min_bytes, max_bytes)
        reads = self.read(ctx, specs, max_bytes)
        # As Kafka's fetchMessages: answered now when it need not wait, when enough was
        # read or when a partition has an error; else parked, and read again when it is done.
        if (
            req.max_wait_ms <= 0
            or not specs
            or sum(result.size for _, result in reads) >= min_bytes
            or any(result.error != ErrorCode.none for _, result in reads)
        ):
            self.respond(ctx, reads)
            return
        delayed = DelayedFetch(self, ctx, specs, req.max_wait_ms, max_bytes, min_bytes)
        if not self.purgatory.try_complete_else_watch(
            delayed, [s.tp for s in specs if s.tp is not None]
        ):
            # The client chooses the wait (up to ~24 days): a closed connection ends it.
            ctx.request.on_disconnect(delayed.force_complete)

    def read(
        self, ctx: RequestContext, specs: list[FetchPartitionSpec], max_bytes: int
    ) -> list[tuple[FetchPartitionSpec, ReadResult]]:
        """Every partition read now, within ``max_bytes`` (the request's, capped): whole
        batches, at least one from the first partition with data; none for a throttled
        follower over the leader's replication rate."""
        req: FetchRequestData = ctx.body
        remaining = max_bytes
        isolation_level = _isolation_level(ctx)
        first_data = True
        replica_id = req.replica_id if isolation_level == FETCH_LOG_END else -1
        reads = []
        for spec in specs:
            if spec.tp is None:
                result = ReadResult(spec.error)
            else:
                quota = self._follower_quota(spec.tp, replica_id)
                held_back = quota is not None and quota.is_quota_exceeded()
                result = self.replica_manager.read(
                    spec.tp,
                    spec.offset,
                    0 if held_back else min(spec.max_bytes, remaining),
                    first_data and not held_back,
                    isolation_level,
                    spec.current_leader_epoch,
                )
                if quota is not None and result.size:
                    quota.record(result.size)
            size = result.size
            if size:
                first_data = False
                remaining = max(0, remaining - size)
            reads.append((spec, result))
        return reads

    def respond(
        self, ctx: RequestContext, reads: list[tuple[FetchPartitionSpec, ReadResult]]
    ) -> None:
        """Answer with what was read; stored batches go out without a copy."""
        by_id = ctx.api_version >= 13
        topics: dict[Any, FetchTopicResult[Transferable]] = {}
        for spec, result in reads:
            topic = topics.get(spec.topic_key)
            if topic is None:
                topic = topics[spec.topic_key] = FetchTopicResult(
                    None if by_id else spec.topic_key, spec.topic_key if by_id else None
                )
            aborted = result.aborted_transactions
            topic.partitions.append(
                FetchPartitionResult(
                    spec.partition,
                    result.error,
                    result.high_watermark,
                    result.last_stable_offset,
                    result.log_start_offset,
                    None
                    if aborted is None
                    else [(txn.producer_id, txn.first_offset) for txn in aborted],
                    records=result.views,
                )
            )
        ctx.respond_pieces(encode_fetch_response(ctx.api_version, list(topics.values())))

    def held_back(self, ctx: RequestContext, tp: TopicPartition) -> bool:
        """Over the leader's rate, a throttled follower's fetch of ``tp`` gets no records
        (KIP-73), and a waiting fetch does not count them."""
        if _isolation_level(ctx) != FETCH_LOG_END:
            return False
        quota = self._follower_quota(tp, ctx.body.replica_id)
        return quota is not None and quota.is_quota_exceeded()

    def _follower_quota(self, tp: TopicPartition, replica_id: int) -> ReplicationQuota | None:
        """The leader's replication quota when ``replica_id`` (-1: a consumer) is a
        throttled follower of ``tp`` (KIP-73), else None."""
        quota = self.replica_manager.leader_quota
        if quota is None or replica_id < 0:
            return None
        return quota if self.replica_manager.throttled_follower(tp, replica_id) else None

    # ListOffsets ---------------------------------------------------------------------
    def handle_list_offsets(self, ctx: RequestContext) -> None:
        topics = []
        for topic in ctx.body.topics:
            parts = []
            describable = ctx.authorized(AclOperation.DESCRIBE, AclResourceType.TOPIC, topic.name)
            isolation_level = _isolation_level(ctx)
            for p in topic.partitions:
                error, offset, timestamp, epoch = (
                    self._offset_for(
                        TopicPartition(topic.name, int(p.partition_index)),
                        int(p.timestamp),
                        isolation_level,
                    )
                    if describable
                    else (ErrorCode.topic_authorization_failed, -1, -1, -1)
                )
                parts.append(
                    ctx.make(
                        "ListOffsetsPartitionResponse",
                        partition_index=p.partition_index,
                        error_code=error,
                        timestamp=timestamp,
                        offset=offset,
                        leader_epoch=epoch,
                    )
                )
            topics.append(
                ctx.make("ListOffsetsTopicResponse", name=topic.name, partitions=tuple(parts))
            )
        ctx.respond(ctx.make_response(topics=tuple(topics)))

    def _offset_for(
        self, tp: TopicPartition, timestamp: int, isolation_level: int
    ) -> tuple[ErrorCode, int, int, int]:
        """(error, offset, timestamp, leader epoch) for one partition. As Kafka's
        fetchOffsetForTimestamp: READ_COMMITTED's latest is the last stable offset, and a
        record found by timestamp at or past it (past the high watermark otherwise) is not
        answered."""
        try:
            partition = self.replica_manager.leader_partition(tp)
        except KafkaError as exc:
            return exc.code, -1, -1, -1
        log_ = partition.log
        epoch = partition.leader_epoch
        fetchable = (
            partition.last_stable_offset
            if isolation_level == READ_COMMITTED
            else partition.high_watermark
        )
        if timestamp == LATEST_TIMESTAMP:
            return ErrorCode.none, fetchable, -1, epoch
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return ErrorCode.none, log_.log_start_offset, -1, epoch
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return ErrorCode.none, log_.log_start_offset - 1, -1, epoch
        try:
            found = (
                log_.max_timestamp()
                if timestamp == MAX_TIMESTAMP
                else log_.offset_for_timestamp(timestamp)
            )
        except KafkaStorageError as exc:
            return exc.code, -1, -1, -1
        if found is None or found[0] >= fetchable:
            return ErrorCode.none, -1, -1, epoch
        return ErrorCode.none, found[0], found[1], epoch


def _isolation_level(ctx: RequestContext) -> int:
    """The request's isolation level (ListOffsets v0 and v1 have none: READ_UNCOMMITTED);
    FETCH_LOG_END for a follower's Fetch."""
    if ctx.api_key == ApiKey.FETCH and ctx.body.replica_id >= 0:
        return FETCH_LOG_END
    return int(getattr(ctx.body, "isolation_level", 0))
