"""Log compaction's record filter: one stored batch with some of its records removed.

Sans-IO: this module only transforms bytes. It is Kafka's ``MemoryRecords.filterTo`` for
one magic-v2 batch as it lies in a segment (offsets assigned): the caller (the log
cleaner) decides per record with ``keep`` and gets back the batch to write in its place.

* Every record kept (and no delete horizon to set): the input bytes, not re-encoded.
* Some kept: a new batch, rebuilt as Kafka's ``MemoryRecordsBuilder`` rebuilds it. The
  base offset, lastOffsetDelta (so the producer's last sequence stays valid), partition
  leader epoch, attributes (codec, timestamp type, transactional, control, delete
  horizon), producer id, epoch and base sequence are the original's; each kept record
  keeps its offset delta and timestamp. As in Kafka, baseTimestamp becomes the first kept
  record's timestamp (or the delete horizon, when the batch has one) and maxTimestamp the
  largest kept timestamp (the LogAppendTime for a LogAppendTime batch). The records are
  compressed with the batch's own codec and the CRC is computed anew.
* None kept: nothing, or, when the caller must keep the producer's state
  (``retain_empty``, for the last batch of an idempotent or transactional producer) and
  the batch has a producer id, Kafka's empty batch: no records, no compression,
  baseTimestamp -1, the original maxTimestamp, offsets, producer fields, timestamp type,
  transactional and control bits.

Control batches (transaction markers) come back untouched and ``keep`` is not called for
them: whether a marker stays is the caller's decision.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kplane.protocol.errors import ErrorCode
from kplane.protocol.records import (
    BatchHeader,
    Buffer,
    InvalidRecordError,
    Record,
    encode_batch,
    iter_records,
    scan_batches,
)

__all__ = ("FilterResult", "filter_batch")

# Attribute bits of a magic-v2 batch (see protocol.records): the codec, and the flag that
# says baseTimestamp holds a delete horizon.
_COMPRESSION_MASK = 0x07
_DELETE_HORIZON_MASK = 0x40
_NO_TIMESTAMP = -1


@dataclass(frozen=True, slots=True)
class FilterResult:
    """What :func:`filter_batch` made of one batch.

    ``output`` is the batch to write in the input's place, or ``None`` when the batch goes
    away; ``unchanged`` is true when ``output`` is the input batch itself (same bytes).
    ``records_kept`` + ``records_dropped`` is the input's record count; ``bytes_in`` is
    the input's size and ``bytes_out`` the output's (0 when dropped).
    """

    output: bytes | None
    records_kept: int
    records_dropped: int
    bytes_in: int
    bytes_out: int
    unchanged: bool


def filter_batch(
    batch: Buffer,
    keep: Callable[[Record], bool],
    *,
    retain_empty: bool = False,
    delete_horizon_ms: int | None = None,
) -> FilterResult:
    """Filter the records of one stored batch with ``keep`` (see the module's docstring).

    ``batch`` must hold exactly one whole magic-v2 batch; its CRC is checked and its records
    decoded (decompressed within :data:`protocol.compression.MAX_DECOMPRESSED_BYTES`).
    ``keep`` sees each record in order, with its absolute offset and effective timestamp,
    keyless records and tombstones (``value is None``) included.

    ``retain_empty``: when no record is kept and the batch has a producer id, write Kafka's
    empty batch instead of dropping it (the cleaner asks for this for the last batch of a
    producer, whose sequence and epoch must survive).

    ``delete_horizon_ms``: as Kafka's cleaner does for tombstones, a batch that keeps a
    tombstone and has no delete horizon yet is rewritten with this one (the delete-horizon
    attribute set and baseTimestamp holding it), even when every record is kept; ``None``
    leaves the horizon alone.

    Raises :class:`protocol.records.InvalidRecordError` for anything but one whole valid
    batch: a truncated batch or one with trailing bytes, a bad CRC, a magic other than 2,
    records that do not decompress or decode, a record count that does not match, or
    record offsets that do not increase within ``0..lastOffsetDelta``.
    """
    if delete_horizon_ms is not None and delete_horizon_ms < 0:
        raise ValueError(f"delete horizon must be >= 0, got {delete_horizon_ms}")
    original = batch if isinstance(batch, bytes) else bytes(batch)
    header = _single_batch(original)
    size = len(original)

    if header.is_control:
        return FilterResult(original, header.record_count, 0, size, size, unchanged=True)

    kept: list[Record] = []
    keeps_tombstone = False
    previous_delta = -1
    for record in iter_records(original, verify_crc=False):  # CRC checked just above
        delta = record.offset - header.base_offset
        if not previous_delta < delta <= header.last_offset_delta:
            raise InvalidRecordError(
                ErrorCode.invalid_record,
                f"batch at offset {header.base_offset}: record offset delta {delta} after "
                f"{previous_delta}, lastOffsetDelta {header.last_offset_delta}",
            )
        previous_delta = delta
        if keep(record):
            kept.append(record)
            keeps_tombstone = keeps_tombstone or record.value is None
    dropped = header.record_count - len(kept)

    if not kept:
        if retain_empty and header.producer_id >= 0:
            empty = _rebuild(
                header,
                (),
                attributes=header.attributes & ~(_COMPRESSION_MASK | _DELETE_HORIZON_MASK),
                base_timestamp=_NO_TIMESTAMP,
                max_timestamp=header.max_timestamp,
            )
            return FilterResult(empty, 0, dropped, size, len(empty), unchanged=False)
        return FilterResult(None, 0, dropped, size, 0, unchanged=False)

    set_horizon = (
        delete_horizon_ms is not None and keeps_tombstone and not header.has_delete_horizon
    )
    if not dropped and not set_horizon:
        return FilterResult(original, len(kept), 0, size, size, unchanged=True)

    attributes = header.attributes
    if set_horizon:
        assert delete_horizon_ms is not None
        attributes |= _DELETE_HORIZON_MASK
        base_timestamp = delete_horizon_ms
    elif header.has_delete_horizon:
        base_timestamp = header.base_timestamp
    else:
        base_timestamp = _timestamp(kept[0])
    if header.log_append_time:
        max_timestamp = header.max_timestamp
    else:
        max_timestamp = max(_NO_TIMESTAMP, *(_timestamp(record) for record in kept))
    rebuilt = _rebuild(
        header,
        kept,
        attributes=attributes,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
    )
    return FilterResult(rebuilt, len(kept), dropped, size, len(rebuilt), unchanged=False)


def _single_batch(data: bytes) -> BatchHeader:
    """The header of the one batch ``data`` holds, its CRC checked."""
    headers = scan_batches(data)
    if len(headers) != 1:
        raise InvalidRecordError(
            ErrorCode.corrupt_message,
            f"filter_batch expects exactly one batch, the buffer holds {len(headers)}",
        )
    return headers[0]


def _timestamp(record: Record) -> int:
    """A decoded record's timestamp (the decoder always sets one)."""
    assert record.timestamp is not None
    return record.timestamp


def _rebuild(
    header: BatchHeader,
    records: Sequence[Record],
    *,
    attributes: int,
    base_timestamp: int,
    max_timestamp: int,
) -> bytes:
    """``records`` as a batch in ``header``'s place: its offsets, epoch and producer."""
    try:
        return encode_batch(
            records,
            base_offset=header.base_offset,
            last_offset_delta=header.last_offset_delta,
            base_timestamp=base_timestamp,
            max_timestamp=max_timestamp,
            attributes=attributes,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            partition_leader_epoch=header.partition_leader_epoch,
        )
    except ValueError as exc:  # e.g. a timestamp delta that does not fit a varlong
        raise InvalidRecordError(
            ErrorCode.invalid_record,
            f"batch at offset {header.base_offset} cannot be rebuilt: {exc}",
        ) from exc
