"""Producer: Kafka's producer on kplane's asyncio client.

``send()`` appends a record to the open batch of its partition (the record accumulator) and
returns a future. A sender task drains the batches that are ready — full, older than
``linger.ms``, due for a retry, or wanted by ``flush()`` — groups them by partition leader and
sends one Produce per leader carrying at most one batch per partition, with up to
``max.in.flight.requests.per.connection`` Produce requests in flight per broker. Each batch is
encoded once, by :func:`protocol.records.build_batch`, when the sender takes it; a retry
resends the same bytes.

Partitioning is Java's: a keyed record goes to ``toPositive(murmur2(key)) % partitions``; a
record without a key goes to the topic's sticky partition, which changes whenever the batch
it fills is full or sent.

Retriable errors (leadership moved, partition unknown, timeouts, too few replicas, a lost
connection) refresh the metadata and retry the batch after an exponential backoff, up to
``retries`` times; then, as at once for any other error, the batch's futures fail with
:class:`~protocol.errors.KafkaError`. An error of the client's metadata layer
(:class:`~broker.client.kafka_client.NoBrokersAvailable`) fails every queued future with that
error.

With ``enable.idempotence`` the sender gets a producer id (InitProducerId) before the first
Produce and numbers each partition's batches (``base_sequence``, wrapping at 2**31 - 1). A
retried batch keeps its sequence, so the broker drops it if it was appended already; retries
go out in sequence order, behind any earlier batch of the partition still unanswered. When a
batch that had a sequence fails for good, the producer takes a new producer id before sending
more, as Java's does (KIP-360), so the partition's sequence gap cannot block it.
"""

from __future__ import annotations

import asyncio
import datetime
import random
import struct
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import structlog

from broker.client.kafka_client import KafkaClient, NoBrokersAvailable, PartitionMetadata
from protocol import api
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, KafkaError
from protocol.records import BATCH_HEADER_SIZE, Record, build_batch

__all__ = ("Producer", "RecordMetadata", "default_partition", "murmur2")

log = structlog.get_logger(__name__)

INT32_MAX = 2**31 - 1
_SEQUENCE_MODULUS = INT32_MAX + 1
RETRY_BACKOFF_MAX_MS = 1_000  # Kafka's retry.backoff.max.ms default (KIP-580)
DEFAULT_DELIVERY_TIMEOUT_MS = 120_000
DEFAULT_BUFFER_MEMORY = 33_554_432
MAX_IN_FLIGHT_IDEMPOTENT = 5

# Upper bounds of a record's encoded framing: length, attributes, timestamp delta, offset
# delta, key length, value length and header count varints; plus the two length varints of
# each header. Sizes are estimated from these so a batch never exceeds batch.size.
_RECORD_OVERHEAD = 5 + 1 + 10 + 5 + 5 + 5 + 5
_HEADER_OVERHEAD = 5 + 5

# Errors after which a batch is retried (with a metadata refresh first).
RETRIABLE_ERRORS = frozenset(
    {
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.leader_not_available,
        ErrorCode.not_leader_or_follower,
        ErrorCode.request_timed_out,
        ErrorCode.replica_not_available,
        ErrorCode.network_exception,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.kafka_storage_error,
        ErrorCode.listener_not_found,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.unknown_topic_id,
        ErrorCode.inconsistent_topic_id,
        ErrorCode.throttling_quota_exceeded,
    }
)
# Errors of InitProducerId worth another try.
_INIT_RETRIABLE = RETRIABLE_ERRORS | {
    ErrorCode.coordinator_not_available,
    ErrorCode.not_coordinator,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.concurrent_transactions,
}
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_MILLISECOND = datetime.timedelta(milliseconds=1)
_NO_TOPIC_ID = uuid.UUID(int=0)

TopicPartition = tuple[str, int]


# partitioning --------------------------------------------------------------------------------
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF
_WORDS: dict[int, struct.Struct] = {}


def _murmur2_u32(data: bytes) -> int:
    length = len(data)
    h = 0x9747B28C ^ length
    words = length >> 2
    if words:
        unpack = _WORDS.get(words)
        if unpack is None:
            unpack = _WORDS[words] = struct.Struct(f"<{words}I")
        for k in unpack.unpack_from(data):
            k = (k * _M) & _MASK
            k ^= k >> 24
            h = ((h * _M) & _MASK) ^ ((k * _M) & _MASK)
    tail = length & 3
    if tail:
        base = length - tail
        if tail == 3:
            h ^= data[base + 2] << 16
        if tail >= 2:
            h ^= data[base + 1] << 8
        h = ((h ^ data[base]) * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    return h ^ (h >> 15)


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: the 32-bit MurmurHash2 (seed 0x9747b28c) as a Java int."""
    h = _murmur2_u32(data)
    return h - (1 << 32) if h & 0x80000000 else h


def default_partition(key: bytes, partitions: int) -> int:
    """The partition of ``key`` under Java's default partitioner:
    ``toPositive(murmur2(key)) % partitions``."""
    return (_murmur2_u32(key) & 0x7FFFFFFF) % partitions


# records and batches -------------------------------------------------------------------------
class RecordMetadata(NamedTuple):
    """Where a record landed: offset -1 when unknown (acks=0); ``timestamp`` is the record's
    CreateTime, or the broker's LogAppendTime when the topic uses it. (A NamedTuple: one is
    made per acknowledged record, and a tuple is the cheapest immutable record.)"""

    topic: str
    partition: int
    offset: int
    timestamp: int


class _Batch:
    """Records of one partition, sent together as one record batch."""

    __slots__ = (
        "attempts",
        "closed",
        "created",
        "data",
        "done",
        "futures",
        "order",
        "partition",
        "records",
        "retry_at",
        "sequence",
        "size",
        "topic",
    )

    def __init__(self, topic: str, partition: int, created: float, done: asyncio.Future[None]):
        self.topic = topic
        self.partition = partition
        self.created = created
        self.done = done
        self.records: list[Record] = []
        self.futures: list[asyncio.Future[RecordMetadata]] = []
        self.size = BATCH_HEADER_SIZE
        self.closed = False  # no more records: full, taken by the sender, or requeued
        self.data: bytes | None = None
        self.sequence: int | None = None
        self.order = -1  # when the sender first took it (retries keep their place)
        self.attempts = 0
        self.retry_at = 0.0


def _seq_before(a: int, b: int) -> bool:
    """Sequence ``a`` comes before ``b`` (sequences wrap at 2**31 - 1)."""
    return 0 < (b - a) % _SEQUENCE_MODULUS < _SEQUENCE_MODULUS // 2


def _as_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ValueError(f"not a boolean: {value!r}")


def _parse_acks(value: Any) -> int:
    text = str(value).strip().lower()
    if text == "all":
        return -1
    acks = int(text)
    if acks not in (-1, 0, 1):
        raise ValueError(f"acks: {value!r} is not one of all, -1, 0, 1")
    return acks


def _append_ms(value: datetime.datetime | None) -> int | None:
    if value is None:
        return None
    return (value - _EPOCH) // _MILLISECOND


# the producer --------------------------------------------------------------------------------
class Producer:
    """An asyncio Kafka producer on a shared :class:`KafkaClient`."""

    def __init__(
        self,
        client: KafkaClient,
        *,
        acks: int = -1,
        linger_ms: float = 5,
        batch_size: int = 1_048_576,
        enable_idempotence: bool = False,
        retries: int = 5,
        retry_backoff_ms: int = 100,
        max_in_flight: int = 5,
        delivery_timeout_ms: int = DEFAULT_DELIVERY_TIMEOUT_MS,
        buffer_memory: int = DEFAULT_BUFFER_MEMORY,
    ) -> None:
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
        self._retry_backoff = max(retry_backoff_ms, 0) / 1000.0
        self._retry_backoff_max = max(RETRY_BACKOFF_MAX_MS, retry_backoff_ms) / 1000.0
        self._max_in_flight = max_in_flight
        self._delivery_timeout = delivery_timeout_ms / 1000.0
        self._buffer_memory = buffer_memory
        self._timeout = datetime.timedelta(milliseconds=client.config.request_timeout_ms)

        self._loop: asyncio.AbstractEventLoop | None = None
        self._queues: dict[TopicPartition, deque[_Batch]] = {}
        self._incomplete: set[_Batch] = set()
        self._buffered = 0
        self._space: asyncio.Event | None = None
        self._topics: set[str] = set()
        self._sticky: dict[str, int] = {}
        self._sticky_prev: dict[str, int] = {}
        self._order = 0
        # in flight
        self._inflight_node: dict[int, int] = {}
        self._inflight_tp: dict[TopicPartition, list[_Batch]] = {}
        self._inflight_total = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        # idempotence
        self._producer_id = -1
        self._producer_epoch = -1
        self._next_sequence: dict[TopicPartition, int] = {}
        self._needs_new_producer_id = False
        # metadata
        self._topic_lookups: dict[str, asyncio.Task[Mapping[int, PartitionMetadata]]] = {}
        self._refresh_task: asyncio.Task[None] | None = None
        self._last_refresh = float("-inf")
        self._refresh_failures = 0
        self._topic_misses: dict[str, int] = {}
        # sender
        self._sender: asyncio.Task[None] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._woken = False
        self._flushing = 0
        self._closing = False
        self._closed = False

    @classmethod
    def from_config(cls, client: KafkaClient) -> Producer:
        """A producer configured from the Kafka producer keys in ``client.config.extra``:
        acks, linger.ms, batch.size, enable.idempotence, retries, retry.backoff.ms,
        max.in.flight.requests.per.connection, delivery.timeout.ms, buffer.memory."""
        extra = client.config.extra
        kwargs: dict[str, Any] = {}
        readers: dict[str, tuple[str, Callable[[Any], Any]]] = {
            "acks": ("acks", _parse_acks),
            "linger.ms": ("linger_ms", float),
            "batch.size": ("batch_size", int),
            "enable.idempotence": ("enable_idempotence", _as_bool),
            "retries": ("retries", int),
            "retry.backoff.ms": ("retry_backoff_ms", int),
            "max.in.flight.requests.per.connection": ("max_in_flight", int),
            "delivery.timeout.ms": ("delivery_timeout_ms", int),
            "buffer.memory": ("buffer_memory", int),
        }
        for key, (name, parse) in readers.items():
            if key in extra:
                try:
                    kwargs[name] = parse(extra[key])
                except ValueError as exc:
                    raise ValueError(f"{key}: {extra[key]!r}: {exc}") from exc
        return cls(client, **kwargs)

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
        written, with offset -1) or fails with the error that stopped it."""
        if self._closing:
            raise RuntimeError("cannot send: the producer is closed")
        loop = self._loop or self._start()
        future: asyncio.Future[RecordMetadata] = loop.create_future()
        parts: Mapping[int, PartitionMetadata] | None = self._client.cluster.topics.get(topic)
        if parts is None or (partition is not None and partition not in parts):
            try:
                parts = await self._wait_for_partitions(topic, partition)
            except Exception as exc:
                future.set_exception(exc)
                return future
        if self._buffered >= self._buffer_memory:
            await self._wait_for_space()
            parts = self._client.cluster.topics.get(topic) or parts
        if self._closed:  # closed while this send waited: the sender is gone
            future.set_exception(RuntimeError("the producer was closed"))
            return future
        if partition is None:
            if key is None:
                partition = self._sticky.get(topic)
                if partition is None or partition not in parts:
                    partition = self._choose_sticky(topic, parts)
            else:
                partition = (_murmur2_u32(key) & 0x7FFFFFFF) % len(parts)
        if timestamp_ms is None:
            timestamp_ms = time.time_ns() // 1_000_000
        size = _RECORD_OVERHEAD
        if key is not None:
            size += len(key)
        if value is not None:
            size += len(value)
        record_headers: tuple[tuple[str, bytes | None], ...] = ()
        if headers:
            record_headers = tuple(headers)
            for header_key, header_value in record_headers:
                size += _HEADER_OVERHEAD + (
                    len(header_key) if header_key.isascii() else 4 * len(header_key)
                )
                if header_value is not None:
                    size += len(header_value)
        tp = (topic, partition)
        queue = self._queues.get(tp)
        if queue is None:
            queue = self._queues[tp] = deque()
        batch = queue[-1] if queue else None
        filled = False
        if batch is None or batch.closed or batch.size + size > self._batch_size:
            if batch is not None and not batch.closed:
                self._close_full(batch)
                filled = True
            batch = _Batch(topic, partition, loop.time(), loop.create_future())
            queue.append(batch)
            if topic not in self._topics:  # every metadata refresh must cover it
                self._topics.add(topic)
                self._client.want_topics([topic])
            self._incomplete.add(batch)
            self._buffered += BATCH_HEADER_SIZE
            if self._client.metadata_stale:
                self._request_refresh()
            self._wake()
        batch.records.append(Record(key, value, record_headers, timestamp_ms))
        batch.futures.append(future)
        batch.size += size
        self._buffered += size
        if batch.size >= self._batch_size:
            self._close_full(batch)
            filled = True
        if filled:
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
        pending = [batch.done for batch in self._incomplete]
        if not pending:
            return
        self._flushing += 1
        self._wake()
        try:
            await asyncio.wait(pending)
        finally:
            self._flushing -= 1

    async def close(self) -> None:
        """Flush, then stop the sender. The client stays open (it is shared)."""
        if self._closed:
            return
        self._closing = True
        try:
            await self.flush()
        finally:
            self._closed = True
            self._wake()
            sender = self._sender
            if sender is not None and not sender.done():
                await asyncio.wait([sender])
            for task in [self._refresh_task, *self._topic_lookups.values()]:
                if task is not None and not task.done():
                    task.cancel()
            if self._incomplete:  # only when close itself was interrupted
                self._fail_all(RuntimeError("the producer was closed"))

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
            await asyncio.sleep(self._backoff(attempt))
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
            await asyncio.sleep(self._backoff(attempt))

    def _request_refresh(self) -> None:
        """Refresh the metadata in the background (one refresh at a time, at most one per
        retry.backoff.ms)."""
        if self._refresh_task is None or self._refresh_task.done():
            self._refresh_task = asyncio.ensure_future(self._refresh())

    async def _refresh(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            delay = self._last_refresh + self._backoff(self._refresh_failures + 1) - loop.time()
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
            self._wake()

    def _check_missing_topics(self) -> None:
        """Fail the queued batches of a topic the metadata keeps answering with an error."""
        cluster = self._client.cluster
        topics = {tp[0] for tp, queue in self._queues.items() if queue}
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
            for tp, queue in self._queues.items():
                if tp[0] == topic:
                    while queue:
                        self._fail(queue.popleft(), error)

    # accumulator -----------------------------------------------------------------------------
    def _start(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._space = asyncio.Event()
        self._sender = loop.create_task(self._run(), name="kplane-producer-sender")
        return loop

    def _choose_sticky(self, topic: str, parts: Mapping[int, PartitionMetadata]) -> int:
        available = [p for p, meta in parts.items() if meta.leader >= 0] or list(parts)
        previous = self._sticky_prev.get(topic)
        if len(available) > 1 and previous in available:
            available.remove(previous)
        choice = random.choice(available)
        self._sticky[topic] = choice
        return choice

    def _leave_sticky(self, topic: str, partition: int) -> None:
        if self._sticky.get(topic) == partition:
            del self._sticky[topic]
            self._sticky_prev[topic] = partition

    def _close_full(self, batch: _Batch) -> None:
        batch.closed = True
        self._leave_sticky(batch.topic, batch.partition)
        self._wake()

    async def _wait_for_space(self) -> None:
        assert self._space is not None
        while self._buffered >= self._buffer_memory:
            self._space.clear()
            self._wake()
            await self._space.wait()

    # completion ------------------------------------------------------------------------------
    def _finish(self, batch: _Batch) -> None:
        if not batch.done.done():
            batch.done.set_result(None)
        self._incomplete.discard(batch)
        self._buffered -= batch.size
        batch.records = []
        batch.data = None
        if self._space is not None and self._buffered < self._buffer_memory:
            self._space.set()

    def _succeed(self, batch: _Batch, base_offset: int, append_time_ms: int | None) -> None:
        topic, partition = batch.topic, batch.partition
        for i, (future, record) in enumerate(zip(batch.futures, batch.records, strict=True)):
            if not future.done():
                timestamp = record.timestamp if append_time_ms is None else append_time_ms
                future.set_result(
                    RecordMetadata(
                        topic,
                        partition,
                        base_offset + i if base_offset >= 0 else -1,
                        -1 if timestamp is None else timestamp,
                    )
                )
        self._finish(batch)

    def _fail(self, batch: _Batch, error: BaseException) -> None:
        for future in batch.futures:
            if not future.done():
                future.set_exception(error)
        if batch.sequence is not None:
            # the partition's sequences now have a gap: continue under a new producer id
            self._needs_new_producer_id = True
        self._finish(batch)

    def _fail_queued(self, error: BaseException) -> None:
        """Fail every batch not in flight."""
        for queue in self._queues.values():
            while queue:
                self._fail(queue.popleft(), error)

    def _fail_all(self, error: BaseException) -> None:
        self._fail_queued(error)
        for batch in list(self._incomplete):
            self._fail(batch, error)

    def _backoff(self, attempt: int) -> float:
        """Exponential backoff with 20% jitter (KIP-580)."""
        base = min(self._retry_backoff * 2 ** max(attempt - 1, 0), self._retry_backoff_max)
        return base * random.uniform(0.8, 1.2)

    def _retry(self, batch: _Batch, error: KafkaError) -> None:
        """Queue ``batch`` again (keeping its sequence), or fail it once retries are spent."""
        batch.attempts += 1
        if batch.attempts > self._retries:
            self._fail(batch, error)
            return
        assert self._loop is not None
        batch.retry_at = self._loop.time() + self._backoff(batch.attempts)
        queue = self._queues.setdefault((batch.topic, batch.partition), deque())
        i = 0
        while i < len(queue) and 0 <= queue[i].order < batch.order:
            i += 1
        queue.insert(i, batch)
        log.debug(
            "retrying produce",
            topic=batch.topic,
            partition=batch.partition,
            attempt=batch.attempts,
            error=error.code.name,
            reason=error.message,
        )
        self._request_refresh()

    def _earlier_unanswered(self, batch: _Batch) -> bool:
        """A batch of the same partition with an earlier sequence awaits an answer or a retry."""
        sequence = batch.sequence
        if sequence is None:
            return False
        tp = (batch.topic, batch.partition)
        for others in (self._inflight_tp.get(tp, ()), self._queues.get(tp, ())):
            for other in others:
                if other.sequence is not None and _seq_before(other.sequence, sequence):
                    return True
        return False

    # sender ----------------------------------------------------------------------------------
    def _wake(self) -> None:
        self._woken = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _sleep(self, until: float | None) -> None:
        if self._woken:
            return
        assert self._loop is not None
        waiter = self._waiter = self._loop.create_future()
        handle = self._loop.call_at(until, self._wake) if until is not None else None
        try:
            await waiter
        finally:
            self._waiter = None
            if handle is not None:
                handle.cancel()

    def _has_queued(self) -> bool:
        return any(self._queues.values())

    async def _run(self) -> None:
        assert self._loop is not None
        loop = self._loop
        try:
            while True:
                if self._closed and not self._incomplete and not self._inflight_total:
                    return
                self._woken = False
                if self._idempotent and self._has_queued():
                    if self._needs_new_producer_id:
                        if self._inflight_total:
                            await self._sleep(None)
                            continue
                        self._reset_producer_id()
                    if self._producer_id < 0:
                        await self._init_producer_id()
                        continue
                if self._client.metadata_stale and self._has_queued():
                    self._request_refresh()
                await self._sleep(self._drain(loop.time()))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug: fail everything rather than hang the futures
            log.exception("producer sender failed")
            self._fail_all(exc)

    def _ready_at(self, batch: _Batch, now: float, force: bool) -> float:
        if batch.attempts:
            return batch.retry_at
        if batch.closed or force:
            return now
        return batch.created + self._linger

    def _may_send(self, tp: TopicPartition, batch: _Batch) -> bool:
        # idempotence: a retry goes out once everything before it was answered, in order
        return not (self._idempotent and batch.attempts and self._inflight_tp.get(tp))

    def _drain(self, now: float) -> float | None:
        """Send the ready batches the in-flight limits allow; returns when to look again."""
        wake_at: float | None = None
        force = self._flushing > 0 or self._closing
        topics = self._client.cluster.topics
        by_leader: dict[int, list[tuple[TopicPartition, deque[_Batch]]]] = {}
        need_metadata = False
        for tp, queue in self._queues.items():
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
            ready_at = self._ready_at(batch, now, force)
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
            self._request_refresh()
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
                    and self._ready_at(queue[0], now, force) <= now
                    and self._may_send(tp, queue[0])
                ]
        return wake_at

    def _expire(self, tp: TopicPartition, queue: deque[_Batch], now: float) -> None:
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

    def _prepare(self, batch: _Batch) -> None:
        """Close ``batch`` and encode it once (a retry keeps its bytes and sequence)."""
        if batch.data is not None:
            return
        if not batch.closed:
            batch.closed = True
            self._leave_sticky(batch.topic, batch.partition)
        if batch.order < 0:
            batch.order = self._order
            self._order += 1
        if self._idempotent:
            tp = (batch.topic, batch.partition)
            sequence = self._next_sequence.get(tp, 0)
            self._next_sequence[tp] = (sequence + len(batch.records)) % _SEQUENCE_MODULUS
            batch.sequence = sequence
            batch.data = build_batch(
                batch.records,
                producer_id=self._producer_id,
                producer_epoch=self._producer_epoch,
                base_sequence=sequence,
            )
        else:
            batch.data = build_batch(batch.records)

    def _dispatch(self, node: int, batches: list[_Batch]) -> None:
        assert self._loop is not None
        self._inflight_node[node] = self._inflight_node.get(node, 0) + 1
        self._inflight_total += 1
        for batch in batches:
            self._inflight_tp.setdefault((batch.topic, batch.partition), []).append(batch)
        task = self._loop.create_task(self._send_produce(node, batches))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _build_produce(self, batches: list[_Batch]) -> tuple[Callable[[int], Any], dict[Any, str]]:
        by_topic: dict[str, list[_Batch]] = {}
        for batch in batches:
            by_topic.setdefault(batch.topic, []).append(batch)
        topic_ids = self._client.cluster.topic_ids
        id_names = {topic_ids[t]: t for t in by_topic if t in topic_ids}
        acks, timeout = self._acks, self._timeout

        def build(version: int) -> Any:
            module = api.request_module(ApiKey.PRODUCE, version)
            by_id = version >= 13
            return api.make(
                api.request_class(ApiKey.PRODUCE, version),
                transactional_id=None,
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

    async def _send_produce(self, node: int, batches: list[_Batch]) -> None:
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
                self._wake()

    def _request_failed(self, batches: list[_Batch], error: BaseException) -> None:
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
        self, batches: list[_Batch], response: Any, id_names: dict[Any, str]
    ) -> None:
        waiting = {(batch.topic, batch.partition): batch for batch in batches}
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
                    and (self._needs_new_producer_id or self._earlier_unanswered(batch))
                ):
                    self._retry(batch, error)
                else:
                    self._fail(batch, error)
        for batch in waiting.values():
            self._retry(
                batch, KafkaError(ErrorCode.network_exception, "no answer for the partition")
            )

    # idempotence -----------------------------------------------------------------------------
    async def _init_producer_id(self) -> None:
        """InitProducerId for this idempotent producer; fails the queued batches when it
        cannot get one."""

        def build(version: int) -> Any:
            return api.make(
                api.request_class(ApiKey.INIT_PRODUCER_ID, version),
                transactional_id=None,
                transaction_timeout=datetime.timedelta(milliseconds=60_000),
                producer_id=-1,
                producer_epoch=-1,
            )

        attempt = 0
        while True:
            error: BaseException
            try:
                response = await self._client.request(None, ApiKey.INIT_PRODUCER_ID, build)
            except NoBrokersAvailable as exc:
                self._fail_queued(exc)
                return
            except (ConnectionError, TimeoutError) as exc:
                error = exc
            except Exception as exc:
                self._fail_queued(exc)
                return
            else:
                code = response.error_code
                if code is ErrorCode.none:
                    self._producer_id = int(response.producer_id)
                    self._producer_epoch = int(response.producer_epoch)
                    log.debug(
                        "producer id assigned",
                        producer_id=self._producer_id,
                        producer_epoch=self._producer_epoch,
                    )
                    return
                error = KafkaError(code, f"InitProducerId: {code.name}")
                if code not in _INIT_RETRIABLE:
                    self._fail_queued(error)
                    return
            attempt += 1
            if attempt > self._retries:
                self._fail_queued(error)
                return
            await asyncio.sleep(self._backoff(attempt))

    def _reset_producer_id(self) -> None:
        """Forget the producer id and sequences; queued retries get new ones when resent."""
        log.info(
            "idempotent producer resets its producer id after a failed batch",
            producer_id=self._producer_id,
        )
        self._producer_id = -1
        self._producer_epoch = -1
        self._next_sequence.clear()
        self._needs_new_producer_id = False
        for queue in self._queues.values():
            for batch in queue:
                if batch.sequence is not None:
                    batch.sequence = None
                    batch.data = None
