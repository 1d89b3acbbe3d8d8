"""Sender: the producer's task that delivers the accumulated batches.

It drains the batches that are ready — full, older than ``linger.ms``, due for a retry, or
wanted by ``flush()`` — groups them by partition leader and sends one Produce per leader
carrying at most one batch per partition, with up to ``max.in.flight.requests.per.connection``
Produce requests in flight per broker. Each batch is encoded once, by
:func:`protocol.records.build_batch`, when the sender takes it; a retry resends the same
bytes.

Retriable errors refresh the metadata and retry the batch after a backoff, up to ``retries``
times; then, as at once for any other error, the batch's futures fail with
:class:`~protocol.errors.KafkaError`. A batch not sent within ``delivery.timeout.ms`` expires.
An error of the client's metadata layer
(:class:`~client.kafka_client.NoBrokersAvailable`) fails every queued future with that
error. When idempotent, retries go out in sequence order, behind any earlier batch of the
partition still unanswered.

When transactional (:mod:`client.transaction_manager`), a partition's batches wait until
AddPartitionsToTxn added it to the transaction (sent here, before draining, as Kafka's
sender does), go out marked transactional, and fail at once once the transaction must be
aborted or is being aborted.
"""

from __future__ import annotations

import asyncio
import datetime
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

import structlog

from kplane.client.errors import TransactionAbortedError
from kplane.client.idempotence import IdempotenceManager, seq_before
from kplane.client.kafka_client import KafkaClient, NoBrokersAvailable
from kplane.client.producer_batch import ProducerBatch, TopicPartition
from kplane.client.producer_retry import RETRIABLE_ERRORS, ExponentialBackoff
from kplane.client.record_accumulator import RecordAccumulator
from kplane.client.transaction_manager import TransactionManager
from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode, KafkaError
from kplane.protocol.records import build_batch

log = structlog.get_logger(__name__)

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_MILLISECOND = datetime.timedelta(milliseconds=1)
_NO_TOPIC_ID = uuid.UUID(int=0)


def _append_ms(value: datetime.datetime | None) -> int | None:
    if value is None:
        return None
    return (value - _EPOCH) // _MILLISECOND


class Sender:
    """Drains the accumulator to the partition leaders and completes the batches
    (``idempotence`` is None unless ``enable.idempotence``; a TransactionManager when
    transactional)."""

    def __init__(
        self,
        client: KafkaClient,
        accumulator: RecordAccumulator,
        idempotence: IdempotenceManager | None,
        backoff: ExponentialBackoff,
        *,
        acks: int,
        retries: int,
        max_in_flight: int,
        delivery_timeout_ms: int,
        compression: int = 0,
    ) -> None:
        self._client = client
        self._compression = compression
        self._accumulator = accumulator
        self._idempotence = idempotence
        self._transactions = idempotence if isinstance(idempotence, TransactionManager) else None
        self._transactional_id = (
            self._transactions.transactional_id if self._transactions is not None else None
        )
        self._backoff = backoff
        self._acks = acks
        self._retries = retries
        self._max_in_flight = max_in_flight
        self._delivery_timeout = delivery_timeout_ms / 1000.0
        self._timeout = datetime.timedelta(milliseconds=client.config.request_timeout_ms)

        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._order = 0
        # in flight
        self._inflight_node: dict[int, int] = {}
        self._inflight_tp: dict[TopicPartition, list[ProducerBatch]] = {}
        self._inflight_total = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        # metadata
        self._refresh_task: asyncio.Task[None] | None = None
        self._last_refresh = float("-inf")
        self._refresh_failures = 0
        self._topic_misses: dict[str, int] = {}
        # the loop
        self._waiter: asyncio.Future[None] | None = None
        self._woken = False
        self._closing = False
        self._closed = False

    # lifecycle -------------------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the sender task on ``loop``."""
        self._loop = loop
        self._task = loop.create_task(self._run(), name="kplane-producer-sender")

    @property
    def closing(self) -> bool:
        """``initiate_close()`` was called: no new record is accepted."""
        return self._closing

    @property
    def closed(self) -> bool:
        """``close()`` was called."""
        return self._closed

    def initiate_close(self) -> None:
        """Send every batch at once, without lingering."""
        self._closing = True

    async def close(self) -> None:
        """Stop once every batch is done, and wait for it."""
        self._closed = True
        self.wakeup()
        task = self._task
        if task is not None and not task.done():
            await asyncio.wait([task])
        if self._refresh_task is not None and not self._refresh_task.done():
            self._refresh_task.cancel()

    def wakeup(self) -> None:
        """Look at the batches again now."""
        self._woken = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _sleep(self, until: float | None) -> None:
        if self._woken:
            return
        assert self._loop is not None
        waiter = self._waiter = self._loop.create_future()
        handle = self._loop.call_at(until, self.wakeup) if until is not None else None
        try:
            await waiter
        finally:
            self._waiter = None
            if handle is not None:
                handle.cancel()

    # the loop --------------------------------------------------------------------------------
    async def _run(self) -> None:
        assert self._loop is not None
        loop = self._loop
        accumulator = self._accumulator
        idempotence = self._idempotence
        transactions = self._transactions
        try:
            while True:
                if self._closed and not accumulator.incomplete and not self._inflight_total:
                    return
                self._woken = False
                if transactions is not None and accumulator.has_undrained():
                    if transactions.error is not None:
                        self._fail_queued(transactions.error)
                        continue
                    if transactions.is_aborting:
                        self._fail_queued(TransactionAbortedError())
                        continue
                    if transactions.has_pending_partitions:
                        await transactions.add_partitions()
                        continue
                elif idempotence is not None and accumulator.has_undrained():
                    if idempotence.needs_new_producer_id:
                        if self._inflight_total:
                            await self._sleep(None)
                            continue
                        idempotence.reset_producer_id(accumulator.batches.values())
                    if not idempotence.has_producer_id:
                        try:
                            await idempotence.init_producer_id(
                                self._client, self._retries, self._backoff
                            )
                        except Exception as exc:
                            self._fail_queued(exc)
                        continue
                if self._client.metadata_stale and accumulator.has_undrained():
                    self.request_refresh()
                await self._sleep(self._drain(loop.time()))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug: fail everything rather than hang the futures
            log.exception("producer sender failed")
            self.fail_all(exc)

    def _may_send(self, tp: TopicPartition, batch: ProducerBatch) -> bool:
        # transactions: once the partition is in the transaction
        if self._transactions is not None and not self._transactions.may_send(tp):
            return False
        # idempotence: a retry goes out once everything before it was answered, in order
        return not (self._idempotence is not None and batch.attempts and self._inflight_tp.get(tp))

    def _drain(self, now: float) -> float | None:
        """Send the ready batches the in-flight limits allow; returns when to look again."""
        wake_at: float | None = None
        accumulator = self._accumulator
        force = accumulator.flush_in_progress or self._closing
        topics = self._client.cluster.topics
        by_leader: dict[int, list[tuple[TopicPartition, deque[ProducerBatch]]]] = {}
        need_metadata = False
        for tp, queue in accumulator.batches.items():
            if not queue:
                continue
            batch = queue[0]
            expires = batch.created + self._delivery_timeout
            if expires <= now:
                self._expire(tp, queue, now)
                if not queue:
                    continue
                batch = queue[0]
                expires = batch.created + self._delivery_timeout
            ready_at = accumulator.ready_at(batch, now, force)
            if ready_at > now:
                due = min(ready_at, expires)
                wake_at = due if wake_at is None else min(wake_at, due)
                continue
            wake_at = expires if wake_at is None else min(wake_at, expires)
            if not self._may_send(tp, batch):
                continue
            parts = topics.get(tp[0])
            meta = parts.get(tp[1]) if parts is not None else None
            if meta is None or meta.leader < 0:
                need_metadata = True
                continue
            by_leader.setdefault(meta.leader, []).append((tp, queue))
        if need_metadata:
            self.request_refresh()
        for leader, ready in by_leader.items():
            while ready and self._inflight_node.get(leader, 0) < self._max_in_flight:
                taken = [(tp, queue, queue.popleft()) for tp, queue in ready]
                for _, _, batch in taken:
                    self._prepare(batch)
                self._dispatch(leader, [batch for _, _, batch in taken])
                ready = [
                    (tp, queue)
                    for tp, queue, _ in taken
                    if queue
                    and accumulator.ready_at(queue[0], now, force) <= now
                    and self._may_send(tp, queue[0])
                ]
        return wake_at

    def _expire(self, tp: TopicPartition, queue: deque[ProducerBatch], now: float) -> None:
        while queue and queue[0].created + self._delivery_timeout <= now:
            batch = queue.popleft()
            waited = int((now - batch.created) * 1000)
            self._fail(
                batch,
                KafkaError(
                    ErrorCode.request_timed_out,
                    f"Expiring {len(batch.records)} record(s) for {tp[0]}-{tp[1]}: {waited} ms "
                    "has passed since batch creation",
                ),
            )

    def _prepare(self, batch: ProducerBatch) -> None:
        """Close ``batch`` and encode it once (a retry keeps its bytes and sequence)."""
        if batch.data is not None:
            return
        if not batch.closed:
            self._accumulator.close(batch)
        if batch.order < 0:
            batch.order = self._order
            self._order += 1
        idempotence = self._idempotence
        if idempotence is not None:
            sequence = idempotence.next_sequence((batch.topic, batch.partition), len(batch.records))
            batch.sequence = sequence
            batch.data = build_batch(
                batch.records,
                producer_id=idempotence.producer_id,
                producer_epoch=idempotence.producer_epoch,
                base_sequence=sequence,
                is_transactional=self._transactions is not None,
                compression=self._compression,
            )
        else:
            batch.data = build_batch(batch.records, compression=self._compression)

    # Produce ---------------------------------------------------------------------------------
    def _dispatch(self, node: int, batches: list[ProducerBatch]) -> None:
        assert self._loop is not None
        self._inflight_node[node] = self._inflight_node.get(node, 0) + 1
        self._inflight_total += 1
        for batch in batches:
            self._inflight_tp.setdefault((batch.topic, batch.partition), []).append(batch)
        task = self._loop.create_task(self._send_produce(node, batches))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _build_produce(
        self, batches: list[ProducerBatch]
    ) -> tuple[Callable[[int], Any], dict[Any, str]]:
        by_topic: dict[str, list[ProducerBatch]] = {}
        for batch in batches:
            by_topic.setdefault(batch.topic, []).append(batch)
        topic_ids = self._client.cluster.topic_ids
        id_names = {topic_ids[t]: t for t in by_topic if t in topic_ids}
        acks, timeout, transactional_id = self._acks, self._timeout, self._transactional_id

        def build(version: int) -> Any:
            module = api.request_module(ApiKey.PRODUCE, version)
            by_id = version >= 13
            return api.make(
                api.request_class(ApiKey.PRODUCE, version),
                transactional_id=transactional_id,
                acks=acks,
                timeout=timeout,
                topic_data=tuple(
                    api.make(
                        module.TopicProduceData,
                        name=topic,
                        # unknown id: the broker answers UNKNOWN_TOPIC_ID, a retriable error
                        topic_id=topic_ids.get(topic, _NO_TOPIC_ID) if by_id else None,
                        partition_data=tuple(
                            api.make(module.PartitionProduceData, index=b.partition, records=b.data)
                            for b in topic_batches
                        ),
                    )
                    for topic, topic_batches in by_topic.items()
                ),
            )

        return build, id_names

    async def _send_produce(self, node: int, batches: list[ProducerBatch]) -> None:
        build, id_names = self._build_produce(batches)
        response: Any = None
        error: BaseException | None = None
        try:
            if self._acks == 0:
                if node not in self._client.cluster.brokers:
                    await self._client.refresh_metadata()
                if node not in self._client.cluster.brokers:
                    raise NoBrokersAvailable(f"broker {node} is not in the cluster metadata")
                conn = await self._client.connection(node)
                conn.send_no_response(ApiKey.PRODUCE, build)
            else:
                response = await self._client.request(node, ApiKey.PRODUCE, build)
        except asyncio.CancelledError:
            error = KafkaError(ErrorCode.network_exception, "produce request cancelled")
            raise
        except Exception as exc:
            error = exc
        finally:
            self._inflight_node[node] -= 1
            self._inflight_total -= 1
            for batch in batches:
                inflight = self._inflight_tp[(batch.topic, batch.partition)]
                inflight.remove(batch)
            try:
                if error is not None:
                    self._request_failed(batches, error)
                elif response is None:
                    for batch in batches:
                        self._succeed(batch, -1, None)
                else:
                    self._handle_response(batches, response, id_names)
            finally:
                self.wakeup()

    def _request_failed(self, batches: list[ProducerBatch], error: BaseException) -> None:
        if isinstance(error, NoBrokersAvailable):
            for batch in batches:
                self._fail(batch, error)
            self._fail_queued(error)
        elif isinstance(error, ConnectionError | TimeoutError | OSError):
            code = (
                ErrorCode.request_timed_out
                if isinstance(error, TimeoutError)
                else ErrorCode.network_exception
            )
            retriable = KafkaError(code, f"{type(error).__name__}: {error}")
            for batch in batches:
                self._retry(batch, retriable)
        else:
            for batch in batches:
                self._fail(batch, error)

    def _handle_response(
        self, batches: list[ProducerBatch], response: Any, id_names: dict[Any, str]
    ) -> None:
        waiting = {(batch.topic, batch.partition): batch for batch in batches}
        idempotence = self._idempotence
        for topic_response in response.responses:
            name = getattr(topic_response, "name", None)
            if name is None:
                name = id_names.get(getattr(topic_response, "topic_id", None))
            for part in topic_response.partition_responses:
                batch = waiting.pop((name, int(part.index)), None)  # type: ignore[arg-type]
                if batch is None:
                    continue
                code = part.error_code
                if code is ErrorCode.none or code is ErrorCode.duplicate_sequence_number:
                    self._succeed(batch, int(part.base_offset), _append_ms(part.log_append_time))
                    continue
                error = KafkaError(code, part.error_message or code.name)
                if code in RETRIABLE_ERRORS or (
                    code is ErrorCode.out_of_order_sequence_number
                    and idempotence is not None
                    and (idempotence.needs_new_producer_id or self._earlier_unanswered(batch))
                ):
                    self._retry(batch, error)
                else:
                    self._fail(batch, error)
        for batch in waiting.values():
            self._retry(
                batch, KafkaError(ErrorCode.network_exception, "no answer for the partition")
            )

    def _earlier_unanswered(self, batch: ProducerBatch) -> bool:
        """A batch of the same partition with an earlier sequence awaits an answer or a retry."""
        sequence = batch.sequence
        if sequence is None:
            return False
        tp = (batch.topic, batch.partition)
        for others in (self._inflight_tp.get(tp, ()), self._accumulator.batches.get(tp, ())):
            for other in others:
                if other.sequence is not None and seq_before(other.sequence, sequence):
                    return True
        return False

    # completion ------------------------------------------------------------------------------
    def _succeed(self, batch: ProducerBatch, base_offset: int, append_time_ms: int | None) -> None:
        batch.complete(base_offset, append_time_ms)
        self._accumulator.deallocate(batch)

    def _fail(self, batch: ProducerBatch, error: BaseException) -> None:
        if self._idempotence is not None:
            error = self._idempotence.handle_failed_batch(batch, error)
        batch.fail(error)
        self._accumulator.deallocate(batch)

    def _fail_queued(self, error: BaseException) -> None:
        """Fail every batch not in flight."""
        for queue in self._accumulator.batches.values():
            while queue:
                self._fail(queue.popleft(), error)

    def abort_undrained(self) -> None:
        """Fail every batch not sent yet: its transaction is being aborted."""
        self._fail_queued(TransactionAbortedError())

    def fail_all(self, error: BaseException) -> None:
        """Fail every batch, in flight or not."""
        self._fail_queued(error)
        for batch in list(self._accumulator.incomplete):
            self._fail(batch, error)

    def _retry(self, batch: ProducerBatch, error: KafkaError) -> None:
        """Queue ``batch`` again (keeping its sequence), or fail it once retries are spent."""
        batch.attempts += 1
        if batch.attempts > self._retries:
            self._fail(batch, error)
            return
        assert self._loop is not None
        batch.retry_at = self._loop.time() + self._backoff.backoff(batch.attempts)
        self._accumulator.reenqueue(batch)
        log.debug(
            "retrying produce",
            topic=batch.topic,
            partition=batch.partition,
            attempt=batch.attempts,
            error=error.code.name,
            reason=error.message,
        )
        self.request_refresh()

    # metadata --------------------------------------------------------------------------------
    def request_refresh(self) -> None:
        """Refresh the metadata in the background (one refresh at a time, at most one per
        retry.backoff.ms)."""
        if self._refresh_task is None or self._refresh_task.done():
            self._refresh_task = asyncio.ensure_future(self._refresh())

    async def _refresh(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            delay = (
                self._last_refresh + self._backoff.backoff(self._refresh_failures + 1) - loop.time()
            )
            if delay > 0:
                await asyncio.sleep(delay)
            self._last_refresh = loop.time()
            try:
                await self._client.refresh_metadata()
            except NoBrokersAvailable as exc:
                self._refresh_failures = 0
                self._fail_queued(exc)
            except (ConnectionError, TimeoutError) as exc:
                self._refresh_failures += 1
                log.debug("metadata refresh failed", error=repr(exc))
                if self._refresh_failures > self._retries:
                    self._refresh_failures = 0
                    self._fail_queued(exc)
            except Exception as exc:
                log.warning("metadata refresh failed", error=repr(exc))
                self._fail_queued(exc)
            else:
                self._refresh_failures = 0
                self._check_missing_topics()
        finally:
            self.wakeup()

    def _check_missing_topics(self) -> None:
        """Fail the queued batches of a topic the metadata keeps answering with an error."""
        cluster = self._client.cluster
        batches = self._accumulator.batches
        topics = {tp[0] for tp, queue in batches.items() if queue}
        for topic in topics:
            if topic in cluster.topics:
                self._topic_misses.pop(topic, None)
                continue
            code = cluster.topic_errors.get(topic, ErrorCode.unknown_topic_or_partition)
            misses = self._topic_misses.get(topic, 0) + 1
            self._topic_misses[topic] = misses
            if code in RETRIABLE_ERRORS and misses <= self._retries:
                continue
            self._topic_misses.pop(topic, None)
            error = KafkaError(code, f"topic {topic!r} is not in the cluster metadata: {code.name}")
            for tp, queue in batches.items():
                if tp[0] == topic:
                    while queue:
                        self._fail(queue.popleft(), error)
