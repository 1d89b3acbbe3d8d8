"""Producer: Kafka's KafkaProducer on kplane's asyncio client.

``send()`` picks the record's partition (:mod:`client.partitioner`) and appends it to
the open batch of that partition (:mod:`client.record_accumulator`), returning a
future; the sender task (:mod:`client.sender`) delivers the batches, with
``enable.idempotence`` under a producer id and per-partition sequences
(:mod:`client.idempotence`); retriable errors and backoff are
:mod:`client.producer_retry`'s. With ``transactional.id`` the producer is transactional
(:mod:`client.transaction_manager`): ``init_transactions``, ``begin_transaction``,
``send_offsets_to_transaction``, ``commit_transaction`` and ``abort_transaction``, named as
Kafka's Java producer names them. This module is the facade: configuration, topic metadata
lookups, ``send``, ``flush``, the transactional calls and ``close``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import structlog

from kplane.client.errors import (
    AbortableTransactionError,
    FatalTransactionError,
    IllegalStateError,
    ProducerFencedError,
    TransactionAbortedError,
    TransactionalIdAuthorizationError,
)
from kplane.client.idempotence import IdempotenceManager
from kplane.client.kafka_client import KafkaClient, NoBrokersAvailable, PartitionMetadata
from kplane.client.partitioner import BuiltInPartitioner, default_partition, murmur2
from kplane.client.producer_batch import RecordMetadata
from kplane.client.producer_retry import RETRIABLE_ERRORS, ExponentialBackoff
from kplane.client.record_accumulator import RecordAccumulator
from kplane.client.sender import Sender
from kplane.client.settings import PRODUCER_SETTINGS, read_settings
from kplane.client.transaction_manager import (
    DEFAULT_MAX_BLOCK_MS,
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    ConsumerGroupMetadata,
    OffsetAndMetadata,
    TransactionManager,
)
from kplane.protocol.errors import ErrorCode, KafkaError
from kplane.protocol.records import BATCH_HEADER_SIZE

__all__ = (
    "AbortableTransactionError",
    "ConsumerGroupMetadata",
    "FatalTransactionError",
    "IllegalStateError",
    "OffsetAndMetadata",
    "Producer",
    "ProducerFencedError",
    "RecordMetadata",
    "TransactionAbortedError",
    "TransactionalIdAuthorizationError",
    "default_partition",
    "murmur2",
)

log = structlog.get_logger(__name__)

DEFAULT_DELIVERY_TIMEOUT_MS = 120_000
DEFAULT_BUFFER_MEMORY = 33_554_432
MAX_IN_FLIGHT_IDEMPOTENT = 5


class Producer:
    """An asyncio Kafka producer on a shared :class:`KafkaClient`."""

    def __init__(
        self,
        client: KafkaClient,
        *,
        acks: int = -1,
        linger_ms: float = 5,
        batch_size: int = 1_048_576,
        enable_idempotence: bool | None = None,
        retries: int = 5,
        retry_backoff_ms: int = 100,
        max_in_flight: int = 5,
        delivery_timeout_ms: int = DEFAULT_DELIVERY_TIMEOUT_MS,
        buffer_memory: int = DEFAULT_BUFFER_MEMORY,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS,
        max_block_ms: int = DEFAULT_MAX_BLOCK_MS,
        compression: int = 0,
    ) -> None:
        if transactional_id is not None:
            if enable_idempotence is False:
                raise ValueError("a transactional producer needs enable.idempotence=true")
            enable_idempotence = True
        enable_idempotence = bool(enable_idempotence)
        if acks not in (-1, 0, 1):
            raise ValueError(f"acks must be -1 (all), 0 or 1, not {acks}")
        if linger_ms < 0 or batch_size <= BATCH_HEADER_SIZE or retries < 0 or max_in_flight < 1:
            raise ValueError("linger.ms, batch.size, retries or max.in.flight out of range")
        if enable_idempotence:
            if acks != -1:
                raise ValueError("the idempotent producer needs acks=all")
            if max_in_flight > MAX_IN_FLIGHT_IDEMPOTENT:
                raise ValueError(
                    "the idempotent producer needs max.in.flight.requests.per.connection <= 5"
                )
            if retries < 1:
                raise ValueError("the idempotent producer needs retries > 0")
        self._client = client
        self._acks = acks
        self._linger = linger_ms / 1000.0
        self._batch_size = batch_size
        self._idempotent = enable_idempotence
        self._retries = retries
        self._max_in_flight = max_in_flight
        self._backoff = ExponentialBackoff(retry_backoff_ms)
        self._transactions = (
            TransactionManager(
                client,
                transactional_id,
                transaction_timeout_ms=transaction_timeout_ms,
                max_block_ms=max_block_ms,
                backoff=self._backoff,
            )
            if transactional_id is not None
            else None
        )
        idempotence = self._transactions or (IdempotenceManager() if enable_idempotence else None)
        self._partitioner = BuiltInPartitioner()
        self._accumulator = RecordAccumulator(
            self._partitioner,
            batch_size=batch_size,
            linger=self._linger,
            buffer_memory=buffer_memory,
        )
        self._sender = Sender(
            client,
            self._accumulator,
            idempotence,
            self._backoff,
            acks=acks,
            retries=retries,
            max_in_flight=max_in_flight,
            delivery_timeout_ms=delivery_timeout_ms,
            compression=compression,
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._topics: set[str] = set()
        self._topic_lookups: dict[str, asyncio.Task[Mapping[int, PartitionMetadata]]] = {}

    @classmethod
    def from_config(cls, client: KafkaClient) -> Producer:
        """A producer configured from the Kafka producer keys in ``client.config.extra``:
        acks, linger.ms, batch.size, enable.idempotence, retries, retry.backoff.ms,
        max.in.flight.requests.per.connection, delivery.timeout.ms, buffer.memory,
        transactional.id, transaction.timeout.ms, max.block.ms."""
        return cls(client, **read_settings(client.config.extra, PRODUCER_SETTINGS))

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # public API ------------------------------------------------------------------------------
    async def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes | None]] = (),
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Append a record; the future resolves when it is acknowledged (acks=0: once it is
        written, with offset -1) or fails with the error that stopped it. A transactional
        producer sends only inside a transaction (IllegalStateError otherwise; the
        transaction's error once it must be aborted or the producer is fenced)."""
        if self._sender.closing:
            raise RuntimeError("cannot send: the producer is closed")
        transactions = self._transactions
        if transactions is not None:
            transactions.check_send()
        loop = self._loop or self._start()
        future: asyncio.Future[RecordMetadata] = loop.create_future()
        parts: Mapping[int, PartitionMetadata] | None = self._client.cluster.topics.get(topic)
        if parts is None or (partition is not None and partition not in parts):
            try:
                parts = await self._wait_for_partitions(topic, partition)
            except Exception as exc:
                if transactions is not None and isinstance(exc, KafkaError):
                    transactions.abortable(exc)  # a record of the transaction is lost
                future.set_exception(exc)
                return future
        if self._accumulator.buffer_full:
            await self._accumulator.wait_for_space(self._sender.wakeup)
            parts = self._client.cluster.topics.get(topic) or parts
        if self._sender.closed:  # closed while this send waited: the sender is gone
            future.set_exception(RuntimeError("the producer was closed"))
            return future
        if partition is None:
            partition = self._partitioner.partition(topic, key, parts)
        if timestamp_ms is None:
            timestamp_ms = time.time_ns() // 1_000_000
        if transactions is not None:  # the state may have changed while this send waited
            transactions.maybe_add_partition((topic, partition))
        appended = self._accumulator.append(
            topic, partition, key, value, headers, timestamp_ms, future, loop
        )
        if appended.new_batch:
            if topic not in self._topics:  # every metadata refresh must cover it
                self._topics.add(topic)
                self._client.want_topics([topic])
            if self._client.metadata_stale:
                self._sender.request_refresh()
        if appended.new_batch or appended.batch_is_full:
            self._sender.wakeup()
        if appended.batch_is_full:
            await asyncio.sleep(0)  # let the sender take the full batch
        return future

    async def send_and_wait(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes | None]] = (),
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> RecordMetadata:
        """Send one record and wait for its acknowledgement."""
        future = await self.send(topic, value, key, headers, partition, timestamp_ms)
        return await future

    async def flush(self) -> None:
        """Send every record appended so far at once and wait until each is acknowledged or
        has failed (the failures stay in their futures)."""
        await self._accumulator.flush(self._sender.wakeup)

    async def close(self) -> None:
        """Flush, then stop the sender. The client stays open (it is shared). An open
        transaction is aborted first, as Kafka's producer does."""
        if self._sender.closed:
            return
        self._sender.initiate_close()
        transactions = self._transactions
        if transactions is not None and transactions.has_open_transaction:
            log.info(
                "aborting the open transaction: the producer is closing",
                transactional_id=transactions.transactional_id,
            )
            try:
                await self.abort_transaction()
            except Exception as exc:
                log.warning(
                    "the open transaction was not aborted",
                    transactional_id=transactions.transactional_id,
                    error=repr(exc),
                )
        try:
            await self.flush()
        finally:
            await self._sender.close()
            for task in self._topic_lookups.values():
                if not task.done():
                    task.cancel()
            if self._accumulator.incomplete:  # only when close itself was interrupted
                self._sender.fail_all(RuntimeError("the producer was closed"))

    # transactions ----------------------------------------------------------------------------
    def _transactional(self) -> TransactionManager:
        if self._transactions is None:
            raise IllegalStateError(
                "transactional calls need a transactional producer: set transactional.id"
            )
        return self._transactions

    async def init_transactions(self) -> None:
        """Register ``transactional.id`` with its transaction coordinator, once, before any
        other transactional call: this fences every earlier producer of the id and completes
        (aborts) a transaction it left open."""
        await self._transactional().init_transactions()

    def begin_transaction(self) -> None:
        """Open a transaction: records sent from now until commit or abort belong to it.
        (No request: partitions join the transaction as records are sent to them.)"""
        self._transactional().begin_transaction()

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[tuple[str, int], int | OffsetAndMetadata],
        group_metadata_or_group_id: ConsumerGroupMetadata | str,
    ) -> None:
        """Commit ``offsets`` ({(topic, partition): next offset to read}) for the consumer
        group as part of the transaction: they take effect only if it commits. Pass the
        consuming member's :class:`ConsumerGroupMetadata` (generation and member id, KIP-447)
        so offsets of a member that left the group are refused, or just the group id."""
        await self._transactional().send_offsets(offsets, group_metadata_or_group_id)

    async def commit_transaction(self) -> None:
        """Send every record of the transaction, then commit it (EndTxn). Raises
        AbortableTransactionError when a record or the offsets failed: abort then. May be
        called again after a TimeoutError."""
        transactions = self._transactional()
        transactions.begin_commit()
        await self.flush()
        await transactions.end_transaction(commit=True)

    async def abort_transaction(self) -> None:
        """Abort the transaction: records not sent yet fail with TransactionAbortedError,
        those in flight are awaited, then the coordinator aborts it (EndTxn). May be called
        again after a TimeoutError."""
        transactions = self._transactional()
        transactions.begin_abort()
        if self._loop is not None:
            self._sender.abort_undrained()
            await self._accumulator.flush(self._sender.wakeup)
        await transactions.end_transaction(commit=False)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Producer]:
        """``async with producer.transaction():`` begins a transaction, commits it when the
        block ends, and aborts it when the block raises."""
        self.begin_transaction()
        try:
            yield self
        except BaseException:
            transactions = self._transactional()
            if not transactions.is_fatal:
                await self.abort_transaction()
            raise
        await self.commit_transaction()

    def _start(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._sender.start(loop)
        return loop

    # metadata --------------------------------------------------------------------------------
    async def _wait_for_partitions(
        self, topic: str, partition: int | None
    ) -> Mapping[int, PartitionMetadata]:
        """The partitions of ``topic`` (and ``partition`` among them), refreshing metadata
        up to ``retries`` times with backoff; KafkaError when they do not appear."""
        parts: Mapping[int, PartitionMetadata] | None = self._client.cluster.topics.get(topic)
        if parts is None:
            lookup = self._topic_lookups.get(topic)
            if lookup is None:
                lookup = asyncio.ensure_future(self._lookup_topic(topic))
                self._topic_lookups[topic] = lookup
                lookup.add_done_callback(self._lookup_done(topic))
            try:
                parts = await asyncio.shield(lookup)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if lookup.cancelled() and task is not None and not task.cancelling():
                    raise RuntimeError("the producer was closed") from None
                raise
        attempt = 0
        while partition is not None and partition not in parts:
            if attempt >= self._retries:
                raise KafkaError(
                    ErrorCode.unknown_topic_or_partition,
                    f"partition {partition} of topic {topic!r} is not in the metadata "
                    f"({len(parts)} partitions)",
                )
            attempt += 1
            await asyncio.sleep(self._backoff.backoff(attempt))
            await self._client.refresh_metadata([topic])
            parts = self._client.cluster.topics.get(topic) or parts
        return parts

    def _lookup_done(self, topic: str) -> Callable[[asyncio.Task[Any]], None]:
        def done(task: asyncio.Task[Any]) -> None:
            if self._topic_lookups.get(topic) is task:
                del self._topic_lookups[topic]
            if not task.cancelled():
                task.exception()  # retrieved: the waiters get it

        return done

    async def _lookup_topic(self, topic: str) -> Mapping[int, PartitionMetadata]:
        attempt = 0
        while True:
            try:
                await self._client.refresh_metadata([topic])
            except NoBrokersAvailable:
                raise
            except (ConnectionError, TimeoutError) as exc:
                if attempt >= self._retries:
                    raise
                log.debug("metadata request failed", topic=topic, error=repr(exc))
            else:
                parts = self._client.cluster.topics.get(topic)
                if parts:
                    self._client.want_topics([topic])
                    return parts
                code = self._client.cluster.topic_errors.get(
                    topic, ErrorCode.unknown_topic_or_partition
                )
                if code not in RETRIABLE_ERRORS or attempt >= self._retries:
                    raise KafkaError(
                        code,
                        f"topic {topic!r} is not in the cluster metadata: {code.name}"
                        + (f" after {attempt + 1} attempts" if attempt else ""),
                    )
            attempt += 1
            await asyncio.sleep(self._backoff.backoff(attempt))
