"""ProducerBatch: the records of one partition sent together; RecordMetadata: where one
record landed."""

from __future__ import annotations

import asyncio
from typing import NamedTuple

from kplane.protocol.records import BATCH_HEADER_SIZE, Record

TopicPartition = tuple[str, int]


class RecordMetadata(NamedTuple):
    """Where a record landed: offset -1 when unknown (acks=0); ``timestamp`` is the record's
    CreateTime, or the broker's LogAppendTime when the topic uses it. (A NamedTuple: one is
    made per acknowledged record, and a tuple is the cheapest immutable record.)"""

    topic: str
    partition: int
    offset: int
    timestamp: int


class ProducerBatch:
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

    def complete(self, base_offset: int, append_time_ms: int | None) -> None:
        """Resolve each record's future with where it landed (``base_offset`` -1: unknown)."""
        topic, partition = self.topic, self.partition
        for i, (future, record) in enumerate(zip(self.futures, self.records, strict=True)):
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

    def fail(self, error: BaseException) -> None:
        """Fail each record's future with ``error``."""
        for future in self.futures:
            if not future.done():
                future.set_exception(error)
