"""What a leader checks in produced batches before appending them, as Kafka's LogValidator.

:func:`protocol.records.scan_batches` has already checked each batch's framing, magic and
CRC. :func:`validate_batches` adds, per batch, Kafka's rules for batches from clients
(``LogValidator.validateBatch`` and ``UnifiedLog.analyzeAndValidateRecords``): baseOffset 0,
a record count that is positive and equal to lastOffsetDelta + 1, no control batch, a
non-negative base sequence when a producer id is set, zstd only from Produce v7; then it
proves the records well formed (:func:`protocol.record_walk.walk_records`), after
decompressing them within a bound for a compressed batch, and checks CreateTime timestamps
against ``message.timestamp.difference.max.ms``.

Nothing is appended unless every batch passes: the first failure raises
:class:`InvalidRecordError` with Kafka's error code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kplane.protocol.compression import (
    COMPRESSION_NONE,
    COMPRESSION_ZSTD,
    MAX_DECOMPRESSED_BYTES,
)
from kplane.protocol.errors import ErrorCode
from kplane.protocol.record_walk import RecordRefusal, TimestampCheck, walk_records
from kplane.protocol.records import BATCH_HEADER_SIZE, BatchHeader, InvalidRecordError, inflate

__all__ = ("NO_TIMESTAMP_LIMIT", "ValidationPolicy", "validate_batches")

NO_TIMESTAMP_LIMIT = (1 << 63) - 1
"""``message.timestamp.difference.max.ms`` when it is not set: any timestamp goes."""
_NO_TIMESTAMP = -1
_ZSTD_SINCE_PRODUCE_VERSION = 7


@dataclass(slots=True)
class ValidationPolicy:
    """The settings that decide what a partition accepts from one Produce request. (Not
    frozen, yet never changed: a frozen dataclass costs four times as much to make.)"""

    produce_version: int
    log_append_time: bool = False
    """``message.timestamp.type`` is LogAppendTime (else CreateTime)."""
    timestamp_difference_max_ms: int = NO_TIMESTAMP_LIMIT
    max_decompressed_bytes: int = MAX_DECOMPRESSED_BYTES
    compacted_partition: str | None = None
    """The topic-partition when its ``cleanup.policy`` contains compact: records need keys."""


def validate_batches(
    buffer: bytes | memoryview,
    batches: Sequence[BatchHeader],
    policy: ValidationPolicy,
    now_ms: int,
    view_at: int | None = None,
) -> None:
    """Check every batch of ``buffer`` (found by ``scan_batches``); raise on the first
    failure, so that a refused request appends nothing. ``view_at``: ``buffer`` is a view
    of a ``bytes`` object (``buffer.obj``) starting there; uncompressed records are then
    walked in that object, not copied out of the view."""
    if len(batches) != 1:  # Kafka's ProduceRequest.validateRecords, for every version served
        raise InvalidRecordError(
            ErrorCode.invalid_record,
            f"Produce requests with version {policy.produce_version} are only allowed to "
            "contain exactly one record batch per partition.",
        )
    for batch in batches:
        _check_batch_fields(batch, policy)
        records, start, end = _records(buffer, batch, policy, view_at)
        check = _timestamp_check(batch, policy, now_ms)
        keyless = (
            f"Compacted topic cannot accept message without key in topic partition "
            f"{policy.compacted_partition}."
            if policy.compacted_partition is not None
            else None
        )
        refused = walk_records(records, start, end, batch.record_count, check, keyless)
        if refused:
            raise _refusal(refused)


def _refusal(refused: list[RecordRefusal]) -> InvalidRecordError:
    """Every refused record named with its index, as Kafka's processRecordErrors does:
    INVALID_TIMESTAMP when a timestamp was refused, else INVALID_RECORD with Kafka's
    message showing the first three."""
    errors = tuple((r.index, r.message) for r in refused)
    if any(r.timestamp for r in refused):
        return InvalidRecordError(
            ErrorCode.invalid_timestamp,
            "One or more records have been rejected due to invalid timestamp",
            errors,
        )
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    return InvalidRecordError(
        ErrorCode.invalid_record,
        f"One or more records have been rejected due to {len(errors)} record errors in total, "
        f"and only showing the first three errors at most: [{shown}]",
        errors,
    )


def _invalid(batch: BatchHeader, message: str) -> InvalidRecordError:
    return InvalidRecordError(
        ErrorCode.invalid_record, f"batch at byte {batch.position}: {message}"
    )


def _check_batch_fields(batch: BatchHeader, policy: ValidationPolicy) -> None:
    if batch.base_offset != 0:
        raise _invalid(batch, f"baseOffset should be 0, but it is {batch.base_offset}")
    if batch.record_count <= 0:
        raise _invalid(batch, f"invalid reported count for record batch: {batch.record_count}")
    if batch.record_count != batch.last_offset_delta + 1:
        raise _invalid(
            batch,
            f"inconsistent batch offset range [0, {batch.last_offset_delta}] "
            f"and count of records {batch.record_count}",
        )
    if batch.is_control:
        raise _invalid(batch, "clients are not allowed to write control records")
    if batch.producer_id >= 0 and batch.base_sequence < 0:
        raise _invalid(
            batch,
            f"invalid sequence number {batch.base_sequence} in record batch "
            f"with producerId {batch.producer_id}",
        )
    if (
        batch.compression == COMPRESSION_ZSTD
        and policy.produce_version < _ZSTD_SINCE_PRODUCE_VERSION
    ):
        raise InvalidRecordError(
            ErrorCode.unsupported_compression_type,
            f"Produce requests with version {policy.produce_version} are not allowed "
            f"to use ZStandard compression",
        )


def _records(
    buffer: bytes | memoryview, batch: BatchHeader, policy: ValidationPolicy, view_at: int | None
) -> tuple[bytes, int, int]:
    """The bytes holding the batch's records, and where in them they start and end. The
    walk reads bytes, not a view (its strided reads cost seven times as much on a
    memoryview): the view's own ``bytes`` when ``view_at`` says where it starts, else a
    copy of the records."""
    start = batch.position + BATCH_HEADER_SIZE
    end = batch.position + batch.size
    if batch.compression == COMPRESSION_NONE:
        if isinstance(buffer, bytes):
            return buffer, start, end
        if view_at is not None and type(buffer.obj) is bytes:
            return buffer.obj, start + view_at, end + view_at
    data = bytes(buffer[start:end])
    if batch.compression != COMPRESSION_NONE:
        data = inflate(batch, data, policy.max_decompressed_bytes)
    return data, 0, len(data)


def _timestamp_check(
    batch: BatchHeader, policy: ValidationPolicy, now_ms: int
) -> TimestampCheck | None:
    """Kafka's ``validateTimestamp`` for this batch's records; None when nothing to check."""
    limit = policy.timestamp_difference_max_ms
    lo, hi = now_ms - limit, now_ms + limit
    if batch.log_append_time:
        timestamp = batch.max_timestamp
        if policy.log_append_time or timestamp == _NO_TIMESTAMP:
            refusal: str | None = "producer should not set timestamp type to LogAppendTime"
        elif not lo <= timestamp <= hi:
            refusal = _out_of_range(timestamp, lo, hi)
        else:
            return None
        return lambda _index, _delta: refusal
    if policy.log_append_time or limit >= NO_TIMESTAMP_LIMIT:
        return None
    base = batch.base_timestamp

    def check(_index: int, delta: int) -> str | None:
        timestamp = base + delta
        if timestamp == _NO_TIMESTAMP or lo <= timestamp <= hi:
            return None
        return _out_of_range(timestamp, lo, hi)

    return check


def _out_of_range(timestamp: int, lo: int, hi: int) -> str:
    return f"timestamp {timestamp} is out of range: it should be within [{lo}, {hi}]"
