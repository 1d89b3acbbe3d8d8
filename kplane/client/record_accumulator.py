"""RecordAccumulator: the producer's batches, one queue per partition.

A record goes into the open (last) batch of its partition; a batch closes when
``batch.size`` is reached, and is ready to send once closed, ``linger.ms`` old, due for a
retry, or flushed. ``buffer.memory`` bounds the bytes the incomplete batches hold: ``send()``
waits for space while it is used up.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence
from typing import NamedTuple

from kplane.client.partitioner import BuiltInPartitioner
from kplane.client.producer_batch import ProducerBatch, RecordMetadata, TopicPartition
from kplane.protocol.records import BATCH_HEADER_SIZE, Record

# Upper bounds of a record's encoded framing: length, attributes, timestamp delta, offset
# delta, key length, value length and header count varints; plus the two length varints of
# each header. Sizes are estimated from these so a batch never exceeds batch.size.
_RECORD_OVERHEAD = 5 + 1 + 10 + 5 + 5 + 5 + 5
_HEADER_OVERHEAD = 5 + 5


class RecordAppendResult(NamedTuple):
    """What an append did: opened a new batch, and whether a batch became full."""

    new_batch: bool
    batch_is_full: bool


class RecordAccumulator:
    """The batches of every partition, ready ones in front; the memory they hold."""

    def __init__(
        self,
        partitioner: BuiltInPartitioner,
        *,
        batch_size: int,
        linger: float,
        buffer_memory: int,
    ) -> None:
        self.batches: dict[TopicPartition, deque[ProducerBatch]] = {}
        self.incomplete: set[ProducerBatch] = set()
        self._partitioner = partitioner
        self._batch_size = batch_size
        self._linger = linger
        self._buffer_memory = buffer_memory
        self._buffered = 0
        self._space = asyncio.Event()
        self._flushing = 0

    def append(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]],
        timestamp_ms: int,
        future: asyncio.Future[RecordMetadata],
        loop: asyncio.AbstractEventLoop,
    ) -> RecordAppendResult:
        """Add a record to the open batch of its partition, opening one when it is closed
        or the record does not fit."""
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
        queue = self.batches.get(tp)
        if queue is None:
            queue = self.batches[tp] = deque()
        batch = queue[-1] if queue else None
        new_batch = filled = False
        if batch is None or batch.closed or batch.size + size > self._batch_size:
            if batch is not None and not batch.closed:
                self.close(batch)
                filled = True
            batch = ProducerBatch(topic, partition, loop.time(), loop.create_future())
            queue.append(batch)
            self.incomplete.add(batch)
            self._buffered += BATCH_HEADER_SIZE
            new_batch = True
        batch.records.append(Record(key, value, record_headers, timestamp_ms))
        batch.futures.append(future)
        batch.size += size
        self._buffered += size
        if batch.size >= self._batch_size:
            self.close(batch)
            filled = True
        return RecordAppendResult(new_batch, filled)

    def close(self, batch: ProducerBatch) -> None:
        """No more records go into ``batch``."""
        batch.closed = True
        self._partitioner.on_batch_closed(batch.topic, batch.partition)

    def ready_at(self, batch: ProducerBatch, now: float, force: bool) -> float:
        """When ``batch`` may be sent: after its retry backoff; else at once when closed or
        ``force``d; else once it lingered ``linger.ms``."""
        if batch.attempts:
            return batch.retry_at
        if batch.closed or force:
            return now
        return batch.created + self._linger

    @property
    def flush_in_progress(self) -> bool:
        """A ``flush()`` waits: every batch is ready."""
        return self._flushing > 0

    def has_undrained(self) -> bool:
        """Some batch waits to be sent."""
        return any(self.batches.values())

    def reenqueue(self, batch: ProducerBatch) -> None:
        """Queue a batch for a retry, ahead of every batch the sender took after it."""
        queue = self.batches.setdefault((batch.topic, batch.partition), deque())
        i = 0
        while i < len(queue) and 0 <= queue[i].order < batch.order:
            i += 1
        queue.insert(i, batch)

    def deallocate(self, batch: ProducerBatch) -> None:
        """``batch`` is done: release its memory."""
        if not batch.done.done():
            batch.done.set_result(None)
        self.incomplete.discard(batch)
        self._buffered -= batch.size
        batch.records = []
        batch.data = None
        if self._buffered < self._buffer_memory:
            self._space.set()

    @property
    def buffer_full(self) -> bool:
        """The incomplete batches hold ``buffer.memory`` bytes or more."""
        return self._buffered >= self._buffer_memory

    async def wait_for_space(self, wakeup: Callable[[], None]) -> None:
        """Wait until the buffer is no longer full, waking the sender to drain it."""
        while self._buffered >= self._buffer_memory:
            self._space.clear()
            wakeup()
            await self._space.wait()

    async def flush(self, wakeup: Callable[[], None]) -> None:
        """Make every batch ready at once and wait until each is done."""
        pending = [batch.done for batch in self.incomplete]
        if not pending:
            return
        self._flushing += 1
        wakeup()
        try:
            await asyncio.wait(pending)
        finally:
            self._flushing -= 1
