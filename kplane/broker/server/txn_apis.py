"""InitProducerId and the transaction APIs: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
WriteTxnMarkers, DescribeTransactions, ListTransactions, DescribeProducers (KIP-98,
KIP-664)."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from kplane.broker.group.coordinator import GroupCoordinator
from kplane.broker.group.placement import offsets_partition
from kplane.broker.log.partition import TopicPartition
from kplane.broker.metadata.cache import MetadataCache
from kplane.broker.server.context import Handler, RequestContext
from kplane.broker.server.produce_apis import ProducerIdManager
from kplane.broker.server.replica_manager import ReplicaManager
from kplane.broker.transaction.coordinator import TransactionCoordinator, TransactionDescription
from kplane.broker.transaction.marker_channel import TxnMarker
from kplane.broker.transaction.transaction_metadata import TransactionState
from kplane.common.acl import AclOperation, AclResourceType
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode, KafkaError

log = structlog.get_logger(__name__)

GROUP_METADATA_TOPIC = "__consumer_offsets"
BATCHED_ADD_PARTITIONS_VERSION = 4  # AddPartitionsToTxn v4+: the brokers' batched form
_EPOCH = datetime.datetime.fromtimestamp(0, tz=datetime.UTC)

# PRODUCER_FENCED is newer than these versions: their clients know INVALID_PRODUCER_EPOCH.
_PRODUCER_FENCED_SINCE: dict[int, int] = {
    ApiKey.INIT_PRODUCER_ID: 4,
    ApiKey.ADD_PARTITIONS_TO_TXN: 2,
    ApiKey.ADD_OFFSETS_TO_TXN: 2,
    ApiKey.END_TXN: 2,
}


def _for_version(ctx: RequestContext, error: ErrorCode) -> ErrorCode:
    since = _PRODUCER_FENCED_SINCE.get(int(ctx.api_key), 0)
    if error is ErrorCode.producer_fenced and ctx.api_version < since:
        return ErrorCode.invalid_producer_epoch
    return error


def _ms(value: datetime.timedelta | int) -> int:
    if isinstance(value, datetime.timedelta):
        return round(value / datetime.timedelta(milliseconds=1))
    return int(value)


class TxnMarkerWriter:
    """Writes one coordinator's marker at the partitions this broker leads: WriteTxnMarkers'
    work, called by its handler and directly by this broker's own coordinator."""

    def __init__(
        self,
        replica_manager: ReplicaManager,
        groups: GroupCoordinator,
        owns_offsets_partition: Callable[[int], bool],
        offsets_partitions: Callable[[], int],
    ) -> None:
        self.replica_manager = replica_manager
        self.groups = groups
        self.owns_offsets_partition = owns_offsets_partition
        self.offsets_partitions = offsets_partitions

    def __call__(self, marker: TxnMarker) -> dict[TopicPartition, ErrorCode]:
        out: dict[TopicPartition, ErrorCode] = {}
        for tp in marker.partitions:
            if tp.topic == GROUP_METADATA_TOPIC:
                out[tp] = self._complete_offsets(marker, tp.partition)
            else:
                out[tp] = self.replica_manager.write_txn_marker(
                    tp,
                    marker.producer_id,
                    marker.producer_epoch,
                    marker.coordinator_epoch,
                    marker.commit,
                )
        return out

    def _complete_offsets(self, marker: TxnMarker, partition: int) -> ErrorCode:
        if not self.owns_offsets_partition(partition):
            return ErrorCode.not_coordinator
        count = self.offsets_partitions()
        try:
            self.groups.complete_txn(
                marker.producer_id,
                marker.commit,
                lambda group_id: offsets_partition(group_id, count) == partition,
            )
        except Exception as exc:  # the store failed: the coordinator retries the marker
            log.warning("transactional offsets not completed", reason=str(exc))
            return ErrorCode.coordinator_not_available
        return ErrorCode.none


class TxnApis:
    """InitProducerId (idempotent and transactional) and the transaction coordinator's
    APIs; ``owns(transactional_id)`` says whether this broker coordinates an id."""

    def __init__(
        self,
        coordinator: TransactionCoordinator,
        producer_ids: ProducerIdManager,
        cache: MetadataCache,
        owns: Callable[[str], bool],
        write_markers: TxnMarkerWriter,
        offsets_partitions: Callable[[], int],
        replica_manager: ReplicaManager,
    ) -> None:
        self.coordinator = coordinator
        self.replica_manager = replica_manager
        self.producer_ids = producer_ids
        self.cache = cache
        self.owns = owns
        self.write_markers = write_markers
        self.offsets_partitions = offsets_partitions

    def handlers(self) -> Mapping[int, Handler]:
        return {
            ApiKey.INIT_PRODUCER_ID: self.handle_init_producer_id,
            ApiKey.ADD_PARTITIONS_TO_TXN: self.handle_add_partitions_to_txn,
            ApiKey.ADD_OFFSETS_TO_TXN: self.handle_add_offsets_to_txn,
            ApiKey.END_TXN: self.handle_end_txn,
            ApiKey.WRITE_TXN_MARKERS: self.handle_write_txn_markers,
            ApiKey.DESCRIBE_TRANSACTIONS: self.handle_describe_transactions,
            ApiKey.LIST_TRANSACTIONS: self.handle_list_transactions,
            ApiKey.DESCRIBE_PRODUCERS: self.handle_describe_producers,
        }

    def _txn_error(self, ctx: RequestContext, transactional_id: str) -> ErrorCode | None:
        """INVALID_REQUEST for an empty id (as Kafka's coordinator), then
        TRANSACTIONAL_ID_AUTHORIZATION_FAILED without Write on the id, NOT_COORDINATOR when
        another broker coordinates it; None when the request may go on."""
        if not transactional_id:
            log.warning(
                "request refused: empty transactional id",
                api=ctx.api_name,
                connection=ctx.request.connection_id,
            )
            return ErrorCode.invalid_request
        if not ctx.authorized(
            AclOperation.WRITE, AclResourceType.TRANSACTIONAL_ID, transactional_id
        ):
            return ErrorCode.transactional_id_authorization_failed
        if not self.owns(transactional_id):
            return ErrorCode.not_coordinator
        return None

    # InitProducerId ---------------------------------------------------------------------
    def handle_init_producer_id(self, ctx: RequestContext) -> None:
        req = ctx.body
        tid = req.transactional_id
        if tid is None:
            self._init_idempotent(ctx)
            return
        error = self._txn_error(ctx, tid)
        if error is not None:
            ctx.respond(ctx.make_response(error_code=error, producer_id=-1, producer_epoch=-1))
            return
        result = self.coordinator.init_producer_id(
            tid,
            _ms(req.transaction_timeout),
            int(getattr(req, "producer_id", -1)),
            int(getattr(req, "producer_epoch", -1)),
        )
        ctx.respond(
            ctx.make_response(
                error_code=_for_version(ctx, result.error),
                producer_id=result.producer_id,
                producer_epoch=result.producer_epoch,
            )
        )

    def _init_idempotent(self, ctx: RequestContext) -> None:
        if not (
            ctx.authorized(AclOperation.IDEMPOTENT_WRITE, AclResourceType.CLUSTER, log_denied=False)
            or ctx.authorized_any(AclOperation.WRITE, AclResourceType.TOPIC)
        ):
            log.info(
                "idempotent producer refused: no IdempotentWrite or Write", principal=ctx.principal
            )
            ctx.respond(
                ctx.make_response(
                    error_code=ErrorCode.cluster_authorization_failed,
                    producer_id=-1,
                    producer_epoch=-1,
                )
            )
            return
        pid = self.producer_ids.generate()
        ctx.respond(ctx.make_response(error_code=ErrorCode.none, producer_id=pid, producer_epoch=0))

    # AddPartitionsToTxn -------------------------------------------------------------------
    def handle_add_partitions_to_txn(self, ctx: RequestContext) -> None:
        req = ctx.body
        if ctx.api_version >= BATCHED_ADD_PARTITIONS_VERSION:
            self._add_partitions_batched(ctx)
            return
        topics = self._add_partitions(
            ctx,
            req.v3_and_below_transactional_id,
            int(req.v3_and_below_producer_id),
            int(req.v3_and_below_producer_epoch),
            req.v3_and_below_topics,
            verify_only=False,
        )
        ctx.respond(ctx.make_response(results_by_topic_v3_and_below=topics))

    def _add_partitions_batched(self, ctx: RequestContext) -> None:
        """v4+: several transactions at once, from a partition leader verifying (KIP-890);
        ClusterAction on the cluster is required."""
        if not ctx.authorized(AclOperation.CLUSTER_ACTION, AclResourceType.CLUSTER):
            ctx.respond(
                ctx.make_response(
                    error_code=ErrorCode.cluster_authorization_failed, results_by_transaction=()
                )
            )
            return
        results = tuple(
            ctx.make(
                "AddPartitionsToTxnResult",
                transactional_id=txn.transactional_id,
                topic_results=self._add_partitions(
                    ctx,
                    txn.transactional_id,
                    int(txn.producer_id),
                    int(txn.producer_epoch),
                    txn.topics,
                    verify_only=bool(txn.verify_only),
                ),
            )
            for txn in ctx.body.transactions
        )
        ctx.respond(ctx.make_response(error_code=ErrorCode.none, results_by_transaction=results))

    def _add_partitions(
        self,
        ctx: RequestContext,
        tid: str,
        producer_id: int,
        producer_epoch: int,
        topics: Any,
        verify_only: bool,
    ) -> tuple[Any, ...]:
        """Per partition results of one transaction: Kafka's checks (transactional id,
        then each topic's Write and existence; the others OPERATION_NOT_ATTEMPTED), then
        the coordinator's answer on every partition."""
        wanted = [TopicPartition(t.name, int(p)) for t in topics for p in t.partitions]
        errors: dict[TopicPartition, ErrorCode] = {}
        txn_error = self._txn_error(ctx, tid)
        if txn_error is not None:
            errors = dict.fromkeys(wanted, txn_error)
        else:
            for tp in wanted:
                if not ctx.authorized(AclOperation.WRITE, AclResourceType.TOPIC, tp.topic):
                    errors[tp] = ErrorCode.topic_authorization_failed
                elif not self._exists(tp):
                    errors[tp] = ErrorCode.unknown_topic_or_partition
            if errors:
                errors = {tp: errors.get(tp, ErrorCode.operation_not_attempted) for tp in wanted}
            else:
                error = _for_version(
                    ctx,
                    self.coordinator.add_partitions(
                        tid, producer_id, producer_epoch, wanted, verify_only
                    ),
                )
                errors = dict.fromkeys(wanted, error)
        by_topic: dict[str, list[Any]] = {}
        for tp in wanted:
            by_topic.setdefault(tp.topic, []).append(
                ctx.make(
                    "AddPartitionsToTxnPartitionResult",
                    partition_index=tp.partition,
                    partition_error_code=errors[tp],
                )
            )
        return tuple(
            ctx.make("AddPartitionsToTxnTopicResult", name=name, results_by_partition=tuple(ps))
            for name, ps in by_topic.items()
        )

    def _exists(self, tp: TopicPartition) -> bool:
        topic = self.cache.topic(tp.topic)
        return topic is not None and tp.partition in topic.partitions

    # AddOffsetsToTxn / EndTxn ---------------------------------------------------------------
    def handle_add_offsets_to_txn(self, ctx: RequestContext) -> None:
        """The group's ``__consumer_offsets`` partition joins the transaction, so its
        marker completes the offsets TxnOffsetCommit leaves pending."""
        req = ctx.body
        error = self._txn_error(ctx, req.transactional_id)
        if error is None and not ctx.authorized(
            AclOperation.READ, AclResourceType.GROUP, req.group_id
        ):
            error = ErrorCode.group_authorization_failed
        if error is None:
            partition = offsets_partition(req.group_id, self.offsets_partitions())
            error = self.coordinator.add_partitions(
                req.transactional_id,
                int(req.producer_id),
                int(req.producer_epoch),
                [TopicPartition(GROUP_METADATA_TOPIC, partition)],
            )
        ctx.respond(ctx.make_response(error_code=_for_version(ctx, error)))

    def handle_end_txn(self, ctx: RequestContext) -> None:
        req = ctx.body
        error = self._txn_error(ctx, req.transactional_id)
        if error is None:
            error = self.coordinator.end_transaction(
                req.transactional_id,
                int(req.producer_id),
                int(req.producer_epoch),
                bool(req.committed),
            )
        ctx.respond(
            ctx.make_response(
                error_code=_for_version(ctx, error), producer_id=-1, producer_epoch=-1
            )
        )

    # WriteTxnMarkers ------------------------------------------------------------------------
    def handle_write_txn_markers(self, ctx: RequestContext) -> None:
        """A coordinator's markers for partitions this broker leads (ClusterAction)."""
        allowed = ctx.authorized(AclOperation.CLUSTER_ACTION, AclResourceType.CLUSTER)
        results = []
        for m in ctx.body.markers:
            partitions = tuple(
                TopicPartition(t.name, int(p)) for t in m.topics for p in t.partition_indexes
            )
            if allowed:
                errors = self.write_markers(
                    TxnMarker(
                        int(m.producer_id),
                        int(m.producer_epoch),
                        int(m.coordinator_epoch),
                        bool(m.transaction_result),
                        partitions,
                    )
                )
            else:
                errors = dict.fromkeys(partitions, ErrorCode.cluster_authorization_failed)
            by_topic: dict[str, list[Any]] = {}
            for tp in partitions:
                by_topic.setdefault(tp.topic, []).append(
                    ctx.make(
                        "WritableTxnMarkerPartitionResult",
                        partition_index=tp.partition,
                        error_code=errors.get(tp, ErrorCode.unknown_server_error),
                    )
                )
            results.append(
                ctx.make(
                    "WritableTxnMarkerResult",
                    producer_id=m.producer_id,
                    topics=tuple(
                        ctx.make("WritableTxnMarkerTopicResult", name=name, partitions=tuple(ps))
                        for name, ps in by_topic.items()
                    ),
                )
            )
        ctx.respond(ctx.make_response(markers=tuple(results)))

    # DescribeTransactions / ListTransactions ---------------------------------------------
    def handle_describe_transactions(self, ctx: RequestContext) -> None:
        states = []
        for tid in ctx.body.transactional_ids:
            error = ErrorCode.none
            description: TransactionDescription | None = None
            if not ctx.authorized(AclOperation.DESCRIBE, AclResourceType.TRANSACTIONAL_ID, tid):
                error = ErrorCode.transactional_id_authorization_failed
            elif not self.owns(tid):
                error = ErrorCode.not_coordinator
            else:
                try:
                    description = self.coordinator.describe(tid)
                except KafkaError as exc:
                    error = exc.code
            states.append(self._transaction_state(ctx, tid, error, description))
        ctx.respond(ctx.make_response(transaction_states=tuple(states)))

    @staticmethod
    def _transaction_state(
        ctx: RequestContext,
        tid: str,
        error: ErrorCode,
        d: TransactionDescription | None,
    ) -> Any:
        topics: dict[str, list[int]] = {}
        if d is not None:
            for tp in d.partitions:
                if ctx.authorized(
                    AclOperation.DESCRIBE, AclResourceType.TOPIC, tp.topic, log_denied=False
                ):
                    topics.setdefault(tp.topic, []).append(tp.partition)
        start = (
            datetime.datetime.fromtimestamp(d.start_timestamp_ms / 1000, tz=datetime.UTC)
            if d is not None and d.start_timestamp_ms >= 0
            else _EPOCH
        )
        return ctx.make(
            "TransactionState",
            error_code=error,
            transactional_id=tid,
            transaction_state=d.state.value if d else "",
            transaction_timeout=datetime.timedelta(milliseconds=d.timeout_ms if d else 0),
            transaction_start_time=start,
            producer_id=d.producer_id if d else -1,
            producer_epoch=d.producer_epoch if d else -1,
            topics=tuple(
                ctx.make("TopicData", topic=name, partitions=tuple(ps))
                for name, ps in topics.items()
            ),
        )

    def handle_list_transactions(self, ctx: RequestContext) -> None:
        req = ctx.body
        known = {s.value for s in TransactionState}
        filters = tuple(req.state_filters)
        wanted = [s for s in filters if s in known]
        found = (
            self.coordinator.list_transactions(
                wanted,
                [int(p) for p in req.producer_id_filters],
                int(getattr(req, "duration_filter", -1)),
            )
            if wanted or not filters  # only unknown states asked: none match
            else []
        )
        ctx.respond(
            ctx.make_response(
                error_code=ErrorCode.none,
                unknown_state_filters=tuple(s for s in filters if s not in known),
                transaction_states=tuple(
                    ctx.make(
                        "TransactionState",
                        transactional_id=d.transactional_id,
                        producer_id=d.producer_id,
                        transaction_state=d.state.value,
                    )
                    for d in found
                    if ctx.authorized(
                        AclOperation.DESCRIBE,
                        AclResourceType.TRANSACTIONAL_ID,
                        d.transactional_id,
                        log_denied=False,
                    )
                ),
            )
        )

    # DescribeProducers ----------------------------------------------------------------------
    def handle_describe_producers(self, ctx: RequestContext) -> None:
        """The producers with state on partitions this broker leads (Read on the topic)."""
        topics = []
        for topic in ctx.body.topics:
            readable = ctx.authorized(AclOperation.READ, AclResourceType.TOPIC, topic.name)
            partitions = []
            for index in topic.partition_indexes:
                error, message, producers = ErrorCode.topic_authorization_failed, None, []
                if readable:
                    try:
                        producers = self.replica_manager.producer_states(
                            TopicPartition(topic.name, int(index))
                        )
                        error = ErrorCode.none
                    except KafkaError as exc:
                        error, message = exc.code, exc.message
                partitions.append(
                    ctx.make(
                        "PartitionResponse",
                        partition_index=index,
                        error_code=error,
                        error_message=message,
                        active_producers=tuple(
                            ctx.make(
                                "ProducerState",
                                producer_id=p.producer_id,
                                producer_epoch=p.producer_epoch,
                                last_sequence=p.last_sequence,
                                last_timestamp=p.last_timestamp,
                                coordinator_epoch=p.coordinator_epoch,
                                current_txn_start_offset=p.current_txn_start_offset,
                            )
                            for p in producers
                        ),
                    )
                )
            topics.append(ctx.make("TopicResponse", name=topic.name, partitions=tuple(partitions)))
        ctx.respond(ctx.make_response(topics=tuple(topics)))
