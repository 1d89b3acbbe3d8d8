"""Writing a DataFrame to Kafka: every Spark task produces its rows with kplane's producer
(idempotent unless ``kafka.enable.idempotence=false``), batch and streaming.

Columns as Spark's Kafka sink takes them (:func:`kplane.spark.schema.check_write_schema`):
``value``, and optionally ``key``, ``topic``, ``partition``, ``headers``; a string key or
value is written as UTF-8. The ``topic`` option, when given, overrides the ``topic`` column.
A task ends once each of its records is acknowledged; the first failure fails the task
(Spark's sink is at-least-once: a retried task writes its records again).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from kplane.client.kafka_client import KafkaClient
from kplane.client.producer import Producer
from kplane.common.network.config import ClientConfig
from kplane.spark.options import WriteOptions
from kplane.spark.worker_logs import quiet_client_logs


@dataclass
class Written(WriterCommitMessage):
    """What one task produced."""

    records: int


class KafkaBatchWriter(DataSourceArrowWriter):
    """``df.write.format("kplane")``."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        return produce_batches(self.options, iterator)


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("kplane")``."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        return produce_batches(self.options, iterator)


def _bytes(value: Any) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


def produce_batches(options: WriteOptions, batches: Iterator[pa.RecordBatch]) -> Written:
    """Produce every row of ``batches``; the count once all are acknowledged."""
    quiet_client_logs()

    async def produce() -> int:
        client = KafkaClient(ClientConfig.from_properties(options.client))
        try:
            await client.start()
            producer = Producer.from_config(client)
            futures: list[asyncio.Future[Any]] = []
            try:
                for batch in batches:
                    futures.extend(await _send(producer, options.topic, batch))
                    _raise_failed(futures)
                await producer.flush()
            finally:
                await producer.close()
            await asyncio.gather(*futures)
            return len(futures)
        finally:
            await client.close()

    return Written(asyncio.run(produce()))


def _raise_failed(futures: list[asyncio.Future[Any]]) -> None:
    """Raise the first failure among the records acknowledged so far."""
    for future in futures:
        if future.done() and future.exception() is not None:
            raise future.exception()  # type: ignore[misc]


async def _send(
    producer: Producer, topic_option: str | None, batch: pa.RecordBatch
) -> list[asyncio.Future[Any]]:
    names = batch.schema.names
    n = batch.num_rows
    column = {name: batch.column(name).to_pylist() for name in names}
    nothing: list[Any] = [None] * n
    values = column["value"]
    keys = column.get("key", nothing)
    topics = [topic_option] * n if topic_option else column["topic"]
    partitions = column.get("partition", nothing)
    headers = column.get("headers", nothing)
    futures = []
    for i in range(n):
        topic = topics[i]
        if topic is None:
            raise ValueError(
                "null topic present in the data. Use the topic option for setting a topic."
            )
        futures.append(
            await producer.send(
                topic,
                _bytes(values[i]),
                key=_bytes(keys[i]),
                headers=[(h["key"], h["value"]) for h in headers[i] or ()],
                partition=partitions[i],
            )
        )
    return futures
