"""Reading one offset range on an executor: kplane's consumer, assigned the partition and
sought to the range's start (no group), its records handed to Spark as Arrow record
batches in the data source's schema, one batch per poll.

Data loss is judged as Spark's source judges it: a start before the log start offset
(records deleted) or a range the log no longer reaches (truncated, the topic recreated)
fails the task with ``failOnDataLoss`` true; with false it is one warning and the read goes
on from the log start (or ends).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from kplane.client.admin import Admin
from kplane.client.consumer import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    Consumer,
    ConsumerRecord,
    OffsetOutOfRange,
)
from kplane.client.kafka_client import KafkaClient
from kplane.client.settings import CONSUMER_SETTINGS, read_settings
from kplane.common.network.config import ClientConfig
from kplane.spark.options import ReadOptions
from kplane.spark.planning import OffsetRange, report_data_loss
from kplane.spark.schema import arrow_schema
from kplane.spark.worker_logs import quiet_client_logs

POLL_MS = 500


def read_range(options: ReadOptions, part: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The records of ``part`` as Arrow record batches."""
    if part.size <= 0:
        return
    quiet_client_logs()
    loop = asyncio.new_event_loop()
    config = ClientConfig.from_properties(options.client)
    client = KafkaClient(config)
    settings = read_settings(config.extra, CONSUMER_SETTINGS)
    for key in ("group_id", "group_protocol", "group_instance_id", "group_remote_assignor"):
        settings.pop(key, None)
    settings["auto_offset_reset"] = "none"  # the driver chose the range; never reset
    consumer = Consumer(client, **settings)
    schema = arrow_schema(options.include_headers)
    tp = (part.topic, part.partition)
    try:
        loop.run_until_complete(client.start())
        consumer.assign([tp])
        consumer.seek(part.topic, part.partition, part.start)
        position = part.start
        progress_at = time.monotonic()
        while position < part.end:
            try:
                records = loop.run_until_complete(consumer.poll(POLL_MS))
            except OffsetOutOfRange:
                moved = loop.run_until_complete(_out_of_range(client, options, part, position))
                if moved is None:
                    return
                position = moved
                consumer.seek(part.topic, part.partition, position)
                continue
            if records:
                progress_at = time.monotonic()
                if records[-1].offset >= part.end:
                    records = [r for r in records if r.offset < part.end]
                if records:
                    yield to_record_batch(records, part, schema, options.include_headers)
            known = consumer.position(*tp)
            if known is not None:
                position = known
            if position >= part.end or records:
                continue
            latest = loop.run_until_complete(_offset(client, options, tp, LATEST_TIMESTAMP))
            if latest <= position:
                report_data_loss(
                    f"{part.topic}-{part.partition}: offsets {position} to {part.end} are "
                    f"gone (the log ends at {latest})",
                    options.fail_on_data_loss,
                )
                return
            if (time.monotonic() - progress_at) * 1000 > options.poll_timeout_ms:
                raise TimeoutError(
                    f"{part.topic}-{part.partition}: no record at offset {position} within "
                    f"kafkaConsumer.pollTimeoutMs={options.poll_timeout_ms}"
                )
    finally:
        loop.run_until_complete(consumer.close())
        loop.run_until_complete(client.close())
        loop.close()


async def _offset(client: KafkaClient, options: ReadOptions, tp: Any, timestamp: int) -> int:
    found = await Admin(client).list_offsets({tp: timestamp}, options.isolation_level)
    return found[tp][0]


async def _out_of_range(
    client: KafkaClient, options: ReadOptions, part: OffsetRange, position: int
) -> int | None:
    """Where to go on from ``position`` out of the log's range: the log start when records
    were deleted (None when the range is gone entirely); data loss reported first."""
    tp = (part.topic, part.partition)
    earliest = await _offset(client, options, tp, EARLIEST_TIMESTAMP)
    if position < earliest:
        report_data_loss(
            f"{part.topic}-{part.partition}: offsets {position} to {min(earliest, part.end)} "
            f"were deleted (the log starts at {earliest})",
            options.fail_on_data_loss,
        )
        return earliest if earliest < part.end else None
    report_data_loss(
        f"{part.topic}-{part.partition}: offset {position} is past the log's end",
        options.fail_on_data_loss,
    )
    return None


def to_record_batch(
    records: Sequence[ConsumerRecord],
    part: OffsetRange,
    schema: pa.Schema,
    include_headers: bool,
) -> pa.RecordBatch:
    """Records of one partition as a record batch of ``schema``."""
    n = len(records)
    columns = [
        pa.array([r.key for r in records], pa.binary()),
        pa.array([r.value for r in records], pa.binary()),
        pa.array([part.topic] * n, pa.string()),
        pa.array([part.partition] * n, pa.int32()),
        pa.array([r.offset for r in records], pa.int64()),
        pa.array([r.timestamp * 1000 for r in records], pa.int64()).cast(
            schema.field("timestamp").type
        ),
        pa.array([r.timestamp_type for r in records], pa.int32()),
    ]
    if include_headers:
        columns.append(
            pa.array(
                [[{"key": k, "value": v} for k, v in r.headers] for r in records],
                schema.field("headers").type,
            )
        )
    return pa.RecordBatch.from_arrays(columns, schema=schema)
