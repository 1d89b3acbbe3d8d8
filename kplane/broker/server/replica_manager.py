"""ReplicaManager: the partitions this broker leads, appends to them and reads from them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog

from kplane.broker.log.log import LogAppendInfo, next_offset_after
from kplane.broker.log.log_config import LogConfigs
from kplane.broker.log.log_dir_failure_channel import KafkaStorageError
from kplane.broker.log.log_manager import LogManager
from kplane.broker.log.partition import Partition, ReplicaAssignment, TopicPartition
from kplane.broker.log.producer_state import ProducerInfo
from kplane.broker.log.transaction_index import AbortedTxn
from kplane.broker.metadata.cache import MetadataCache
from kplane.broker.metadata.kafka_store import PartitionStateChangedError, PartitionStateRecord
from kplane.broker.metadata.store import StoreError
from kplane.broker.utils.file_region import Transferable
from kplane.broker.utils.interval_log import IntervalWarning
from kplane.broker.utils.purgatory import DelayedOperationPurgatory
from kplane.protocol.errors import ErrorCode, KafkaError
from kplane.protocol.record_validation import ValidationPolicy, validate_batches
from kplane.protocol.records import InvalidRecordError, scan_batches

if TYPE_CHECKING:
    from kplane.broker.server.replica_fetcher import ReplicaFetcherManager as FetcherManager
    from kplane.broker.server.replication_quota import ReplicationQuota

log = structlog.get_logger(__name__)

READ_UNCOMMITTED = 0
READ_COMMITTED = 1
FETCH_LOG_END = -1
"""A follower's fetch: everything up to the log end, not only what is committed."""
"""Kafka's isolation levels (Fetch and ListOffsets ``isolation_level``)."""


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """A controller's decision for one partition (a LeaderAndIsr partition state)."""

    tp: TopicPartition
    assignment: ReplicaAssignment


IsrWriter = Callable[[TopicPartition, PartitionStateRecord], int]
"""Writes a leader's ISR change (the state znode at ``version``); returns the new version,
raises PartitionStateChangedError (with the state stored) when it changed since, another
StoreError when the store could not be written."""


@dataclass(frozen=True, slots=True)
class StopReplicaState:
    """One partition of a StopReplica request."""

    tp: TopicPartition
    delete: bool
    leader_epoch: int = -1


@dataclass(slots=True)
class AppendResult:
    """Outcome of appending to one partition."""

    error: ErrorCode = ErrorCode.none
    message: str | None = None
    info: LogAppendInfo | None = None
    record_errors: tuple[tuple[int, str], ...] = ()
    """(index of the record in its batch, why it was refused)."""


@dataclass(slots=True)
class ReadResult:
    """Outcome of reading one partition."""

    error: ErrorCode = ErrorCode.none
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    leader_epoch: int = -1
    views: list[Transferable] = field(default_factory=list)
    aborted_transactions: list[AbortedTxn] | None = None
    """READ_COMMITTED: the aborted transactions the records read may hold."""

    @property
    def size(self) -> int:
        return sum(len(v) for v in self.views)


class ReplicaManager:
    """Leader-side append and read, with Kafka's per-partition error codes."""

    def __init__(
        self,
        broker_id: int,
        log_manager: LogManager,
        cache: MetadataCache,
        fetch_purgatory: DelayedOperationPurgatory,
        log_configs: LogConfigs,
        produce_purgatory: DelayedOperationPurgatory | None = None,
        isr_writer: IsrWriter | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.log_manager = log_manager
        self.cache = cache
        self.fetch_purgatory = fetch_purgatory
        self.produce_purgatory = produce_purgatory
        self.log_configs = log_configs
        self._isr_writer = isr_writer
        self._isr_fenced: dict[TopicPartition, tuple[int, int]] = {}
        """Partitions whose stored state names another leader or leader epoch, with the
        (leader epoch, partition epoch) they were at then: no ISR write until the
        controller's LeaderAndIsr moves them on."""
        self._isr_not_written = IntervalWarning("isr change not written")
        self.controller_epoch = 0  # the highest seen
        self._state_lock = threading.Lock()
        self.fetchers: FetcherManager | None = None
        """Fetches for the partitions this broker follows (set by the server)."""
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.leader_quota: ReplicationQuota | None = None
        """``leader.replication.throttled.rate`` (set by the server)."""

    # leadership (LeaderAndIsr, StopReplica) ----------------------------------------------
    def become_leader_or_follower(
        self,
        controller_epoch: int,
        states: list[ReplicaState],
        live_leaders: Collection[int] = (),
    ) -> dict[TopicPartition, ErrorCode]:
        """Apply a controller's decisions: lead the partitions whose leader is this broker,
        follow the others (their fetchers start from where the leader's log agrees with
        this one; a leader neither the request's ``live_leaders`` nor the metadata cache
        names alive is not fetched from, as Kafka's makeFollowers). Raises
        KafkaError(STALE_CONTROLLER_EPOCH) for an older controller; a partition whose
        (leader epoch, partition epoch) is not newer than the one applied is answered
        STALE_CONTROLLER_EPOCH and left alone, as Kafka does."""
        errors: dict[TopicPartition, ErrorCode] = {}
        with self._state_lock:
            self._advance_controller_epoch(controller_epoch)
            followed: dict[TopicPartition, Partition] = {}
            led: list[TopicPartition] = []
            demoted: list[TopicPartition] = []
            unavailable: list[TopicPartition] = []
            for state in states:
                a = state.assignment
                self._isr_fenced.pop(state.tp, None)
                try:
                    partition = self.log_manager.get_or_create(state.tp)
                except KafkaStorageError as exc:  # an offline log dir (KIP-112)
                    errors[state.tp] = exc.code
                    continue
                current = (partition.leader_epoch, partition.partition_epoch)
                if partition.leader_id != -1 and (a.leader_epoch, a.partition_epoch) <= current:
                    log.info(
                        "LeaderAndIsr ignored: leader epoch not newer",
                        partition=str(state.tp),
                        leader_epoch=a.leader_epoch,
                        current_leader_epoch=partition.leader_epoch,
                    )
                    errors[state.tp] = ErrorCode.stale_controller_epoch
                    continue
                if a.leader == self.broker_id:
                    try:
                        partition.make_leader(self.broker_id, a)
                    except KafkaStorageError as exc:
                        errors[state.tp] = exc.code
                        continue
                    led.append(state.tp)
                else:
                    partition.make_follower(self.broker_id, a)
                    demoted.append(state.tp)
                    if a.leader in live_leaders or a.leader in self.cache.snapshot.brokers:
                        followed[state.tp] = partition
                    elif a.leader >= 0:
                        unavailable.append(state.tp)
                errors[state.tp] = ErrorCode.none
            if unavailable:
                log.warning(
                    "LeaderAndIsr names leaders this broker does not know alive: not fetching",
                    count=len(unavailable),
                    partitions=[str(tp) for tp in unavailable[:10]],
                )
            if self.fetchers is not None:
                self.fetchers.remove_partitions(led)
                self.fetchers.add_partitions(followed)
        # A leader made again with a smaller ISR (a gone follower taken out) may move its
        # high watermark: acks=all Produces parked on it complete (Kafka's makeLeader).
        for tp in (*demoted, *led):
            self._complete_delayed_requests(tp)
        return errors

    def stop_replicas(
        self, controller_epoch: int, stops: list[StopReplicaState]
    ) -> dict[TopicPartition, ErrorCode]:
        """Stop being a replica of each partition; with ``delete`` drop its log too.
        KafkaError(STALE_CONTROLLER_EPOCH) for an older controller; FENCED_LEADER_EPOCH for a
        partition whose leader epoch moved past the request's (-1 and -2 always match)."""
        errors: dict[TopicPartition, ErrorCode] = {}
        with self._state_lock:
            self._advance_controller_epoch(controller_epoch)
            for stop in stops:
                partition = self.log_manager.get(stop.tp)
                if (
                    partition is not None
                    and stop.leader_epoch >= 0
                    and stop.leader_epoch < partition.leader_epoch
                ):
                    errors[stop.tp] = ErrorCode.fenced_leader_epoch
                    continue
                if stop.delete:
                    self.log_manager.delete(stop.tp)
                    self.log_configs.forget(stop.tp.topic)
                elif partition is not None:
                    partition.leader_id = -1
                errors[stop.tp] = ErrorCode.none
            if self.fetchers is not None:
                self.fetchers.remove_partitions([stop.tp for stop in stops])
        for stop in stops:
            self._complete_delayed_requests(stop.tp)
        return errors

    def check_controller_epoch(self, controller_epoch: int) -> None:
        """Remember the newest controller epoch; KafkaError(STALE_CONTROLLER_EPOCH) for
        an older one."""
        with self._state_lock:
            self._advance_controller_epoch(controller_epoch)

    def _advance_controller_epoch(self, controller_epoch: int) -> None:
        if controller_epoch < self.controller_epoch:
            raise KafkaError(
                ErrorCode.stale_controller_epoch,
                f"controller epoch {controller_epoch} is older than {self.controller_epoch}",
            )
        self.controller_epoch = controller_epoch

    def leader_partition(self, tp: TopicPartition, current_leader_epoch: int = -1) -> Partition:
        """The partition if this broker leads it; KafkaError with Kafka's code otherwise.
        A ``current_leader_epoch`` (KIP-320; -1: none) older than the partition's answers
        FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH, checked before leadership as
        Kafka does."""
        topic = self.cache.topic(tp.topic)
        if topic is None or tp.partition not in topic.partitions:
            raise KafkaError(
                ErrorCode.unknown_topic_or_partition,
                "This server does not host this topic-partition.",
            )
        partition = self.log_manager.get(tp)
        if partition is None and self.log_manager.is_offline(tp):
            raise KafkaStorageError(f"{tp} is in an offline log dir")
        if partition is not None and current_leader_epoch >= 0:
            local = partition.leader_epoch
            if local != current_leader_epoch:
                raise KafkaError(
                    ErrorCode.fenced_leader_epoch
                    if local > current_leader_epoch
                    else ErrorCode.unknown_leader_epoch,
                    f"{tp}: leader epoch {current_leader_epoch} asked, {local} here",
                )
        if partition is None or partition.leader_id != self.broker_id:
            raise KafkaError(
                ErrorCode.not_leader_or_follower,
                f"Broker {self.broker_id} is not the leader of {tp}",
            )
        return partition

    # append --------------------------------------------------------------------------
    def append(
        self,
        tp: TopicPartition,
        records: bytes | memoryview | None,
        acks: int,
        produce_version: int,
        now_ms: int | None = None,
        records_at: int | None = None,
    ) -> AppendResult:
        """Check and append one partition's records as leader.

        The batches are validated as Kafka's LogValidator does (see
        ``protocol.record_validation``) against the topic's cached :class:`LogSettings`;
        when one is refused, none is appended. With ``acks=-1`` the ISR must hold
        ``min.insync.replicas`` replicas. ``now_ms`` is the request's clock (read once per
        request by the caller). ``records_at``: ``records`` is a view of a ``bytes`` frame
        starting there, whose records are then checked in place (see ``validate_batches``).
        """
        try:
            partition = self.leader_partition(tp)
            settings = self.log_configs.log_settings(tp.topic)
            if acks == -1:
                self._check_min_isr(tp, partition, settings.min_insync_replicas)
            if not records:
                raise KafkaError(ErrorCode.corrupt_message, "produce request has no records")
            batches = scan_batches(records)
            max_bytes = settings.max_message_bytes
            for batch in batches:
                if batch.size > max_bytes:
                    raise InvalidRecordError(
                        ErrorCode.message_too_large,
                        f"batch of {batch.size} bytes exceeds max.message.bytes {max_bytes}",
                    )
            policy = ValidationPolicy(
                produce_version=produce_version,
                log_append_time=settings.log_append_time,
                timestamp_difference_max_ms=settings.message_timestamp_difference_max_ms,
                compacted_partition=str(tp) if settings.compact else None,
            )
            now = _now_ms() if now_ms is None else now_ms
            validate_batches(records, batches, policy, now, records_at)
            info = partition.append_records_as_leader(records, batches)
        except KafkaError as exc:
            log.debug("append refused", partition=str(tp), error=exc.code.name, reason=exc.message)
            return AppendResult(exc.code, exc.message)
        except InvalidRecordError as exc:
            log.warning(
                "record batch refused",
                topic=tp.topic,
                partition=tp.partition,
                error=exc.error_code.name,
                reason=exc.message,
            )
            return AppendResult(exc.error_code, exc.message, record_errors=exc.record_errors)
        self.fetch_purgatory.check_and_complete(tp)
        return AppendResult(info=info)

    @staticmethod
    def _check_min_isr(tp: TopicPartition, partition: Partition, required: int) -> None:
        isr = partition.isr
        if len(isr) < required:
            raise KafkaError(
                ErrorCode.not_enough_replicas,
                f"The size of the current ISR {set(isr)} is insufficient to satisfy the "
                f"min.isr requirement of {required} for partition {tp}",
            )

    # replication (the leader's side) -----------------------------------------------------
    def update_follower_fetch(self, tp: TopicPartition, replica_id: int, offset: int) -> None:
        """A follower fetched ``tp`` from ``offset``: the high watermark may move (waking
        acks=all produces and consumers' fetches) and the follower may join the ISR."""
        partition = self.log_manager.get(tp)
        if partition is None or not partition.is_leader:
            return
        moved = partition.update_follower_fetch_state(replica_id, offset)
        moved |= partition.maybe_expand_isr(replica_id, self._alter_isr)
        if moved:
            self._complete_delayed_requests(tp)

    def maybe_shrink_isr(self, max_lag_ms: int) -> int:
        """Drop followers that fell behind for ``max_lag_ms`` from the ISR of every
        partition this broker leads (``replica.lag.time.max.ms``); returns how many ISRs
        shrank."""
        shrunk = 0
        for partition in self.log_manager.partitions():
            if partition.is_leader and partition.maybe_shrink_isr(max_lag_ms, self._alter_isr):
                shrunk += 1
                self._complete_delayed_requests(partition.tp)
        self._isr_not_written.flush()
        return shrunk

    def throttled_follower(self, tp: TopicPartition, replica_id: int) -> bool:
        """Whether the leader throttle covers ``replica_id``'s fetches of ``tp``: the
        replica is named in the topic's leader.replication.throttled.replicas and the
        follower is out of the ISR (KIP-73; an in-sync follower is never slowed)."""
        quota = self.leader_quota
        partition = self.log_manager.get(tp)  # first: only hosted partitions have configs
        if quota is None or partition is None or replica_id in partition.isr:
            return False
        return quota.is_throttled(tp)

    def _complete_delayed_requests(self, tp: TopicPartition) -> None:
        """The high watermark or the leadership of ``tp`` moved: parked acks=all Produces
        and Fetches of it complete if they can (a deposed leader's with its error)."""
        if self.produce_purgatory is not None:
            self.produce_purgatory.check_and_complete(tp)
        self.fetch_purgatory.check_and_complete(tp)

    def _alter_isr(self, partition: Partition, isr: tuple[int, ...]) -> int | None:
        """Write a new ISR where the controller and the other brokers see it; None when it
        was not written (store failures are logged once per interval, with a count)."""
        if self._isr_writer is None:
            return partition.partition_epoch
        tp = partition.tp
        if self._isr_fenced.get(tp) == (partition.leader_epoch, partition.partition_epoch):
            return None
        record = PartitionStateRecord(
            partition.leader_id,
            partition.leader_epoch,
            isr,
            self.controller_epoch,
            partition.partition_epoch,
        )
        try:
            version = self._isr_writer(tp, record)
        except PartitionStateChangedError as exc:
            self._isr_state_changed(partition, exc.stored)
            return None
        except StoreError as exc:
            self._isr_not_written.record(partition=str(tp), reason=repr(exc))
            return None
        log.info(
            "isr changed",
            partition=str(partition.tp),
            old_isr=list(partition.isr),
            new_isr=list(isr),
        )
        if len(isr) < len(partition.isr):
            self.isr_shrinks += 1
        else:
            self.isr_expands += 1
        return version

    def _isr_state_changed(self, partition: Partition, stored: PartitionStateRecord | None) -> None:
        """An ISR write lost the version race (Kafka's zkVersion check), one line each time:
        a state at this leader and leader epoch (an earlier write of this leader) is where
        the next write starts from; another leader or leader epoch means the controller
        moved the partition, and writes stop until its LeaderAndIsr comes."""
        tp = partition.tp
        if (
            stored is not None
            and stored.leader == self.broker_id
            and stored.leader_epoch == partition.leader_epoch
        ):
            partition.partition_epoch = stored.version
            log.info(
                "isr change not written: partition state read again",
                partition=str(tp),
                partition_epoch=stored.version,
                isr=list(stored.isr),
            )
            return
        self._isr_fenced[tp] = (partition.leader_epoch, partition.partition_epoch)
        log.info(
            "isr change not written: the controller moved the partition",
            partition=str(tp),
            leader_epoch=partition.leader_epoch,
            stored_leader=stored.leader if stored else None,
            stored_leader_epoch=stored.leader_epoch if stored else None,
        )

    def under_replicated_partitions(self) -> int:
        """Partitions this broker leads whose ISR lacks some of their replicas."""
        return sum(
            1 for p in self.log_manager.partitions() if p.is_leader and len(p.isr) < len(p.replicas)
        )

    def replicated(self, tp: TopicPartition, required_offset: int) -> ErrorCode | None:
        """Whether an acks=all append up to ``required_offset`` is done: None while the
        ISR lacks it, NONE once the high watermark passed it, NOT_ENOUGH_REPLICAS_AFTER_APPEND
        when the ISR it reached is smaller than ``min.insync.replicas``, the leader's error
        when this broker no longer leads."""
        try:
            partition = self.leader_partition(tp)
        except KafkaError as exc:
            return exc.code
        if partition.high_watermark < required_offset:
            return None
        if len(partition.isr) < self.log_configs.log_settings(tp.topic).min_insync_replicas:
            return ErrorCode.not_enough_replicas_after_append
        return ErrorCode.none

    # transactions ----------------------------------------------------------------------
    def write_txn_marker(
        self,
        tp: TopicPartition,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
    ) -> ErrorCode:
        """Write a COMMIT or ABORT marker for the producer's transaction on a partition
        this broker leads (WriteTxnMarkers). UNKNOWN_TOPIC_OR_PARTITION,
        NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS (below ``min.insync.replicas``, as the
        coordinator's acks=-1 append), INVALID_PRODUCER_EPOCH for a fenced producer epoch,
        TRANSACTION_COORDINATOR_FENCED for an older coordinator epoch, INVALID_REQUEST for a
        negative producer id; parked fetches of the partition are woken (the last stable
        offset may have moved)."""
        try:
            partition = self.leader_partition(tp)
            required = self.log_configs.log_settings(tp.topic).min_insync_replicas
            self._check_min_isr(tp, partition, required)
            partition.append_txn_marker(producer_id, producer_epoch, coordinator_epoch, commit)
        except KafkaError as exc:
            log.debug(
                "transaction marker refused",
                partition=str(tp),
                error=exc.code.name,
                reason=exc.message,
            )
            return exc.code
        except ValueError as exc:  # a producer id or epoch no marker can carry
            log.warning("transaction marker refused", partition=str(tp), reason=str(exc))
            return ErrorCode.invalid_request
        self.fetch_purgatory.check_and_complete(tp)
        return ErrorCode.none

    def producer_states(self, tp: TopicPartition) -> list[ProducerInfo]:
        """The producers with state on a partition this broker leads (DescribeProducers);
        KafkaError as :meth:`leader_partition` raises it."""
        return self.leader_partition(tp).active_producers()

    # log dir failures (KIP-112) ------------------------------------------------------
    def handle_log_dir_failure(self, log_dir: str) -> list[TopicPartition]:
        """Kafka's handleLogDirFailure: stop serving the replicas in ``log_dir`` — no longer
        fetched as a follower, their logs offline (KAFKA_STORAGE_ERROR from now on), their
        parked Produces and Fetches answered. Returns their partitions."""
        with self._state_lock:
            offline = self.log_manager.handle_log_dir_failure(log_dir)
            if self.fetchers is not None:
                self.fetchers.remove_partitions(offline)
        for tp in offline:
            self._complete_delayed_requests(tp)
        return offline

    # DeleteRecords ---------------------------------------------------------------------
    def delete_records(self, tp: TopicPartition, offset: int) -> tuple[ErrorCode, int]:
        """Move the log start offset of a partition this broker leads to ``offset`` (-1:
        the high watermark); (error, the new low watermark). Beyond the high watermark, or
        negative other than -1: OFFSET_OUT_OF_RANGE, as Kafka answers. Replication is not
        built, so the leader's log is the only copy and the answer is immediate."""
        try:
            partition = self.leader_partition(tp)
        except KafkaError as exc:
            return exc.code, -1
        hw = partition.high_watermark
        target = hw if offset == -1 else offset
        if target < 0 or target > hw:
            return ErrorCode.offset_out_of_range, -1
        try:
            moved = partition.log.maybe_increment_log_start_offset(target)
        except KafkaStorageError as exc:
            return exc.code, -1
        if moved:
            self.log_manager.checkpoint_log_start_offsets()
        return ErrorCode.none, partition.log.log_start_offset

    # read ----------------------------------------------------------------------------
    def read(
        self,
        tp: TopicPartition,
        offset: int,
        max_bytes: int,
        min_one_batch: bool,
        isolation_level: int = READ_UNCOMMITTED,
        current_leader_epoch: int = -1,
    ) -> ReadResult:
        """Read whole batches from ``offset``, below the high watermark, or below the last
        stable offset for READ_COMMITTED, which also collects the aborted transactions
        from ``offset`` to the end of what was read (to the LSO when nothing was);
        OFFSET_OUT_OF_RANGE outside the log. An offset between the LSO and the high
        watermark reads nothing, as in Kafka."""
        try:
            partition = self.leader_partition(tp, current_leader_epoch)
        except KafkaError as exc:
            return ReadResult(exc.code)
        log_ = partition.log
        hw = partition.high_watermark
        lso = partition.last_stable_offset
        result = ReadResult(
            high_watermark=hw,
            last_stable_offset=lso,
            log_start_offset=log_.log_start_offset,
            leader_epoch=partition.leader_epoch,
        )
        if offset < log_.log_start_offset or offset > log_.log_end_offset:
            result.error = ErrorCode.offset_out_of_range
            return result
        committed = isolation_level == READ_COMMITTED
        bound = fetchable_end(partition, isolation_level)
        try:
            if offset < bound and max_bytes > 0:
                result.views = log_.read(
                    offset,
                    max_bytes,
                    min_one_batch,
                    None if isolation_level == FETCH_LOG_END else bound,
                )
            if committed:
                upper = next_offset_after(result.views) if result.views else None
                result.aborted_transactions = log_.collect_aborted_transactions(
                    offset, lso if upper is None else upper
                )
        except KafkaStorageError as exc:
            return ReadResult(exc.code)
        return result


def fetchable_end(partition: Partition, isolation_level: int) -> int:
    """Where a fetch at ``isolation_level`` stops: the last stable offset, the high
    watermark, or for a follower the log end."""
    if isolation_level == READ_COMMITTED:
        return partition.last_stable_offset
    if isolation_level == FETCH_LOG_END:
        return partition.log.log_end_offset
    return partition.high_watermark


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
