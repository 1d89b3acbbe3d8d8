"""The transactional producer's state: Kafka's TransactionManager (KIP-98, KIP-447) over the
idempotent producer's (:mod:`client.idempotence`).

``init_transactions`` finds the transaction coordinator (FindCoordinator, key type 1) and
asks it for the producer id and epoch of ``transactional.id`` (InitProducerId with
``transaction.timeout.ms``), which fences every earlier producer of that id and aborts its
open transaction. In a transaction each partition joins it with AddPartitionsToTxn before
its first batch goes out: the sender holds the batches of a partition until then, and sends
them marked transactional. ``send_offsets_to_transaction`` adds the group's offsets
partition (AddOffsetsToTxn) and writes the offsets to the group's coordinator with
TxnOffsetCommit (generation and member id from the group metadata, KIP-447); they count once
the transaction commits. Commit flushes, then EndTxn(commit); abort fails what was not sent
yet (:class:`~client.errors.TransactionAbortedError`), waits for what is in flight, then
EndTxn(abort).

Requests to a coordinator are one at a time. NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE and
a lost connection look the coordinator up again; COORDINATOR_LOAD_IN_PROGRESS and
CONCURRENT_TRANSACTIONS are retried after a backoff; each call gives up after
``max.block.ms`` (TimeoutError; commit and abort may be called again). PRODUCER_FENCED,
INVALID_PRODUCER_EPOCH, TRANSACTIONAL_ID_AUTHORIZATION_FAILED and unexpected answers are
fatal (:class:`~client.errors.FatalTransactionError`, raised by every later call); errors of
one transaction (a failed batch, an unauthorized topic or group, a stale group member) are
abortable (:class:`~client.errors.AbortableTransactionError` until ``abort_transaction``).
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import structlog

from kplane.client.errors import (
    AbortableTransactionError,
    FatalTransactionError,
    IllegalStateError,
    ProducerFencedError,
    TransactionAbortedError,
    TransactionalIdAuthorizationError,
)
from kplane.client.idempotence import IdempotenceManager, init_producer_id_request
from kplane.client.kafka_client import CoordinatorType, KafkaClient, NoBrokersAvailable
from kplane.client.producer_batch import ProducerBatch, TopicPartition
from kplane.client.producer_retry import ExponentialBackoff
from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode, KafkaError

log = structlog.get_logger(__name__)

DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000
DEFAULT_MAX_BLOCK_MS = 60_000
ADD_PARTITIONS_CLIENT_VERSION = 3  # AddPartitionsToTxn v4+ is the brokers' batched form


class TransactionState(enum.Enum):
    """Kafka's TransactionManager.State."""

    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


S = TransactionState

_FENCED = frozenset({ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch})
_RELOOKUP = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available})
_RETRY = frozenset({ErrorCode.coordinator_load_in_progress, ErrorCode.concurrent_transactions})
_GROUP_MEMBER_ERRORS = frozenset(
    {ErrorCode.unknown_member_id, ErrorCode.illegal_generation, ErrorCode.fenced_instance_id}
)


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """The consumer group whose offsets a transaction commits: with the generation and
    member id of the consumer that read the input, the group coordinator refuses offsets of
    a member that is no longer in the group (KIP-447); without them (-1, ""), only the group
    id counts."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class OffsetAndMetadata(NamedTuple):
    """An offset to commit: the next record to read, with optional metadata and the leader
    epoch of the last record read (-1: unknown)."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1


def _first_error(codes: Any) -> ErrorCode:
    """The first error among per-partition codes (OPERATION_NOT_ATTEMPTED only when no
    other error says why)."""
    found = ErrorCode.none
    for code in codes:
        if code is ErrorCode.operation_not_attempted:
            found = code
        elif code is not ErrorCode.none:
            return ErrorCode(code)
    return found


class TransactionManager(IdempotenceManager):
    """The transaction state of one ``transactional.id``: producer id and epoch, partitions
    in the transaction, the error that stopped it."""

    def __init__(
        self,
        client: KafkaClient,
        transactional_id: str,
        *,
        transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS,
        max_block_ms: int = DEFAULT_MAX_BLOCK_MS,
        backoff: ExponentialBackoff,
    ) -> None:
        super().__init__()
        if not transactional_id:
            raise ValueError("transactional.id must not be empty")
        if transaction_timeout_ms <= 0 or max_block_ms < 0:
            raise ValueError("transaction.timeout.ms or max.block.ms out of range")
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.max_block = max_block_ms / 1000.0
        self.state = S.UNINITIALIZED
        self.error: KafkaError | None = None  # AbortableTransactionError or a fatal one
        self.partitions: set[TopicPartition] = set()  # added at the coordinator
        self._pending: set[TopicPartition] = set()  # to add before their first batch
        self._started = False  # the coordinator knows this transaction
        self._client = client
        self._backoff = backoff
        self._coordinators: dict[tuple[CoordinatorType, str], int] = {}
        self._lock = asyncio.Lock()  # one coordinator request at a time

    # state ---------------------------------------------------------------------------------
    @property
    def is_fatal(self) -> bool:
        return self.state is S.FATAL_ERROR

    @property
    def is_aborting(self) -> bool:
        return self.state is S.ABORTING_TRANSACTION

    @property
    def has_open_transaction(self) -> bool:
        """Begun and neither committed nor aborted yet (nor fatally failed)."""
        return self.state in (S.IN_TRANSACTION, S.ABORTABLE_ERROR, S.ABORTING_TRANSACTION)

    @property
    def has_pending_partitions(self) -> bool:
        """Some partition has batches waiting for AddPartitionsToTxn."""
        return bool(self._pending)

    def may_send(self, tp: TopicPartition) -> bool:
        """The batches of ``tp`` may go out: it is in the transaction."""
        return tp in self.partitions

    def _raise_if_fatal(self) -> None:
        if self.state is S.FATAL_ERROR:
            assert self.error is not None
            raise self.error

    def _raise_if_error(self) -> None:
        if self.error is not None:
            raise self.error

    def _require(self, what: str, *states: TransactionState) -> None:
        """IllegalStateError unless the state is one of ``states`` (errors first)."""
        self._raise_if_error()
        if self.state in states:
            return
        reason = {
            S.UNINITIALIZED: "init_transactions() has not been called",
            S.INITIALIZING: "init_transactions() has not completed",
            S.READY: "no transaction is open: call begin_transaction() first",
            S.IN_TRANSACTION: "a transaction is open already",
            S.COMMITTING_TRANSACTION: "the transaction is being committed",
            S.ABORTING_TRANSACTION: "the transaction is being aborted",
        }.get(self.state, self.state.value)
        raise IllegalStateError(f"cannot {what}: {reason} (state {self.state.value})")

    def _fatal(self, error: BaseException) -> FatalTransactionError:
        """Enter FATAL_ERROR with ``error`` as Kafka names it; returns what to raise."""
        if isinstance(error, FatalTransactionError):
            fatal = error
        else:
            code = error.code if isinstance(error, KafkaError) else ErrorCode.unknown_server_error
            message = (
                f"transactional producer {self.transactional_id!r}: {type(error).__name__}: {error}"
            )
            if code in _FENCED:
                fatal = ProducerFencedError(
                    code,
                    f"producer {self.producer_id} epoch {self.producer_epoch} of "
                    f"{self.transactional_id!r} was fenced by a newer producer of the same "
                    f"transactional.id ({code.name})",
                )
            elif code is ErrorCode.transactional_id_authorization_failed:
                fatal = TransactionalIdAuthorizationError(code, message)
            else:
                fatal = FatalTransactionError(code, message)
            fatal.__cause__ = error
        if self.state is not S.FATAL_ERROR:
            log.warning(
                "transactional producer failed",
                transactional_id=self.transactional_id,
                error=str(fatal),
            )
            self.state = S.FATAL_ERROR
            self.error = fatal
        return fatal

    def abortable(self, error: BaseException) -> KafkaError:
        """The transaction must be aborted (unless it is already, or the producer failed
        fatally); returns what to raise."""
        if isinstance(error, KafkaError) and error.code in _FENCED | {
            ErrorCode.transactional_id_authorization_failed
        }:
            return self._fatal(error)
        if self.state is S.FATAL_ERROR:
            assert self.error is not None
            return self.error
        if self.state is S.ABORTING_TRANSACTION:
            return TransactionAbortedError()
        wrapped = (
            error
            if isinstance(error, AbortableTransactionError)
            else AbortableTransactionError(error)
        )
        if self.state is not S.ABORTABLE_ERROR:
            log.info(
                "transaction must be aborted",
                transactional_id=self.transactional_id,
                error=str(error),
            )
            self.state = S.ABORTABLE_ERROR
            self.error = wrapped
        return self.error or wrapped

    def handle_failed_batch(self, batch: ProducerBatch, error: BaseException) -> BaseException:
        """A batch of the transaction failed: the transaction can only be aborted, or, for
        fencing errors, the producer is fenced (its records then fail with
        ProducerFencedError)."""
        super().handle_failed_batch(batch, error)
        if isinstance(
            error, TransactionAbortedError | AbortableTransactionError | FatalTransactionError
        ):
            return error
        raised = self.abortable(error)
        return raised if isinstance(raised, FatalTransactionError) else error

    # the calls -----------------------------------------------------------------------------
    async def init_transactions(self) -> None:
        """Get the producer id and epoch, fencing earlier producers of the id."""
        self._raise_if_fatal()
        if self.state not in (S.UNINITIALIZED, S.INITIALIZING):
            raise IllegalStateError("init_transactions() was called already")
        self.state = S.INITIALIZING
        async with self._lock:
            await self._init_producer_id(-1, -1)
        self.state = S.READY

    def begin_transaction(self) -> None:
        self._require("begin a transaction", S.READY)
        self.state = S.IN_TRANSACTION

    def maybe_add_partition(self, tp: TopicPartition) -> None:
        """A record of ``tp`` is about to be appended: raise when sends are not allowed now;
        remember ``tp`` for AddPartitionsToTxn when it is new to the transaction."""
        self._require("send", S.IN_TRANSACTION)
        if tp not in self.partitions:
            self._pending.add(tp)

    def check_send(self) -> None:
        """Raise unless a record may be sent now."""
        self._require("send", S.IN_TRANSACTION)

    async def add_partitions(self) -> None:
        """AddPartitionsToTxn for the partitions waiting for it (the sender's step before
        their batches). A failure leaves the transaction abortable or the producer fenced."""
        async with self._lock:
            wanted = sorted(self._pending - self.partitions)
            self._pending.clear()
            if not wanted or self.error is not None or self.state is S.ABORTING_TRANSACTION:
                return
            by_topic: dict[str, list[int]] = {}
            for topic, partition in wanted:
                by_topic.setdefault(topic, []).append(partition)

            def build(version: int) -> Any:
                module = api.request_module(ApiKey.ADD_PARTITIONS_TO_TXN, version)
                return api.make(
                    api.request_class(ApiKey.ADD_PARTITIONS_TO_TXN, version),
                    v3_and_below_transactional_id=self.transactional_id,
                    v3_and_below_producer_id=self.producer_id,
                    v3_and_below_producer_epoch=self.producer_epoch,
                    v3_and_below_topics=tuple(
                        api.make(module.AddPartitionsToTxnTopic, name=t, partitions=tuple(ps))
                        for t, ps in by_topic.items()
                    ),
                )

            def errors(response: Any) -> ErrorCode:
                return _first_error(
                    p.partition_error_code
                    for t in response.results_by_topic_v3_and_below
                    for p in t.results_by_partition
                )

            try:
                await self._call(
                    "AddPartitionsToTxn",
                    (CoordinatorType.TRANSACTION, self.transactional_id),
                    ApiKey.ADD_PARTITIONS_TO_TXN,
                    build,
                    errors,
                    retry=_RETRY | {ErrorCode.unknown_topic_or_partition},
                    abortable=frozenset(
                        {ErrorCode.topic_authorization_failed, ErrorCode.operation_not_attempted}
                    ),
                    max_version=ADD_PARTITIONS_CLIENT_VERSION,
                )
            except KafkaError:
                return  # the state says what happened
            except (TimeoutError, ConnectionError) as exc:
                self.abortable(exc)
                return
            self.partitions.update(wanted)
            self._started = True
            log.debug(
                "partitions added to the transaction",
                transactional_id=self.transactional_id,
                partitions=[f"{t}-{p}" for t, p in wanted],
            )

    async def send_offsets(
        self,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
        group: str | ConsumerGroupMetadata,
    ) -> None:
        """AddOffsetsToTxn, then TxnOffsetCommit to the group's coordinator."""
        self._require("send offsets to the transaction", S.IN_TRANSACTION)
        if isinstance(group, str):
            group = ConsumerGroupMetadata(group)
        commits = {
            (str(t), int(p)): o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(int(o))
            for (t, p), o in offsets.items()
        }
        if not commits:
            return
        async with self._lock:
            self._raise_if_error()
            try:
                await self._add_offsets(group.group_id)
                self._started = True
                await self._txn_offset_commit(group, commits)
            except (TimeoutError, ConnectionError) as exc:
                raise self.abortable(exc) from exc

    async def _add_offsets(self, group_id: str) -> None:
        def build(version: int) -> Any:
            return api.make(
                api.request_class(ApiKey.ADD_OFFSETS_TO_TXN, version),
                transactional_id=self.transactional_id,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                group_id=group_id,
            )

        await self._call(
            "AddOffsetsToTxn",
            (CoordinatorType.TRANSACTION, self.transactional_id),
            ApiKey.ADD_OFFSETS_TO_TXN,
            build,
            lambda response: ErrorCode(response.error_code),
            abortable=frozenset({ErrorCode.group_authorization_failed}),
        )

    async def _txn_offset_commit(
        self, group: ConsumerGroupMetadata, commits: Mapping[TopicPartition, OffsetAndMetadata]
    ) -> None:
        by_topic: dict[str, list[tuple[int, OffsetAndMetadata]]] = {}
        for (topic, partition), commit in sorted(commits.items()):
            by_topic.setdefault(topic, []).append((partition, commit))

        def build(version: int) -> Any:
            module = api.request_module(ApiKey.TXN_OFFSET_COMMIT, version)
            return api.make(
                api.request_class(ApiKey.TXN_OFFSET_COMMIT, version),
                transactional_id=self.transactional_id,
                group_id=group.group_id,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                generation_id=group.generation_id,
                member_id=group.member_id,
                group_instance_id=group.group_instance_id,
                topics=tuple(
                    api.make(
                        module.TxnOffsetCommitRequestTopic,
                        name=topic,
                        partitions=tuple(
                            api.make(
                                module.TxnOffsetCommitRequestPartition,
                                partition_index=p,
                                committed_offset=c.offset,
                                committed_leader_epoch=c.leader_epoch,
                                committed_metadata=c.metadata,
                            )
                            for p, c in parts
                        ),
                    )
                    for topic, parts in by_topic.items()
                ),
            )

        def errors(response: Any) -> ErrorCode:
            return _first_error(p.error_code for t in response.topics for p in t.partitions)

        await self._call(
            "TxnOffsetCommit",
            (CoordinatorType.GROUP, group.group_id),
            ApiKey.TXN_OFFSET_COMMIT,
            build,
            errors,
            retry=_RETRY | {ErrorCode.unknown_topic_or_partition, ErrorCode.request_timed_out},
            abortable=_GROUP_MEMBER_ERRORS | {ErrorCode.group_authorization_failed},
        )

    def begin_commit(self) -> None:
        """Commit starts (or resumes after a timeout): no more sends."""
        self._require("commit the transaction", S.IN_TRANSACTION, S.COMMITTING_TRANSACTION)
        self.state = S.COMMITTING_TRANSACTION

    def begin_abort(self) -> None:
        """Abort starts (or resumes after a timeout): no more sends, the abortable error is
        forgotten."""
        self._raise_if_fatal()
        if self.state not in (S.IN_TRANSACTION, S.ABORTABLE_ERROR, S.ABORTING_TRANSACTION):
            self._require("abort the transaction")
        self.state = S.ABORTING_TRANSACTION
        self.error = None
        self._pending.clear()

    async def end_transaction(self, commit: bool) -> None:
        """EndTxn when the coordinator knows the transaction; after an abort whose batches
        left a sequence gap, a new epoch (InitProducerId with the current one, KIP-360)."""
        what = "commit" if commit else "abort"
        async with self._lock:
            if commit:
                # a batch may have failed while flushing
                self._require("commit the transaction", S.COMMITTING_TRANSACTION)
            else:
                self._require("abort the transaction", S.ABORTING_TRANSACTION)
            if self._started:

                def build(version: int) -> Any:
                    return api.make(
                        api.request_class(ApiKey.END_TXN, version),
                        transactional_id=self.transactional_id,
                        producer_id=self.producer_id,
                        producer_epoch=self.producer_epoch,
                        committed=commit,
                    )

                await self._call(
                    f"EndTxn({what})",
                    (CoordinatorType.TRANSACTION, self.transactional_id),
                    ApiKey.END_TXN,
                    build,
                    lambda response: ErrorCode(response.error_code),
                )
            if not commit and self.needs_new_producer_id:
                await self._init_producer_id(self.producer_id, self.producer_epoch)
            self.state = S.READY
            self.partitions.clear()
            self._pending.clear()
            self._started = False
            log.debug(f"transaction {what}ted", transactional_id=self.transactional_id)

    # requests ------------------------------------------------------------------------------
    async def _init_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        response = await self._call(
            "InitProducerId",
            (CoordinatorType.TRANSACTION, self.transactional_id),
            ApiKey.INIT_PRODUCER_ID,
            init_producer_id_request(
                self.transactional_id, self.transaction_timeout_ms, producer_id, producer_epoch
            ),
            lambda response: ErrorCode(response.error_code),
        )
        self.set_producer_id(response)
        log.info(
            "transactional producer initialised",
            transactional_id=self.transactional_id,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
        )

    async def _coordinator(self, key: tuple[CoordinatorType, str]) -> int:
        node = self._coordinators.get(key)
        if node is None:
            node = self._coordinators[key] = await self._client.find_coordinator(*key)
        return node

    async def _call(
        self,
        what: str,
        coordinator: tuple[CoordinatorType, str],
        api_key: int,
        build: Callable[[int], Any],
        errors: Callable[[Any], ErrorCode],
        *,
        retry: frozenset[ErrorCode] = _RETRY,
        abortable: frozenset[ErrorCode] = frozenset(),
        max_version: int | None = None,
    ) -> Any:
        """Send to the coordinator of ``coordinator`` until answered without error, looking
        it up again and backing off as its answers say, for at most ``max.block.ms``; a
        fatal answer enters FATAL_ERROR and raises, an ``abortable`` one enters
        ABORTABLE_ERROR and raises; TimeoutError when time runs out."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.max_block
        attempt = 0
        while True:
            error: BaseException
            try:
                node = await self._coordinator(coordinator)
                response = await self._client.request(node, api_key, build, max_version=max_version)
            except NoBrokersAvailable:
                raise
            except KafkaError as exc:  # FindCoordinator's answer
                code = exc.code
                if code in _RELOOKUP or code in retry or code.retriable:
                    error = exc
                elif code in abortable or code is ErrorCode.group_authorization_failed:
                    raise self.abortable(exc) from None
                else:
                    raise self._fatal(exc) from None
            except (ConnectionError, TimeoutError) as exc:
                self._coordinators.pop(coordinator, None)
                error = exc
            else:
                code = errors(response)
                if code is ErrorCode.none:
                    return response
                error = KafkaError(code, f"{what} for {self.transactional_id!r}: {code.name}")
                if code in _RELOOKUP:
                    self._coordinators.pop(coordinator, None)
                elif code not in retry:
                    if code in abortable:
                        raise self.abortable(error)
                    raise self._fatal(error)
            attempt += 1
            delay = self._backoff.backoff(attempt)
            if loop.time() + delay > deadline:
                raise TimeoutError(
                    f"{what} for {self.transactional_id!r} did not complete within "
                    f"max.block.ms ({round(self.max_block * 1000)} ms): {error}"
                ) from error
            log.debug(
                "transactional request retried",
                request=what,
                transactional_id=self.transactional_id,
                error=str(error),
            )
            await asyncio.sleep(delay)


__all__ = (
    "ConsumerGroupMetadata",
    "OffsetAndMetadata",
    "TransactionManager",
    "TransactionState",
)
