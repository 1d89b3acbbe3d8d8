"""TransactionCoordinator: Kafka's transaction protocol (KIP-98) for the transactional ids
this broker coordinates.

InitProducerId hands out a producer id and epoch (bumping the epoch fences the previous
producer of the transactional id), AddPartitionsToTxn and AddOffsetsToTxn record what a
transaction touches, EndTxn moves it to PrepareCommit or PrepareAbort, answers, and has the
TransactionMarkerChannelManager write the markers; when all are written the transaction is
CompleteCommit or CompleteAbort. A transaction open longer than its timeout is aborted with
a bumped epoch (the producer is fenced), and transactional ids idle longer than
``transactional.id.expiration.ms`` are removed. Each change is stored before it is answered.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass

import structlog

from kplane.broker.log.partition import TopicPartition
from kplane.broker.transaction.marker_channel import TransactionMarkerChannelManager, TxnMarker
from kplane.broker.transaction.state_manager import TransactionStateManager
from kplane.broker.transaction.transaction_metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    IllegalTransitionError,
    TransactionMetadata,
    TransactionState,
    is_epoch_exhausted,
)
from kplane.broker.utils.timer import SystemTimer, TimerTask
from kplane.protocol.errors import ErrorCode, KafkaError

log = structlog.get_logger(__name__)

S = TransactionState


@dataclass(frozen=True, slots=True)
class TransactionConfig:
    """The transaction.* broker settings the coordinator uses (Kafka's defaults)."""

    max_timeout_ms: int = 900_000
    abort_timed_out_interval_ms: int = 10_000
    remove_expired_interval_ms: int = 3_600_000
    transactional_id_expiration_ms: int = 604_800_000


@dataclass(frozen=True, slots=True)
class InitProducerIdResult:
    """InitProducerId's answer."""

    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """One DescribeTransactions / ListTransactions entry."""

    transactional_id: str
    state: TransactionState
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_timestamp_ms: int
    partitions: tuple[TopicPartition, ...]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class TransactionCoordinator:
    """Serves the transaction APIs; ``new_producer_id()`` draws from the cluster's blocks."""

    def __init__(
        self,
        config: TransactionConfig,
        state: TransactionStateManager,
        markers: TransactionMarkerChannelManager,
        new_producer_id: Callable[[], int],
        timer: SystemTimer,
    ) -> None:
        self.config = config
        self.state = state
        self.markers = markers
        self._new_producer_id = new_producer_id
        self._timer = timer
        self._tasks: list[TimerTask] = []
        self._shutdown = False
        self._in_flight: set[tuple[str, int]] = set()
        """(transactional id, epoch) of the transactions whose markers are being written."""

    # lifecycle ------------------------------------------------------------------------
    def startup(self) -> None:
        """Resume the transactions this broker coordinates, then check timeouts and
        expirations periodically."""
        self._every(self.config.abort_timed_out_interval_ms, self._resume_and_abort)
        self._every(self.config.remove_expired_interval_ms, self.remove_expired_transactional_ids)
        self._resume_and_abort()

    def _every(self, interval_ms: int, fn: Callable[[], object]) -> None:
        def run() -> None:
            if self._shutdown:
                return
            try:
                fn()
            except Exception as exc:  # a periodic duty never stops for one failure
                log.warning("transaction coordinator duty failed", reason=str(exc))
            finally:
                if not self._shutdown:
                    self._tasks.append(self._timer.schedule(interval_ms, run))

        self._tasks.append(self._timer.schedule(interval_ms, run))

    def shutdown(self) -> None:
        """Stop the periodic duties."""
        self._shutdown = True
        for task in self._tasks:
            task.cancel()

    def _resume_and_abort(self) -> None:
        """Load the ids this broker coordinates (another broker may have coordinated them
        until now), finish their PrepareCommit/PrepareAbort, abort timed-out ones."""
        now = _now_ms()
        for tid in self.state.owned_ids():
            try:
                with self.state.locked(tid) as metadata:
                    if metadata is None:
                        continue
                    if metadata.state.is_prepare and not self._sending(metadata):
                        self._send_markers(metadata)
                    elif (
                        metadata.state is S.ONGOING
                        and now > metadata.txn_start_timestamp_ms + metadata.txn_timeout_ms
                    ):
                        log.info(
                            "aborting timed-out transaction",
                            transactional_id=tid,
                            producer_id=metadata.producer_id,
                            timeout_ms=metadata.txn_timeout_ms,
                        )
                        self._fence_and_abort(metadata)
            except KafkaError as exc:
                log.info("transaction not resumed", transactional_id=tid, reason=exc.message)

    # InitProducerId -------------------------------------------------------------------
    def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        expected_producer_id: int = NO_PRODUCER_ID,
        expected_epoch: int = NO_PRODUCER_EPOCH,
    ) -> InitProducerIdResult:
        """A producer id and epoch for ``transactional_id``: new, or the stored one with the
        epoch bumped, which fences the previous producer. An open transaction is aborted
        first (CONCURRENT_TRANSACTIONS: the client retries). An expected id and epoch
        (KIP-360: a producer recovering from an error) follow Kafka's rules, see
        :func:`_may_reinitialise` and :meth:`_next_epoch`."""
        if not transactional_id:
            return InitProducerIdResult(ErrorCode.invalid_request)
        if (expected_producer_id == NO_PRODUCER_ID) != (expected_epoch == NO_PRODUCER_EPOCH):
            return InitProducerIdResult(ErrorCode.invalid_request)  # one given without the other
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return InitProducerIdResult(ErrorCode.invalid_transaction_timeout)
        expected = (
            None
            if expected_producer_id == NO_PRODUCER_ID
            else ProducerIdAndEpoch(expected_producer_id, expected_epoch)
        )
        try:
            with self.state.locked(transactional_id) as current:
                return self._init(transactional_id, current, timeout_ms, expected)
        except KafkaError as exc:
            return InitProducerIdResult(exc.code)

    def _init(
        self,
        tid: str,
        current: TransactionMetadata | None,
        timeout_ms: int,
        expected: ProducerIdAndEpoch | None,
    ) -> InitProducerIdResult:
        now = _now_ms()
        if current is None:
            metadata = TransactionMetadata(
                tid,
                self._new_producer_id(),
                NO_PRODUCER_EPOCH,
                timeout_ms,
                txn_last_update_timestamp_ms=now,
            )
        else:
            metadata = current.copy()
        if expected is not None and not _may_reinitialise(metadata, expected):
            return self._fenced(tid, metadata, expected)
        if metadata.state.is_prepare:
            return InitProducerIdResult(ErrorCode.concurrent_transactions)
        if metadata.state is S.ONGOING:
            self._fence_and_abort(metadata)
            return InitProducerIdResult(ErrorCode.concurrent_transactions)
        if metadata.state not in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            return InitProducerIdResult(ErrorCode.concurrent_transactions)
        if metadata.epoch_exhausted and (
            expected is None or expected.epoch == metadata.producer_epoch
        ):
            # Kafka's producer id rotation: the last id and (when the producer named it) its
            # epoch are kept, so a retry of this call is recognised.
            metadata.last_producer_id = metadata.producer_id
            metadata.last_producer_epoch = (
                metadata.producer_epoch if expected is not None else NO_PRODUCER_EPOCH
            )
            metadata.producer_id = self._new_producer_id()
            metadata.producer_epoch = 0
        else:
            epochs = _next_epoch(metadata, expected)
            if epochs is None:
                return self._fenced(tid, metadata, expected)
            metadata.producer_epoch, metadata.last_producer_epoch = epochs
        metadata.txn_timeout_ms = timeout_ms
        metadata.partitions = set()
        metadata.txn_start_timestamp_ms = -1
        metadata.txn_last_update_timestamp_ms = now
        metadata.transition(S.EMPTY)
        self.state.put(metadata)
        log.info(
            "transactional producer initialised",
            transactional_id=tid,
            producer_id=metadata.producer_id,
            producer_epoch=metadata.producer_epoch,
        )
        return InitProducerIdResult(ErrorCode.none, metadata.producer_id, metadata.producer_epoch)

    @staticmethod
    def _fenced(
        tid: str, metadata: TransactionMetadata, expected: ProducerIdAndEpoch | None
    ) -> InitProducerIdResult:
        log.info(
            "InitProducerId fenced: the producer is not the current one",
            transactional_id=tid,
            expected=str(expected),
            current=f"{metadata.producer_id}/{metadata.producer_epoch}",
            last=f"{metadata.last_producer_id}/{metadata.last_producer_epoch}",
        )
        return InitProducerIdResult(ErrorCode.producer_fenced)

    # AddPartitionsToTxn / AddOffsetsToTxn ---------------------------------------------------
    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Collection[TopicPartition],
        verify_only: bool = False,
    ) -> ErrorCode:
        """Add ``partitions`` to the producer's transaction (starting it when none is open).
        ``verify_only`` (KIP-890's broker form) only checks that they are in it already:
        INVALID_TXN_STATE otherwise."""
        try:
            with self.state.locked(transactional_id) as current:
                error = self._check_producer(current, producer_id, producer_epoch)
                if error is not None or current is None:
                    return error or ErrorCode.invalid_producer_id_mapping
                if verify_only:
                    ok = current.state is S.ONGOING and set(partitions) <= current.partitions
                    return ErrorCode.none if ok else ErrorCode.invalid_txn_state
                if current.state.is_prepare:
                    return ErrorCode.concurrent_transactions
                if current.state is S.ONGOING and set(partitions) <= current.partitions:
                    return ErrorCode.none
                metadata = current.copy()
                now = _now_ms()
                if metadata.state is not S.ONGOING:
                    metadata.txn_start_timestamp_ms = now
                metadata.transition(S.ONGOING)
                metadata.partitions |= set(partitions)
                metadata.txn_last_update_timestamp_ms = now
                self.state.put(metadata)
                return ErrorCode.none
        except IllegalTransitionError as exc:
            log.warning("AddPartitionsToTxn refused", reason=str(exc))
            return ErrorCode.invalid_txn_state
        except KafkaError as exc:
            return exc.code

    @staticmethod
    def _check_producer(
        metadata: TransactionMetadata | None, producer_id: int, producer_epoch: int
    ) -> ErrorCode | None:
        if metadata is None or metadata.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if metadata.producer_epoch != producer_epoch:
            return ErrorCode.producer_fenced
        return None

    # EndTxn ---------------------------------------------------------------------------
    def end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> ErrorCode:
        """Commit or abort the producer's transaction: stored as PrepareCommit or
        PrepareAbort before answering, the markers written after."""
        try:
            with self.state.locked(transactional_id) as current:
                error = self._check_producer(current, producer_id, producer_epoch)
                if error is not None or current is None:
                    return error or ErrorCode.invalid_producer_id_mapping
                state = current.state
                wanted = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
                done = S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT
                if state is S.ONGOING:
                    metadata = current.copy()
                    self._prepare(metadata, wanted)
                    return ErrorCode.none
                if state is done:
                    return ErrorCode.none  # a retry of an EndTxn already completed
                if state is wanted:
                    return ErrorCode.concurrent_transactions
                return ErrorCode.invalid_txn_state
        except KafkaError as exc:
            return exc.code

    def _prepare(self, metadata: TransactionMetadata, to: TransactionState) -> None:
        metadata.transition(to)
        metadata.txn_last_update_timestamp_ms = _now_ms()
        self.state.put(metadata)
        self._send_markers(metadata)

    def _fence_and_abort(self, current: TransactionMetadata) -> None:
        """Bump the epoch of an open transaction (its producer is fenced) and abort it."""
        metadata = current.copy()
        metadata.transition(S.PREPARE_EPOCH_FENCE)
        if not metadata.epoch_exhausted:
            metadata.producer_epoch += 1
        self._prepare(metadata, S.PREPARE_ABORT)

    # markers --------------------------------------------------------------------------
    def _sending(self, metadata: TransactionMetadata) -> bool:
        return (metadata.transactional_id, metadata.producer_epoch) in self._in_flight

    def _send_markers(self, metadata: TransactionMetadata) -> None:
        tid, epoch = metadata.transactional_id, metadata.producer_epoch
        commit = metadata.state is S.PREPARE_COMMIT
        self._in_flight.add((tid, epoch))
        marker = TxnMarker(
            metadata.producer_id,
            epoch,
            metadata.coordinator_epoch,
            commit,
            tuple(sorted(metadata.partitions, key=lambda tp: (tp.topic, tp.partition))),
        )
        self._timer.schedule(
            0, lambda: self.markers.send(marker, lambda: self._complete(tid, marker))
        )

    def _complete(self, transactional_id: str, marker: TxnMarker) -> None:
        """Every marker is written: CompleteCommit or CompleteAbort."""
        self._in_flight.discard((transactional_id, marker.producer_epoch))
        try:
            with self.state.locked(transactional_id) as current:
                wanted = S.PREPARE_COMMIT if marker.commit else S.PREPARE_ABORT
                if (
                    current is None
                    or current.state is not wanted
                    or current.producer_id != marker.producer_id
                    or current.producer_epoch != marker.producer_epoch
                ):
                    return
                metadata = current.copy()
                metadata.transition(S.COMPLETE_COMMIT if marker.commit else S.COMPLETE_ABORT)
                metadata.partitions = set()
                metadata.txn_last_update_timestamp_ms = _now_ms()
                self.state.put(metadata)
        except KafkaError as exc:
            log.info(
                "transaction completion not stored",
                transactional_id=transactional_id,
                reason=exc.message,
            )

    # expiration -----------------------------------------------------------------------
    def remove_expired_transactional_ids(self) -> int:
        """Remove ids with no transaction open whose last update is older than
        ``transactional.id.expiration.ms``; returns how many."""
        expire_before = _now_ms() - self.config.transactional_id_expiration_ms
        removed = 0
        for tid in self.state.owned_ids():
            try:
                with self.state.locked(tid) as metadata:
                    if (
                        metadata is not None
                        and metadata.state.is_complete
                        and metadata.txn_last_update_timestamp_ms < expire_before
                    ):
                        dead = metadata.copy()
                        dead.transition(S.DEAD)
                        self.state.remove(dead)
                        removed += 1
            except KafkaError:
                continue
        if removed:
            log.info("expired transactional ids removed", count=removed)
        return removed

    # describe and list ----------------------------------------------------------------
    def describe(self, transactional_id: str) -> TransactionDescription:
        """The state of one transactional id; KafkaError(TRANSACTIONAL_ID_NOT_FOUND) when
        it has none, NOT_COORDINATOR when another broker coordinates it."""
        with self.state.locked(transactional_id) as metadata:
            if metadata is None:
                raise KafkaError(
                    ErrorCode.transactional_id_not_found, f"{transactional_id!r} has no state"
                )
            return _description(metadata)

    def list_transactions(
        self,
        states: Iterable[str] = (),
        producer_ids: Iterable[int] = (),
        min_duration_ms: int = -1,
    ) -> list[TransactionDescription]:
        """The transactions this broker coordinates, filtered as ListTransactions asks
        (empty filters match all; ``min_duration_ms``: open at least that long)."""
        wanted_states = set(states)
        wanted_ids = set(producer_ids)
        now = _now_ms()
        out = []
        for tid in self.state.owned_ids():
            try:
                with self.state.locked(tid) as metadata:
                    if metadata is None:
                        continue
                    if wanted_states and metadata.state.value not in wanted_states:
                        continue
                    if wanted_ids and metadata.producer_id not in wanted_ids:
                        continue
                    if min_duration_ms >= 0 and (
                        metadata.state is not S.ONGOING
                        or now - metadata.txn_start_timestamp_ms < min_duration_ms
                    ):
                        continue
                    out.append(_description(metadata))
            except KafkaError:
                continue
        return out


def _description(metadata: TransactionMetadata) -> TransactionDescription:
    return TransactionDescription(
        metadata.transactional_id,
        metadata.state,
        metadata.producer_id,
        metadata.producer_epoch,
        metadata.txn_timeout_ms,
        metadata.txn_start_timestamp_ms,
        tuple(sorted(metadata.partitions, key=lambda tp: (tp.topic, tp.partition))),
    )


@dataclass(frozen=True, slots=True)
class ProducerIdAndEpoch:
    """The producer id and epoch an InitProducerId names (KIP-360)."""

    producer_id: int
    epoch: int

    def __str__(self) -> str:
        return f"{self.producer_id}/{self.epoch}"


def _may_reinitialise(metadata: TransactionMetadata, expected: ProducerIdAndEpoch) -> bool:
    """Kafka's check of an expected producer id: the metadata was just created (epoch -1),
    the id is the current one (its epoch is checked by :func:`_next_epoch`), or it is the
    previous id and its epoch was exhausted (a retry after a producer id rotation)."""
    return (
        metadata.producer_epoch == NO_PRODUCER_EPOCH
        or expected.producer_id == metadata.producer_id
        or (
            expected.producer_id == metadata.last_producer_id
            and is_epoch_exhausted(expected.epoch)
        )
    )


def _next_epoch(
    metadata: TransactionMetadata, expected: ProducerIdAndEpoch | None
) -> tuple[int, int] | None:
    """(new epoch, last epoch) as Kafka's prepareIncrementProducerEpoch gives them; None when
    the expected epoch is neither the current nor the last one (PRODUCER_FENCED)."""
    bumped = metadata.producer_epoch + 1
    if expected is None:  # a fresh InitProducerId: bump, forget the last epoch
        return bumped, NO_PRODUCER_EPOCH
    if metadata.producer_epoch == NO_PRODUCER_EPOCH or expected.epoch == metadata.producer_epoch:
        return bumped, metadata.producer_epoch  # continuing after an error
    if expected.epoch == metadata.last_producer_epoch:
        return metadata.producer_epoch, metadata.last_producer_epoch  # a retry: no bump
    return None
