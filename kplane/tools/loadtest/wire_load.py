"""The ``wire`` data load of ``kplane loadtest``: many light Produce connections.

KIP-291's case is a data queue holding ``queued.max.requests`` (500) requests. A broker works
on one request per connection at a time, so the queue only gets that deep with hundreds of
connections, more than librdkafka instances (several threads each) can drive from one CPU.
Here each connection is a coroutine on one event loop that sends a Produce (acks=1, one
record batch of ``batch_records`` records for one partition), waits for its answer, decodes
it and sends the next; the frame is encoded once per connection and only its correlation id
changes. Messages count as delivered when the broker's answer for their batch says so.
"""

from __future__ import annotations

import asyncio
import datetime
import multiprocessing.connection
import os
import struct
import time
from typing import Any

import uvloop
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.static.primitive import i16, i32

from kplane.protocol import api
from kplane.protocol.errors import ErrorCode
from kplane.protocol.framing import encode_request_frame, response_body_offset
from kplane.protocol.records import Record, build_batch
from kplane.tools.loadtest.producers import LoadConfig, LoadResult
from kplane.tools.loadtest.topics import TopicError, describe_topic

PRODUCE, PRODUCE_VERSION = 0, 9
CORRELATION_AT = 8
"""Offset of the correlation id in a request frame: size, api key, api version."""
CONNECT_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_MS = 30_000
ANSWER_TIMEOUT_S = REQUEST_TIMEOUT_MS / 1000 + 5
"""A request unanswered this long ends its connection; its messages count as undelivered."""


def produce_frame(topic: str, partition: int, record_size: int, batch_records: int) -> bytearray:
    """A Produce v9 request frame (acks=1) of one batch of random records, correlation id 0."""
    payload = os.urandom(record_size)
    batch = build_batch([Record(key=None, value=payload) for _ in range(batch_records)])
    partition_data = api.make(PartitionProduceData, index=i32(partition), records=batch)
    request = api.make(
        ProduceRequest,
        transactional_id=None,
        acks=i16(1),
        timeout=datetime.timedelta(milliseconds=REQUEST_TIMEOUT_MS),
        topic_data=(api.make(TopicProduceData, name=topic, partition_data=(partition_data,)),),
    )
    return bytearray(
        encode_request_frame(
            PRODUCE, PRODUCE_VERSION, 0, "kplane-loadtest-wire", api.encode(request)
        )
    )


def produce_error(frame: bytes) -> ErrorCode:
    """The partition error of a Produce v9 response frame (after its size prefix)."""
    offset = response_body_offset(PRODUCE, PRODUCE_VERSION)
    response = api.decode_response(PRODUCE, PRODUCE_VERSION, frame, offset)
    (topic,) = response.responses
    (partition,) = topic.partition_responses
    return ErrorCode(partition.error_code)


class WireLoad:
    """``config.producers`` Produce connections, one per partition round-robin over
    ``config.partitions``, each to its partition's leader (as the first of
    ``config.bootstrap`` describes the topic)."""

    def __init__(self, config: LoadConfig) -> None:
        self.config = config
        host, _, port = config.bootstrap.split(",")[0].rpartition(":")
        self.host, self.port = host, int(port)
        self.batch_records = config.batch_records
        self.counts = LoadResult()
        """Messages after the warm-up, and the sampled requests."""
        self.sent = 0
        """Messages sent, warm-up included (the progress line)."""
        self._streams: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._requests = 0

    async def connect(self) -> None:
        """Open every connection (OSError when one cannot be opened); a partition whose
        leader is unknown (no such topic) is sent to the first bootstrap server, which
        answers with its error."""
        try:
            topic = await describe_topic(self.host, self.port, self.config.topic)
        except TopicError:
            topic = None
        partitions = max(1, self.config.partitions)
        for index in range(self.config.producers):
            address = (self.host, self.port)
            state = topic.states.get(index % partitions) if topic is not None else None
            if topic is not None and state is not None and state.leader in topic.brokers:
                address = topic.brokers[state.leader]
            self._streams.append(
                await asyncio.wait_for(asyncio.open_connection(*address), CONNECT_TIMEOUT_S)
            )

    async def run(self, progress: Any) -> float:
        """Produce for the warm-up and the duration (or until ``max_messages`` were
        measured); the measured seconds."""
        start = time.monotonic()
        measure_from = start + self.config.warmup
        end = measure_from + self.config.duration
        tasks = [
            asyncio.ensure_future(self._connection(i, reader, writer, start, measure_from, end))
            for i, (reader, writer) in enumerate(self._streams)
        ]
        while not all(t.done() for t in tasks):
            await asyncio.wait(tasks, timeout=0.2)
            progress[0], progress[1] = self.sent, self.counts.delivered
        for t in tasks:
            t.result()
        return max(0.0, min(time.monotonic(), end) - measure_from)

    async def _connection(
        self,
        index: int,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        start: float,
        measure_from: float,
        end: float,
    ) -> None:
        config, counts, n = self.config, self.counts, self.batch_records
        partitions = max(1, config.partitions)
        frame = produce_frame(config.topic, index % partitions, config.record_size, n)
        correlation = 0
        measuring = False
        try:
            while (now := time.monotonic()) < end and counts.produced < config.max_messages:
                if config.rate > 0 and self.sent >= (now - start) * config.rate:
                    await asyncio.sleep(n / config.rate)
                    continue
                measuring = now >= measure_from
                correlation += 1
                struct.pack_into(">i", frame, CORRELATION_AT, correlation)
                sent_at, began = time.time(), time.perf_counter()
                writer.write(frame)
                self.sent += n
                if measuring:
                    counts.produced += n
                error = produce_error(await asyncio.wait_for(_frame(reader), ANSWER_TIMEOUT_S))
                if measuring:
                    self._count(error, sent_at, (time.perf_counter() - began) * 1000.0)
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
            if measuring:  # the batch in flight got no answer
                counts.undelivered += n
        finally:
            writer.close()

    def _count(self, error: ErrorCode, sent_at: float, latency_ms: float) -> None:
        n = self.batch_records
        if error == ErrorCode.none:
            self.counts.delivered += n
        else:
            self.counts.failed += n
        self._requests += 1
        if self._requests % self.config.sample_every == 0:
            self.counts.send_times.append(sent_at)
            self.counts.latencies_ms.append(latency_ms)
            self.counts.errors.append(None if error == ErrorCode.none else error.name.upper())

    def close(self) -> None:
        """Close every connection still open."""
        for _, writer in self._streams:
            writer.close()

    def result(self, seconds: float) -> LoadResult:
        """The counts and samples as the load process reports them."""
        self.counts.seconds = seconds
        return self.counts


async def _frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return await reader.readexactly(size)


def run_wire_load(
    config: LoadConfig, conn: multiprocessing.connection.Connection, progress: Any
) -> None:
    """The load process's ``wire`` load (the protocol of ``loadtest_producers``: "ready" or
    an error line, "go", then a LoadResult); ``progress`` is [sent, delivered]."""
    load = WireLoad(config)

    async def main() -> LoadResult | None:
        try:
            await load.connect()
        except (OSError, TimeoutError) as exc:
            load.close()
            conn.send(f"producers could not reach {config.bootstrap}: {exc or type(exc).__name__}")
            return None
        conn.send("ready")
        try:
            if conn.recv() != "go":
                return None
        except EOFError:  # the parent went away
            return None
        return load.result(await load.run(progress))

    result = uvloop.run(main())
    if result is not None:
        conn.send(result)
