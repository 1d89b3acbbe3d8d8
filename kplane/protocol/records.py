"""Kafka RecordBatch (magic v2) scanning, in-place patching, encoding and decoding.

Sans-IO: this module only transforms bytes.

The broker's hot path never decodes individual records. A produced buffer is
checked with :func:`scan_batches`, which reads only each batch's fixed 61-byte
header and computes one CRC-32C per batch over a ``memoryview`` slice (no copy
of the payload); :mod:`protocol.record_validation` then proves the records well
formed without building them. :func:`number_batches` assigns offsets to the
headers, and the batches are stored and served as bytes.

:func:`build_batch`, :func:`iter_records` and :func:`iter_all_records` encode
and decode individual records; they are meant for kplane's own client and for
tests. :func:`record_keys` reads only the records' keys, on the same walk as the
decoder, and :func:`encode_batch` writes decoded records back as a batch with every
header field given: log compaction builds its offset map and rebuilds a stored batch
with them.
:func:`build_control_batch` writes a transaction marker and :func:`end_txn_marker`
reads one back.

Batch layout (all integers big-endian)::

    offset  size  field
         0     8  baseOffset
         8     4  batchLength            (bytes after this field)
        12     4  partitionLeaderEpoch   (not covered by the CRC)
        16     1  magic                  (2)
        17     4  crc                    (CRC-32C of bytes 21..end, unsigned)
        21     2  attributes
        23     4  lastOffsetDelta
        27     8  baseTimestamp
        35     8  maxTimestamp
        43     8  producerId
        51     2  producerEpoch
        53     4  baseSequence
        57     4  recordsCount
        61        records (compressed as one block when compression != 0)
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TypeAlias

import crc32c as _crc32c

from kplane.protocol.compression import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NAMES,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    MAX_DECOMPRESSED_BYTES,
    DecompressedSizeExceeded,
    DecompressionError,
    compress,
    decompress,
)
from kplane.protocol.errors import ErrorCode
from kplane.protocol.varint import VarintError, read_unsigned_varint

__all__ = (
    "BATCH_HEADER_SIZE",
    "COMPRESSION_GZIP",
    "COMPRESSION_LZ4",
    "COMPRESSION_NONE",
    "COMPRESSION_SNAPPY",
    "COMPRESSION_ZSTD",
    "LOG_OVERHEAD",
    "MIN_BATCH_LENGTH",
    "BatchHeader",
    "Buffer",
    "EndTxnMarker",
    "InvalidRecordError",
    "KeyEntry",
    "Record",
    "build_batch",
    "build_control_batch",
    "encode_batch",
    "end_txn_marker",
    "iter_all_records",
    "iter_records",
    "number_batches",
    "parse_end_txn_marker",
    "read_partial_batches",
    "record_keys",
    "scan_batches",
    "served_prefix",
)

Buffer: TypeAlias = bytes | bytearray | memoryview

# ---------------------------------------------------------------------------
# Layout constants
# ---------------------------------------------------------------------------

BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
"""A batch's fixed header: the fields of :class:`BatchHeader` from baseOffset on."""
_INT8 = struct.Struct(">b")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT64 = struct.Struct(">q")

BATCH_HEADER_SIZE = BATCH_HEADER.size  # 61
"""Size of the fixed batch header, from baseOffset up to and including recordsCount."""
LOG_OVERHEAD = 12
"""baseOffset + batchLength: the bytes not counted by batchLength."""
MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD  # 49
"""Smallest legal batchLength (a header with no records)."""

_LENGTH_POS = 8
_MAGIC_POS = 16
_CRC_POS = 17
_ATTRIBUTES_POS = 21

_MAGIC_V2 = 2
_LEGACY_MAGICS = (0, 1)

_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_MASK = 0x08
_TRANSACTIONAL_MASK = 0x10
_CONTROL_MASK = 0x20
_DELETE_HORIZON_MASK = 0x40

_INT32_MAX = (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


# ---------------------------------------------------------------------------
# Public types
# ---------------------------------------------------------------------------


class InvalidRecordError(Exception):
    """A record batch (or record) is malformed or unsupported.

    ``error_code`` is the Kafka error to answer with, as Kafka picks it:

    * ``CORRUPT_MESSAGE`` for a bad CRC, a truncated batch, a batchLength too
      small, a magic byte Kafka does not know, or records that do not decompress;
    * ``INVALID_RECORD`` for a legacy (v0, v1) batch, which Produce v3+ may not
      carry, and for malformed records or batch fields that contradict them;
    * ``INVALID_TIMESTAMP``, ``MESSAGE_TOO_LARGE`` and
      ``UNSUPPORTED_COMPRESSION_TYPE`` from the broker's validation.

    ``record_errors`` holds (index of the record in its batch, message) for each
    record at fault, as Produce v8+ reports them.
    """

    def __init__(
        self,
        error_code: ErrorCode,
        message: str,
        record_errors: tuple[tuple[int, str], ...] = (),
    ) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message
        self.record_errors = record_errors


@dataclass(slots=True)
class BatchHeader:
    """The fixed header of one record batch found in a buffer.

    ``position`` is the byte offset of the batch in the scanned buffer and
    ``size`` its total length including the 12-byte baseOffset+batchLength
    prefix, so ``buffer[position:position + size]`` is the whole batch.
    """

    position: int
    size: int
    base_offset: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def compression(self) -> int:
        """Compression codec id (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)."""
        return self.attributes & _COMPRESSION_MASK

    @property
    def log_append_time(self) -> bool:
        """True when the timestamp type is LogAppendTime (attribute bit 3)."""
        return bool(self.attributes & _TIMESTAMP_TYPE_MASK)

    @property
    def is_transactional(self) -> bool:
        """True when the batch belongs to a transaction (attribute bit 4)."""
        return bool(self.attributes & _TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        """True for a control batch, e.g. a transaction marker (attribute bit 5)."""
        return bool(self.attributes & _CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        """True when baseTimestamp holds a delete horizon (attribute bit 6)."""
        return bool(self.attributes & _DELETE_HORIZON_MASK)

    @property
    def last_offset(self) -> int:
        """Absolute offset of the batch's last record."""
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        """Offset that follows this batch."""
        return self.base_offset + self.last_offset_delta + 1


@dataclass(frozen=True, slots=True)
class Record:
    """One record.

    When encoding, ``timestamp`` is milliseconds since the epoch (``None``
    means "now") and ``offset`` is ignored (offsets come from the position in
    the batch). When decoding, ``offset`` is the absolute offset and
    ``timestamp`` the effective timestamp (the batch's maxTimestamp for
    LogAppendTime batches).
    """

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp: int | None = None
    offset: int = -1


# ---------------------------------------------------------------------------
# Zigzag varints (private; read with protocol.varint)
# ---------------------------------------------------------------------------


def _write_unsigned_varint(out: bytearray, value: int) -> None:
    """Append ``value`` (>= 0) as an unsigned base-128 varint."""
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _write_varlong(out: bytearray, value: int) -> None:
    """Append a signed 64-bit ``value`` zigzag-encoded."""
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"varlong out of int64 range: {value}")
    _write_unsigned_varint(out, (value << 1) ^ (value >> 63))


def _read_varint(data: bytes, pos: int, limit: int, bits: int = 32) -> tuple[int, int]:
    """The zigzag varint of a record field ending by ``limit`` (an int32; an int64 with
    ``bits=64``): (value, next position). CORRUPT_MESSAGE when it runs past ``limit``, is
    too long or out of range."""
    try:
        raw, next_pos = read_unsigned_varint(data, pos, bits)
        if next_pos > limit:
            raise IndexError  # past the record: truncated, as off the end of the data
    except IndexError:
        raise InvalidRecordError(
            ErrorCode.corrupt_message, f"truncated varint at record byte {pos}"
        ) from None
    except VarintError as exc:
        raise InvalidRecordError(ErrorCode.corrupt_message, f"{exc} at record byte {pos}") from None
    return (raw >> 1) ^ -(raw & 1), next_pos


# ---------------------------------------------------------------------------
# Scanning (hot path: headers + CRC only)
# ---------------------------------------------------------------------------


def _parse_batch_header(
    view: memoryview, pos: int, *, verify_crc: bool, allow_truncated: bool
) -> BatchHeader | None:
    """Parse and check the batch starting at ``pos``.

    Returns ``None`` for a truncated batch when ``allow_truncated`` is set.
    """
    remaining = len(view) - pos
    if remaining < _MAGIC_POS + 1:
        if allow_truncated:
            return None
        raise InvalidRecordError(
            ErrorCode.corrupt_message,
            f"truncated batch at byte {pos}: only {remaining} bytes left, "
            f"a batch header is {BATCH_HEADER_SIZE} bytes",
        )
    fields = None
    if remaining >= BATCH_HEADER_SIZE:  # the whole header at once, checked below
        fields = BATCH_HEADER.unpack_from(view, pos)
        magic = fields[3]
        batch_length = fields[1]
    else:
        (magic,) = _INT8.unpack_from(view, pos + _MAGIC_POS)
        (batch_length,) = _INT32.unpack_from(view, pos + _LENGTH_POS)
    if magic in _LEGACY_MAGICS:
        raise InvalidRecordError(
            ErrorCode.invalid_record,
            f"batch at byte {pos} has magic {magic}; only magic v2 record batches are allowed",
        )
    if magic != _MAGIC_V2:
        raise InvalidRecordError(
            ErrorCode.corrupt_message, f"invalid magic {magic} in the batch at byte {pos}"
        )
    if batch_length < MIN_BATCH_LENGTH:
        raise InvalidRecordError(
            ErrorCode.corrupt_message,
            f"batch at byte {pos} has batchLength {batch_length}, "
            f"smaller than the minimum {MIN_BATCH_LENGTH}",
        )
    size = LOG_OVERHEAD + batch_length
    if size > remaining:
        if allow_truncated:
            return None
        raise InvalidRecordError(
            ErrorCode.corrupt_message,
            f"truncated batch at byte {pos}: batchLength says {size} bytes, "
            f"only {remaining} left in the buffer",
        )
    assert fields is not None  # size >= BATCH_HEADER_SIZE fits in what remains
    crc, attributes, last_offset_delta = fields[4:7]
    record_count = fields[12]
    if verify_crc:
        computed = _crc32c.crc32c(view[pos + _ATTRIBUTES_POS : pos + size])
        if computed != crc:
            raise InvalidRecordError(
                ErrorCode.corrupt_message,
                f"CRC mismatch in batch at byte {pos}: "
                f"stored 0x{crc:08x}, computed 0x{computed:08x}",
            )
    if record_count < 0:
        raise InvalidRecordError(
            ErrorCode.invalid_record,
            f"batch at byte {pos} has a negative recordsCount {record_count}",
        )
    if last_offset_delta < 0:
        raise InvalidRecordError(
            ErrorCode.invalid_record,
            f"batch at byte {pos} has a negative lastOffsetDelta {last_offset_delta}",
        )
    compression = attributes & _COMPRESSION_MASK
    if compression not in COMPRESSION_NAMES:
        raise InvalidRecordError(
            ErrorCode.invalid_record,
            f"batch at byte {pos} has unknown compression codec id {compression}",
        )
    # Positional, in the fields' order: position, size, baseOffset, partitionLeaderEpoch,
    # then the header as unpacked from magic on.
    return BatchHeader(pos, size, fields[0], fields[2], *fields[3:])


def _byte_view(buffer: Buffer) -> memoryview:
    """A flat unsigned-byte view of ``buffer`` (no copy)."""
    view = memoryview(buffer)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def scan_batches(buffer: Buffer, verify_crc: bool = True) -> list[BatchHeader]:
    """Check and describe every batch in ``buffer`` (e.g. a produce request's records).

    The buffer must consist of one or more whole magic-v2 batches. Only the
    61-byte headers are parsed, plus one CRC-32C per batch when ``verify_crc``
    is true; record payloads are neither decoded nor copied.

    Raises :class:`InvalidRecordError` for an empty buffer, a truncated batch,
    a batchLength below 49, a CRC mismatch, a negative recordsCount
    (all ``CORRUPT_MESSAGE``), a magic other than 2
    (``UNSUPPORTED_FOR_MESSAGE_FORMAT``), a negative lastOffsetDelta or an
    unknown compression codec (``INVALID_RECORD``).
    """
    with _byte_view(buffer) as view:
        if len(view) == 0:
            raise InvalidRecordError(ErrorCode.corrupt_message, "empty record set")
        batches: list[BatchHeader] = []
        pos = 0
        end = len(view)
        while pos < end:
            header = _parse_batch_header(view, pos, verify_crc=verify_crc, allow_truncated=False)
            assert header is not None
            batches.append(header)
            pos += header.size
        return batches


def read_partial_batches(buffer: Buffer) -> list[BatchHeader]:
    """Describe the whole batches in a fetch-style ``buffer``, without CRC checks.

    Fetch responses may end with a truncated batch; parsing stops quietly
    there. An empty buffer gives an empty list. Malformed whole batches (bad
    magic, bad lengths) still raise :class:`InvalidRecordError`.
    """
    with _byte_view(buffer) as view:
        batches: list[BatchHeader] = []
        pos = 0
        end = len(view)
        while pos < end:
            header = _parse_batch_header(view, pos, verify_crc=False, allow_truncated=True)
            if header is None:
                break
            batches.append(header)
            pos += header.size
        return batches


def scan_valid_prefix(buffer: Buffer) -> tuple[list[BatchHeader], str | None]:
    """The whole, CRC-checked batches at the start of ``buffer``, up to the first that is
    truncated or invalid, and why scanning stopped there (None when every byte was valid).

    This is how a log's tail is recovered after an unclean stop: what follows the last
    valid batch is cut off.
    """
    with _byte_view(buffer) as view:
        batches: list[BatchHeader] = []
        pos = 0
        end = len(view)
        while pos < end:
            try:
                header = _parse_batch_header(view, pos, verify_crc=True, allow_truncated=False)
            except InvalidRecordError as exc:
                return batches, exc.message
            assert header is not None
            batches.append(header)
            pos += header.size
        return batches, None


# ---------------------------------------------------------------------------
# Offsets (hot path): assigned to headers, written when the batch is served
# ---------------------------------------------------------------------------

_SERVED_PREFIX = struct.Struct(">qii")


def number_batches(
    batches: list[BatchHeader], base_offset: int, partition_leader_epoch: int
) -> int:
    """Give ``batches`` consecutive offsets from ``base_offset``; returns the next offset.

    Only the headers change: the stored bytes stay as the producer sent them, and
    :func:`served_prefix` supplies the assigned values when the batch is served.
    """
    next_offset = base_offset
    for batch in batches:
        batch.base_offset = next_offset
        batch.partition_leader_epoch = partition_leader_epoch
        next_offset += batch.last_offset_delta + 1
    return next_offset


def served_prefix(batch: BatchHeader) -> bytes:
    """The first 16 bytes a stored batch is served with.

    baseOffset, batchLength and partitionLeaderEpoch lie outside the CRC, so writing
    this prefix in front of the batch's bytes from byte 16 on yields exactly the batch
    with its offsets assigned in place, without copying the batch.
    """
    return _SERVED_PREFIX.pack(
        batch.base_offset, batch.size - LOG_OVERHEAD, batch.partition_leader_epoch
    )


# ---------------------------------------------------------------------------
# Encoding (client and tests)
# ---------------------------------------------------------------------------


def _zigzag_bytes(value: int) -> bytes:
    """A signed 64-bit ``value`` as a zigzag varint."""
    out = bytearray()
    _write_varlong(out, value)
    return bytes(out)


def _small_varint(z: int) -> bytes:
    """An unsigned varint below 2**21, without the general loop (for the table below)."""
    if z < 0x80:
        return bytes((z,))
    if z < 0x4000:
        return bytes((z & 0x7F | 0x80, z >> 7))
    return bytes((z & 0x7F | 0x80, (z >> 7) & 0x7F | 0x80, z >> 14))


# The zigzag varints of -1..16383 (zigzag: -1 -> 1, v >= 0 -> 2v), built at import.
_SMALL_ZIGZAG = [_small_varint(1), *(_small_varint(2 * v) for v in range(16384))]


def _zigzag(value: int) -> bytes:
    """Zigzag varint bytes; values from -1 to 16383 come from a table (the common sizes)."""
    if -1 <= value < 16383:
        return _SMALL_ZIGZAG[value + 1]
    return _zigzag_bytes(value)


def _length_prefixed(data: bytes | None) -> tuple[bytes, ...]:
    return (_SMALL_ZIGZAG[0],) if data is None else (_zigzag(len(data)), data)


def _encode_record(out: bytearray, record: Record, offset_delta: int, timestamp_delta: int) -> None:
    """Append one length-prefixed record to ``out`` (attributes byte always 0)."""
    parts = [
        b"\x00",
        _zigzag(timestamp_delta),
        _zigzag(offset_delta),
        *_length_prefixed(record.key),
        *_length_prefixed(record.value),
        _zigzag(len(record.headers)),
    ]
    for header_key, header_value in record.headers:
        parts += _length_prefixed(header_key.encode("utf-8"))
        parts += _length_prefixed(header_value)
    body = b"".join(parts)
    if len(body) > _INT32_MAX:
        raise ValueError(f"record of {len(body)} bytes does not fit a batch")
    out += _zigzag(len(body))
    out += body


def build_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    compression: int = COMPRESSION_NONE,
    partition_leader_epoch: int = -1,
    base_timestamp: int | None = None,
) -> bytes:
    """Encode ``records`` as one magic-v2 record batch (CreateTime timestamps).

    Records get offset deltas 0, 1, 2, ... in order; a record whose
    ``timestamp`` is ``None`` gets the current time. ``base_timestamp``
    defaults to the first record's timestamp; maxTimestamp is the largest
    record timestamp. ``compression`` is a codec id (0 none, 1 gzip, 2 snappy,
    3 lz4, 4 zstd); others raise :class:`ValueError`.
    """
    if not records:
        raise ValueError("build_batch needs at least one record")
    if compression not in COMPRESSION_NAMES:
        raise ValueError(f"unknown compression codec id {compression}")
    if is_transactional and producer_id < 0:
        raise ValueError("a transactional batch needs a producer id >= 0")
    if len(records) - 1 > _INT32_MAX:
        raise ValueError(f"too many records for one batch: {len(records)}")

    now_ms: int | None = None
    timestamps: list[int] = []
    for record in records:
        if record.timestamp is None:
            if now_ms is None:
                now_ms = int(time.time() * 1000)
            timestamps.append(now_ms)
        else:
            timestamps.append(record.timestamp)
    first_timestamp = timestamps[0] if base_timestamp is None else base_timestamp

    body = bytearray()
    for offset_delta, (record, timestamp) in enumerate(zip(records, timestamps, strict=True)):
        _encode_record(body, record, offset_delta, timestamp - first_timestamp)
    payload: bytes | bytearray = body
    if compression != COMPRESSION_NONE:
        payload = compress(compression, bytes(body))

    attributes = compression
    if is_transactional:
        attributes |= _TRANSACTIONAL_MASK
    return _seal_batch(
        payload,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=len(records) - 1,
        base_timestamp=first_timestamp,
        max_timestamp=max(timestamps),
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        record_count=len(records),
    )


def encode_batch(
    records: Sequence[Record],
    *,
    base_offset: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    attributes: int = COMPRESSION_NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
) -> bytes:
    """Encode ``records`` that carry their own offsets and timestamps as one magic-v2 batch
    whose header fields are all given, e.g. a stored batch rebuilt without some records.

    Unlike :func:`build_batch`, a record is written at offset delta ``record.offset -
    base_offset`` (gaps stay gaps) with timestamp delta ``record.timestamp -
    base_timestamp``; ``records`` may be empty. They are compressed with the codec in the
    low three bits of ``attributes``; the other bits are written as given. Raises
    :class:`ValueError` for a record without a timestamp or outside ``0..last_offset_delta``,
    an unknown codec, or a field out of range.
    """
    codec = attributes & _COMPRESSION_MASK
    if codec not in COMPRESSION_NAMES:
        raise ValueError(f"unknown compression codec id {codec}")
    body = bytearray()
    for record in records:
        offset_delta = record.offset - base_offset
        if not 0 <= offset_delta <= last_offset_delta:
            raise ValueError(
                f"record offset {record.offset} outside the batch "
                f"{base_offset}..{base_offset + last_offset_delta}"
            )
        if record.timestamp is None:
            raise ValueError(f"record at offset {record.offset} has no timestamp")
        _encode_record(body, record, offset_delta, record.timestamp - base_timestamp)
    payload: bytes | bytearray = body
    if codec != COMPRESSION_NONE:
        payload = compress(codec, bytes(body))
    return _seal_batch(
        payload,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=last_offset_delta,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        record_count=len(records),
    )


def _seal_batch(
    payload: bytes | bytearray,
    *,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    record_count: int,
) -> bytes:
    """The batch: the 61-byte header with these fields, then ``payload``, CRC-32C filled in."""
    batch = bytearray(BATCH_HEADER_SIZE)
    batch += payload
    if len(batch) - LOG_OVERHEAD > _INT32_MAX:
        raise ValueError(f"batch too large: {len(batch)} bytes")
    try:
        BATCH_HEADER.pack_into(
            batch,
            0,
            base_offset,
            len(batch) - LOG_OVERHEAD,
            partition_leader_epoch,
            _MAGIC_V2,
            0,  # CRC, filled in below
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            record_count,
        )
    except struct.error as exc:
        raise ValueError(f"batch header field out of range: {exc}") from exc
    with memoryview(batch) as view:
        crc = _crc32c.crc32c(view[_ATTRIBUTES_POS:])
    _UINT32.pack_into(batch, _CRC_POS, crc)
    return bytes(batch)


# ---------------------------------------------------------------------------
# Decoding (client, tests, log compaction; never the broker hot path)
# ---------------------------------------------------------------------------


def _nullable_bytes(
    data: bytes, pos: int, limit: int, length: int, what: str
) -> tuple[bytes | None, int]:
    """The ``length`` bytes (-1: null) at ``pos`` of a record ending at ``limit``, and the
    position after them."""
    if length == -1:
        return None, pos
    end = pos + length
    if length < 0 or end > limit:
        raise _bad_bytes_length(length, what)
    return data[pos:end], end


def _read_nullable_bytes(data: bytes, pos: int, limit: int, what: str) -> tuple[bytes | None, int]:
    """Read a varint length (-1 for null) followed by that many bytes."""
    length, pos = _read_varint(data, pos, limit)
    return _nullable_bytes(data, pos, limit, length, what)


def _bad_bytes_length(length: int, what: str) -> InvalidRecordError:
    """A length below -1 (INVALID_RECORD), or one past the end of the record (CORRUPT)."""
    if length < 0:
        return InvalidRecordError(ErrorCode.invalid_record, f"invalid {what} length {length}")
    return InvalidRecordError(
        ErrorCode.corrupt_message, f"{what} of {length} bytes runs past the end of its record"
    )


RecordHead = tuple[int, int, bytes | None, int, int, int]
"""What :func:`_read_record_head` reads of a record: where its timestamp delta starts,
its offset delta, key and value length, where its value starts, and where it ends."""


def _read_record_head(
    data: bytes, pos: int, end: int, header: BatchHeader, index: int
) -> RecordHead:
    """Read record ``index`` of the batch ``header``, at ``pos`` of its record bytes
    ``data`` (which end at ``end``), up to its value.

    The one record walk under :func:`iter_records` and :func:`record_keys` (Kafka's
    ``DefaultRecord.readPartiallyFrom``): varints read by
    :func:`protocol.varint.read_unsigned_varint` (a one-byte offset delta or key length
    inline), the timestamp delta only skipped (the key walk needs none), the fields
    checked to lie inside the record once, at its value."""
    try:
        raw, pos = read_unsigned_varint(data, pos, 32)
        length = (raw >> 1) ^ -(raw & 1)
        record_end = pos + length
        if length <= 0 or record_end > end:
            raise _bad_record_length(header, index, length, end - pos)
        timestamp_at = pos = pos + 1  # after the attributes (unused)
        while pos < record_end and data[pos] >= 0x80:  # to the timestamp's last byte
            pos += 1
        raw = data[pos + 1]  # the offset delta's first byte
        pos += 2
        if raw >= 0x80:
            raw, pos = read_unsigned_varint(data, pos - 1, 32)
        offset_delta = (raw >> 1) ^ -(raw & 1)
        raw = data[pos]
        pos += 1
        if raw >= 0x80:
            raw, pos = read_unsigned_varint(data, pos - 1, 32)
        key = None
        if raw != 1:  # the zigzag of -1: a null key
            key_end = pos + (raw >> 1)
            if raw & 1 or key_end > record_end:
                raise _bad_bytes_length((raw >> 1) ^ -(raw & 1), "key")
            key = data[pos:key_end]
            pos = key_end
        raw, pos = read_unsigned_varint(data, pos, 32)
    except (IndexError, VarintError) as exc:
        reason = str(exc) if isinstance(exc, VarintError) else "truncated varint"
        raise _bad_record(header, index, reason) from None
    if pos > record_end:
        raise _bad_record(header, index, "truncated varint")
    return timestamp_at, offset_delta, key, (raw >> 1) ^ -(raw & 1), pos, record_end


def _bad_record(header: BatchHeader, index: int, reason: str) -> InvalidRecordError:
    return InvalidRecordError(
        ErrorCode.corrupt_message, f"record {index} in batch at byte {header.position}: {reason}"
    )


def _bad_record_length(
    header: BatchHeader, index: int, length: int, left: int
) -> InvalidRecordError:
    """Why a record's length is refused: negative, zero, or past the record bytes."""
    where = f"record {index} in batch at byte {header.position}"
    if length < 0:
        return InvalidRecordError(ErrorCode.invalid_record, f"{where} has negative length {length}")
    if length == 0:
        return InvalidRecordError(ErrorCode.invalid_record, f"{where} is empty")
    return InvalidRecordError(
        ErrorCode.corrupt_message, f"{where} is truncated: length {length}, {left} bytes left"
    )


def _bytes_left_over(header: BatchHeader, left: int) -> InvalidRecordError:
    return InvalidRecordError(
        ErrorCode.invalid_record,
        f"batch at byte {header.position}: {left} bytes left over after "
        f"{header.record_count} records",
    )


def _decode_records(data: bytes, header: BatchHeader) -> Iterator[Record]:
    """Decode ``header.record_count`` records from the (decompressed) record bytes."""
    where = f"batch at byte {header.position}"
    pos = 0
    end = len(data)
    for index in range(header.record_count):
        timestamp_at, offset_delta, key, value_length, pos, record_end = _read_record_head(
            data, pos, end, header, index
        )
        timestamp_delta, _ = _read_varint(data, timestamp_at, record_end, 64)
        value, pos = _nullable_bytes(data, pos, record_end, value_length, "value")
        header_count, pos = _read_varint(data, pos, record_end)
        if header_count < 0:
            raise InvalidRecordError(
                ErrorCode.invalid_record,
                f"record {index} in {where} has a negative header count {header_count}",
            )
        headers: list[tuple[str, bytes | None]] = []
        for _ in range(header_count):
            raw_key, pos = _read_nullable_bytes(data, pos, record_end, "header key")
            if raw_key is None:
                raise InvalidRecordError(
                    ErrorCode.invalid_record, f"record {index} in {where} has a null header key"
                )
            try:
                header_key = raw_key.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InvalidRecordError(
                    ErrorCode.invalid_record,
                    f"record {index} in {where} has a header key that is not UTF-8: {exc}",
                ) from exc
            header_value, pos = _read_nullable_bytes(data, pos, record_end, "header value")
            headers.append((header_key, header_value))
        if pos != record_end:
            raise InvalidRecordError(
                ErrorCode.invalid_record,
                f"record {index} in {where}: fields end {record_end - pos} bytes before "
                "the record's length says",
            )
        timestamp = (
            header.max_timestamp
            if header.log_append_time
            else header.base_timestamp + timestamp_delta
        )
        yield Record(
            key=key,
            value=value,
            headers=tuple(headers),
            timestamp=timestamp,
            offset=header.base_offset + offset_delta,
        )
    if pos != end:
        raise _bytes_left_over(header, end - pos)


KeyEntry = tuple[int, bytes | None, bool]
"""A record's offset, key and whether it has a value (False: a tombstone)."""


def record_keys(header: BatchHeader, batch: Buffer) -> list[KeyEntry]:
    """(offset, key, has value) of each record of one whole stored ``batch`` whose header
    is ``header``, read as :func:`iter_records` reads them but without values and headers:
    log compaction builds its offset map from them, as Kafka's cleaner reads only keys.
    A compressed batch is inflated once its CRC is checked."""
    if header.attributes & _COMPRESSION_MASK:  # its CRC checked before it is inflated
        with _byte_view(batch) as view:
            _parse_batch_header(view, 0, verify_crc=True, allow_truncated=False)
        data, pos = _record_bytes(batch, header), 0
    else:  # walked in a copy of the whole batch, cheaper than one of a slice of it
        data, pos = bytes(batch), BATCH_HEADER_SIZE
    base = header.base_offset
    end = len(data)
    entries: list[KeyEntry] = []
    for index in range(header.record_count):
        _, offset_delta, key, value_length, _, pos = _read_record_head(
            data, pos, end, header, index
        )
        entries.append((base + offset_delta, key, value_length >= 0))
    if pos != end:
        raise _bytes_left_over(header, end - pos)
    return entries


def _record_bytes(batch: Buffer, header: BatchHeader) -> bytes:
    """The record bytes of ``batch`` (one whole batch), decompressed."""
    raw = bytes(batch[BATCH_HEADER_SIZE : header.size])
    if header.attributes & _COMPRESSION_MASK:
        return inflate(header, raw)
    return raw


def inflate(header: BatchHeader, raw: bytes, limit: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """A compressed batch's record bytes decompressed with its codec, within ``limit``:
    MESSAGE_TOO_LARGE past it, CORRUPT_MESSAGE when they are not that codec's stream."""
    try:
        return decompress(header.compression, raw, limit)
    except DecompressedSizeExceeded as exc:
        raise InvalidRecordError(
            ErrorCode.message_too_large, f"batch at byte {header.position}: {exc}"
        ) from exc
    except DecompressionError as exc:
        raise InvalidRecordError(
            ErrorCode.corrupt_message, f"batch at byte {header.position}: {exc}"
        ) from exc


def iter_records(batch: Buffer, verify_crc: bool = True) -> Iterator[Record]:
    """Decode the records of one batch; ``batch`` must hold exactly one whole batch.

    Compressed batches are decompressed (see :mod:`protocol.compression`, which
    bounds their size). Records carry absolute offsets and
    effective timestamps. For clients and tests only, never the broker's hot
    path.
    """
    with _byte_view(batch) as view:
        header = _parse_batch_header(view, 0, verify_crc=verify_crc, allow_truncated=False)
        assert header is not None
        if header.size != len(view):
            raise InvalidRecordError(
                ErrorCode.corrupt_message,
                f"iter_records expects exactly one batch: batch is {header.size} bytes, "
                f"buffer has {len(view)}",
            )
        data = _record_bytes(view, header)
    yield from _decode_records(data, header)


def iter_all_records(buffer: Buffer) -> Iterator[Record]:
    """Decode every record of every whole batch in a fetch-style ``buffer``.

    A truncated trailing batch is ignored, as a consumer would. Each batch's
    CRC is checked. For clients and tests only.
    """
    data = bytes(buffer)  # immutable snapshot: views of it can safely outlive this call
    view = memoryview(data)
    for header in read_partial_batches(view):
        yield from iter_records(view[header.position : header.position + header.size])


# ---------------------------------------------------------------------------
# Transaction markers (control batches)
# ---------------------------------------------------------------------------

CONTROL_TYPE_ABORT = 0
CONTROL_TYPE_COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")  # version, type
_END_TXN_VALUE = struct.Struct(">hi")  # version, coordinatorEpoch


@dataclass(frozen=True, slots=True)
class EndTxnMarker:
    """What a transaction marker says (Kafka's EndTransactionMarker)."""

    commit: bool
    coordinator_epoch: int


def build_control_batch(
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
    timestamp_ms: int,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A transaction marker as Kafka writes it: one control batch (transactional and
    control attributes, baseSequence -1) of the transaction's producer holding one record,
    key (version 0, type ABORT 0 or COMMIT 1), value (version 0, coordinator epoch).
    :class:`ValueError` for a negative producer id or a field out of its range."""
    if producer_id < 0:
        raise ValueError("a transaction marker needs a producer id >= 0")
    try:
        value = _END_TXN_VALUE.pack(0, coordinator_epoch)
    except struct.error as exc:
        raise ValueError(f"coordinator epoch out of range: {exc}") from exc
    key = _CONTROL_KEY.pack(0, CONTROL_TYPE_COMMIT if commit else CONTROL_TYPE_ABORT)
    body = bytearray()
    _encode_record(body, Record(key=key, value=value), 0, 0)
    return _seal_batch(
        body,
        base_offset=0,
        partition_leader_epoch=partition_leader_epoch,
        attributes=_TRANSACTIONAL_MASK | _CONTROL_MASK,
        last_offset_delta=0,
        base_timestamp=timestamp_ms,
        max_timestamp=timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,
        record_count=1,
    )


def parse_end_txn_marker(key: bytes | None, value: bytes | None) -> EndTxnMarker | None:
    """The marker in a control record's key and value; None for a control type other than
    ABORT and COMMIT. As Kafka does, a version above 0 is read as version 0; a key shorter
    than 4 bytes, a value shorter than 6 or a negative version raise
    :class:`InvalidRecordError` (CORRUPT_MESSAGE)."""
    if key is None or len(key) < _CONTROL_KEY.size:
        raise InvalidRecordError(ErrorCode.corrupt_message, "control record key is too short")
    version, control_type = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise InvalidRecordError(
            ErrorCode.corrupt_message, f"control record key has a negative version {version}"
        )
    if control_type not in (CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT):
        return None
    if value is None or len(value) < _END_TXN_VALUE.size:
        raise InvalidRecordError(ErrorCode.corrupt_message, "transaction marker value is too short")
    value_version, coordinator_epoch = _END_TXN_VALUE.unpack_from(value)
    if value_version < 0:
        raise InvalidRecordError(
            ErrorCode.corrupt_message,
            f"transaction marker value has a negative version {value_version}",
        )
    return EndTxnMarker(control_type == CONTROL_TYPE_COMMIT, coordinator_epoch)


def end_txn_marker(batch: Buffer) -> EndTxnMarker | None:
    """The marker of one whole stored control batch (its first record, as Kafka reads it);
    None when the batch has no record (a marker the cleaner emptied) or another control
    type. Raises :class:`InvalidRecordError` for anything but one whole, valid control
    batch."""
    with _byte_view(batch) as view:
        header = _parse_batch_header(view, 0, verify_crc=True, allow_truncated=False)
        assert header is not None
        if not header.is_control or header.size != len(view):
            raise InvalidRecordError(
                ErrorCode.invalid_record, "expected exactly one whole control batch"
            )
        data = _record_bytes(view, header)
    for record in _decode_records(data, header):
        return parse_end_txn_marker(record.key, record.value)
    return None
