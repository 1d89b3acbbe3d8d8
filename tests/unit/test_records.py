"""Tests for protocol.records: RecordBatch v2 scanning, patching, encoding and decoding."""

from __future__ import annotations

import contextlib
import struct
import time

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from kplane.protocol.errors import ErrorCode
from kplane.protocol.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    InvalidRecordError,
    Record,
    _read_varint,
    _write_varlong,
    build_batch,
    encode_batch,
    iter_all_records,
    iter_records,
    number_batches,
    read_partial_batches,
    record_keys,
    scan_batches,
    served_prefix,
)

# --------------------------------------------------------------------------- helpers

keys = st.none() | st.binary(max_size=40)
values = st.none() | st.binary(max_size=300)
header_lists = st.lists(
    st.tuples(st.text(max_size=20), st.none() | st.binary(max_size=30)), max_size=4
).map(tuple)
timestamps = st.integers(min_value=0, max_value=2**42)
records_strategy = st.lists(
    st.builds(Record, key=keys, value=values, headers=header_lists, timestamp=timestamps),
    min_size=1,
    max_size=25,
)


def _records(n: int, start: int = 0, ts: int = 1_700_000_000_000) -> list[Record]:
    return [
        Record(
            key=None if i % 3 == 0 else f"k{start + i}".encode(),
            value=f"value-{start + i}".encode() * 3,
            headers=(("h", f"{i}".encode()), ("null", None)) if i % 2 else (),
            timestamp=ts + i,
        )
        for i in range(n)
    ]


def _fix_crc(batch: bytearray, position: int = 0) -> None:
    """Recompute the CRC of the batch at ``position`` after a deliberate edit."""
    (length,) = struct.unpack_from(">i", batch, position + 8)
    end = position + 12 + length
    struct.pack_into(">I", batch, position + 17, crc32c.crc32c(bytes(batch[position + 21 : end])))


def _payload_fields(records: list[Record]) -> list[tuple[object, ...]]:
    return [(r.key, r.value, r.headers, r.timestamp) for r in records]


def _legacy_message(magic: int) -> bytes:
    """A magic v0/v1 message set entry (offset, size, crc, magic, attrs, [ts], key, value)."""
    body = struct.pack(">bb", magic, 0)
    if magic == 1:
        body += struct.pack(">q", 1_700_000_000_000)
    body += struct.pack(">i", -1) + struct.pack(">i", 5) + b"hello"
    body = struct.pack(">I", 0) + body
    return struct.pack(">qi", 0, len(body)) + body


def _code(exc: pytest.ExceptionInfo[InvalidRecordError]) -> ErrorCode:
    return exc.value.error_code


# --------------------------------------------------------------------------- varints


@given(st.integers(min_value=-(2**31), max_value=2**31 - 1))
def test_varint_round_trip(value: int) -> None:
    out = bytearray()
    _write_varlong(out, value)
    assert len(out) <= 5
    assert _read_varint(bytes(out), 0, len(out)) == (value, len(out))


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_varlong_round_trip(value: int) -> None:
    out = bytearray()
    _write_varlong(out, value)
    assert len(out) <= 10
    assert _read_varint(bytes(out), 0, len(out), 64) == (value, len(out))


def test_varint_zigzag_known_encodings() -> None:
    for value, encoded in [
        (0, b"\x00"),
        (-1, b"\x01"),
        (1, b"\x02"),
        (-2, b"\x03"),
        (64, b"\x80\x01"),
    ]:
        out = bytearray()
        _write_varlong(out, value)
        assert bytes(out) == encoded


@pytest.mark.parametrize(
    ("data", "limit", "bits", "reason"),
    [
        (b"\xff\xff\xff\xff\xff\x01", 6, 32, "varint longer than 5 bytes"),
        (b"\xff" * 10 + b"\x01", 11, 64, "varint longer than 10 bytes"),
        (b"\x80", 1, 32, "truncated varint"),
        (b"\x80\x01", 1, 32, "truncated varint"),  # runs past its record
        (b"\xff\xff\xff\xff\x7f", 5, 32, "varint out of int32 range"),
        (b"\xff" * 9 + b"\x7f", 10, 64, "varint out of int64 range"),
    ],
)
def test_varint_errors(data: bytes, limit: int, bits: int, reason: str) -> None:
    with pytest.raises(InvalidRecordError) as exc:
        _read_varint(data, 0, limit, bits)
    assert _code(exc) == ErrorCode.corrupt_message
    assert exc.value.message == f"{reason} at record byte 0"


def test_varlong_writer_refuses_what_is_out_of_range() -> None:
    with pytest.raises(ValueError):
        _write_varlong(bytearray(), -(2**63) - 1)


# --------------------------------------------------------------------------- round trips


@given(
    records=records_strategy,
    base_offset=st.integers(min_value=0, max_value=2**40),
    compression=st.sampled_from([0, 1, 2, 3, 4]),
)
@settings(suppress_health_check=[HealthCheck.too_slow])
def test_round_trip(records: list[Record], base_offset: int, compression: int) -> None:
    batch = build_batch(records, base_offset=base_offset, compression=compression)
    [header] = scan_batches(batch)
    assert header.position == 0
    assert header.size == len(batch)
    assert header.magic == 2
    assert header.record_count == len(records)
    assert header.last_offset_delta == len(records) - 1
    assert header.base_offset == base_offset
    assert header.next_offset == base_offset + len(records)
    assert header.compression == compression
    assert header.base_timestamp == records[0].timestamp
    assert header.max_timestamp == max(r.timestamp for r in records if r.timestamp is not None)
    assert not header.log_append_time
    assert not header.is_control
    assert not header.is_transactional

    decoded = list(iter_records(batch))
    assert _payload_fields(decoded) == _payload_fields(records)
    assert [r.offset for r in decoded] == list(range(base_offset, base_offset + len(records)))
    assert list(iter_all_records(batch)) == decoded
    assert record_keys(header, batch) == [(r.offset, r.key, r.value is not None) for r in decoded]


def test_header_fields_and_properties() -> None:
    batch = build_batch(
        _records(4),
        base_offset=10,
        producer_id=77,
        producer_epoch=3,
        base_sequence=41,
        is_transactional=True,
        partition_leader_epoch=9,
        base_timestamp=1_600_000_000_000,
    )
    [h] = scan_batches(bytearray(batch))
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (77, 3, 41)
    assert h.partition_leader_epoch == 9
    assert h.is_transactional
    assert h.attributes == 0x10
    assert h.base_timestamp == 1_600_000_000_000
    assert (h.last_offset, h.next_offset) == (13, 14)
    # Timestamps are relative to the explicit base timestamp and still decode exactly.
    assert [r.timestamp for r in iter_records(batch)] == [r.timestamp for r in _records(4)]


def test_timestamp_none_means_now() -> None:
    before = int(time.time() * 1000)
    batch = build_batch([Record(b"k", b"v"), Record(None, None)])
    after = int(time.time() * 1000)
    for record in iter_records(batch):
        assert record.timestamp is not None
        assert before <= record.timestamp <= after
        assert record.offset in (0, 1)


def test_gzip_round_trip_actually_compresses() -> None:
    records = [Record(b"key", b"a" * 1000, timestamp=5) for _ in range(20)]
    plain = build_batch(records)
    compressed = build_batch(records, compression=1)
    assert len(compressed) < len(plain) // 10
    [h] = scan_batches(compressed)
    assert h.compression == 1
    assert h.record_count == 20
    assert _payload_fields(list(iter_records(compressed))) == _payload_fields(records)


def test_scan_accepts_memoryview_and_releases_buffer() -> None:
    buf = bytearray(build_batch(_records(3)) + build_batch(_records(2)))
    headers = scan_batches(memoryview(buf))
    assert [h.position for h in headers] == [0, headers[0].size]
    assert sum(h.size for h in headers) == len(buf)
    scan_batches(buf)
    read_partial_batches(buf)
    buf.extend(b"x")  # would raise BufferError if a memoryview export leaked


# --------------------------------------------------------------------------- validation errors


@given(data=st.data())
def test_crc_corruption_detected(data: st.DataObject) -> None:
    batch = bytearray(build_batch(_records(5)))
    index = data.draw(st.integers(min_value=21, max_value=len(batch) - 1), label="index")
    flip = data.draw(st.integers(min_value=1, max_value=255), label="xor")
    batch[index] ^= flip
    with pytest.raises(InvalidRecordError) as exc:
        scan_batches(batch)
    assert _code(exc) == ErrorCode.corrupt_message
    assert "CRC mismatch in batch at byte 0" in str(exc.value)


def test_crc_error_names_the_bad_batch() -> None:
    first = build_batch(_records(2))
    second = bytearray(build_batch(_records(2)))
    second[-1] ^= 0xFF
    with pytest.raises(InvalidRecordError, match=rf"batch at byte {len(first)}: stored 0x"):
        scan_batches(first + bytes(second))
    # Without CRC verification the same buffer scans fine.
    assert len(scan_batches(first + bytes(second), verify_crc=False)) == 2
    # iter_records verifies by default.
    with pytest.raises(InvalidRecordError, match="CRC mismatch"):
        list(iter_records(bytes(second)))


def test_fields_outside_crc_do_not_break_it() -> None:
    batch = bytearray(build_batch(_records(2)))
    struct.pack_into(">q", batch, 0, 123456)  # baseOffset
    struct.pack_into(">i", batch, 12, 42)  # partitionLeaderEpoch
    [h] = scan_batches(batch)
    assert (h.base_offset, h.partition_leader_epoch) == (123456, 42)


@pytest.mark.parametrize("magic", [0, 1])
def test_old_magic_is_an_invalid_record(magic: int) -> None:
    """Kafka's ProduceRequest.validateRecords: Produce v3+ carries magic v2 batches only."""
    with pytest.raises(InvalidRecordError) as exc:
        scan_batches(_legacy_message(magic))
    assert _code(exc) == ErrorCode.invalid_record
    assert f"magic {magic}" in str(exc.value)
    with pytest.raises(InvalidRecordError) as exc:
        read_partial_batches(_legacy_message(magic))
    assert _code(exc) == ErrorCode.invalid_record


@pytest.mark.parametrize("magic", [3, 127, -1])
def test_unknown_magic_is_corrupt(magic: int) -> None:
    """Kafka's ByteBufferLogInputStream: "Invalid magic found in record"."""
    batch = bytearray(build_batch(_records(1)))
    struct.pack_into(">b", batch, 16, magic)
    with pytest.raises(InvalidRecordError, match=f"invalid magic {magic}") as exc:
        scan_batches(batch)
    assert _code(exc) == ErrorCode.corrupt_message


def test_empty_buffer() -> None:
    with pytest.raises(InvalidRecordError) as exc:
        scan_batches(b"")
    assert _code(exc) == ErrorCode.corrupt_message
    assert read_partial_batches(b"") == []
    assert list(iter_all_records(b"")) == []


@pytest.mark.parametrize("cut", [1, 5, 20, 40, 70])
def test_truncated_batch(cut: int) -> None:
    whole = build_batch(_records(3))
    second = build_batch(_records(4, start=3))
    cut_at = len(second) - cut
    buffer = whole + second[:cut_at]
    with pytest.raises(InvalidRecordError) as exc:
        scan_batches(buffer)
    assert _code(exc) == ErrorCode.corrupt_message
    assert f"truncated batch at byte {len(whole)}" in str(exc.value)

    headers = read_partial_batches(buffer)
    assert len(headers) == 1
    assert headers[0].size == len(whole)
    assert [r.offset for r in iter_all_records(buffer)] == [0, 1, 2]


@pytest.mark.parametrize("length", [0, 11, 16])
def test_tiny_buffer_truncated(length: int) -> None:
    buffer = build_batch(_records(1))[:length]
    if length:
        with pytest.raises(InvalidRecordError) as exc:
            scan_batches(buffer)
        assert _code(exc) == ErrorCode.corrupt_message
    assert read_partial_batches(buffer) == []


def test_batch_length_too_small() -> None:
    batch = bytearray(build_batch(_records(1)))
    struct.pack_into(">i", batch, 8, 48)
    with pytest.raises(InvalidRecordError) as exc:
        scan_batches(batch)
    assert _code(exc) == ErrorCode.corrupt_message
    assert "batchLength 48" in str(exc.value)
    with pytest.raises(InvalidRecordError):
        read_partial_batches(batch)


def test_negative_record_count() -> None:
    batch = bytearray(build_batch(_records(1)))
    struct.pack_into(">i", batch, 57, -1)
    _fix_crc(batch)
    with pytest.raises(InvalidRecordError) as exc:
        scan_batches(batch)
    assert _code(exc) == ErrorCode.invalid_record


def test_negative_last_offset_delta() -> None:
    batch = bytearray(build_batch(_records(1)))
    struct.pack_into(">i", batch, 23, -1)
    _fix_crc(batch)
    with pytest.raises(InvalidRecordError) as exc:
        scan_batches(batch)
    assert _code(exc) == ErrorCode.invalid_record


def test_unknown_compression_codec() -> None:
    batch = bytearray(build_batch(_records(1)))
    struct.pack_into(">h", batch, 21, 5)
    _fix_crc(batch)
    with pytest.raises(InvalidRecordError) as exc:
        scan_batches(batch)
    assert _code(exc) == ErrorCode.invalid_record


@pytest.mark.parametrize(("codec", "name"), [(2, "snappy"), (3, "lz4"), (4, "zstd")])
def test_codec_flag_on_uncompressed_records_is_corrupt(codec: int, name: str) -> None:
    batch = bytearray(build_batch(_records(2)))
    struct.pack_into(">h", batch, 21, codec)
    _fix_crc(batch)
    [h] = scan_batches(batch)  # the header scan does not look inside
    assert h.compression == codec
    with pytest.raises(InvalidRecordError, match=f"(?i){name}") as exc:
        list(iter_records(batch))
    assert _code(exc) == ErrorCode.corrupt_message


def test_record_count_mismatch_detected_when_decoding() -> None:
    too_many = bytearray(build_batch(_records(2)))
    struct.pack_into(">i", too_many, 57, 3)
    _fix_crc(too_many)
    with pytest.raises(InvalidRecordError) as exc:
        list(iter_records(too_many))
    assert _code(exc) == ErrorCode.corrupt_message

    too_few = bytearray(build_batch(_records(2)))
    struct.pack_into(">i", too_few, 57, 1)
    _fix_crc(too_few)
    with pytest.raises(InvalidRecordError, match="left over") as exc:
        list(iter_records(too_few))
    assert _code(exc) == ErrorCode.invalid_record


def test_iter_records_wants_exactly_one_batch() -> None:
    two = build_batch(_records(1)) + build_batch(_records(1))
    with pytest.raises(InvalidRecordError, match="exactly one batch"):
        list(iter_records(two))


def test_bad_gzip_payload() -> None:
    batch = bytearray(build_batch(_records(3), compression=1))
    batch[BATCH_HEADER_SIZE + 12] ^= 0xFF
    batch[-3] ^= 0xFF
    _fix_crc(batch)
    with pytest.raises(InvalidRecordError) as exc:
        list(iter_records(batch))
    assert _code(exc) == ErrorCode.corrupt_message


@given(st.binary(max_size=200))
def test_garbage_only_raises_invalid_record_error(garbage: bytes) -> None:
    for fn in (scan_batches, read_partial_batches):
        with contextlib.suppress(InvalidRecordError):
            fn(garbage)
    with contextlib.suppress(InvalidRecordError):
        list(iter_all_records(garbage))


@given(data=st.data())
def test_mutated_records_only_raise_invalid_record_error(data: st.DataObject) -> None:
    """Corrupt the record area but fix the CRC: decoding must fail cleanly or succeed."""
    compression = data.draw(st.sampled_from([0, 1, 2, 3, 4]), label="compression")
    batch = bytearray(build_batch(_records(4), compression=compression))
    index = data.draw(st.integers(min_value=BATCH_HEADER_SIZE, max_value=len(batch) - 1))
    batch[index] = data.draw(st.integers(min_value=0, max_value=255), label="byte")
    _fix_crc(batch)
    with contextlib.suppress(InvalidRecordError):
        list(iter_records(batch))
    with contextlib.suppress(InvalidRecordError):
        record_keys(scan_batches(batch)[0], batch)


@pytest.mark.parametrize("compression", [0, 1])
def test_record_keys_of_a_compacted_batch(compression: int) -> None:
    """Offsets with gaps (two-byte deltas), a long key, a null key, a tombstone, headers."""
    records = [
        Record(b"k" * 200, b"v" * 300, (("h", b"x"),), timestamp=5, offset=1000),
        Record(None, b"keyless", timestamp=6, offset=1003),
        Record(b"gone", None, timestamp=7, offset=1100),
    ]
    batch = encode_batch(
        records,
        base_offset=1000,
        last_offset_delta=100,
        base_timestamp=5,
        max_timestamp=7,
        attributes=compression,
    )
    [header] = scan_batches(batch)
    assert record_keys(header, batch) == [
        (1000, b"k" * 200, True),
        (1003, None, True),
        (1100, b"gone", False),
    ]


# --------------------------------------------------------------------------- offsets


def _several_batches() -> tuple[bytes, list[int]]:
    counts = [3, 1, 7, 2]
    parts = []
    start = 0
    for i, n in enumerate(counts):
        parts.append(build_batch(_records(n, start=start), compression=i % 2))
        start += n
    return b"".join(parts), counts


def _served(buf: bytes, headers: list[BatchHeader]) -> bytes:
    """What the broker writes for each stored batch: served prefix, then bytes 16 on."""
    return b"".join(served_prefix(h) + buf[h.position + 16 : h.position + h.size] for h in headers)


def test_number_batches_gives_consecutive_offsets_without_touching_bytes() -> None:
    buf, counts = _several_batches()
    original = bytes(buf)
    headers = scan_batches(buf)
    next_offset = number_batches(headers, 1000, partition_leader_epoch=7)
    assert next_offset == 1000 + sum(counts)
    assert [h.base_offset for h in headers] == [1000 + sum(counts[:i]) for i in range(len(counts))]
    assert buf == original


def test_served_batches_carry_assigned_offsets_and_valid_crcs() -> None:
    buf, counts = _several_batches()
    headers = scan_batches(buf)
    number_batches(headers, 5, partition_leader_epoch=17)
    served = _served(buf, headers)
    rescanned = scan_batches(served, verify_crc=True)
    assert [(h.base_offset, h.partition_leader_epoch) for h in rescanned] == [
        (h.base_offset, 17) for h in headers
    ]
    assert [r.offset for r in iter_all_records(served)] == list(range(5, 5 + sum(counts)))
    # kafka-python reads the same offsets, epochs and CRCs.
    for h in rescanned:
        kbatch = DefaultRecordBatch(served[h.position : h.position + h.size])
        assert kbatch.validate_crc()
        assert kbatch.base_offset == h.base_offset
        assert kbatch.leader_epoch == 17

# --------------------------------------------------------------------------- build_batch arguments


def test_build_batch_argument_errors() -> None:
    with pytest.raises(ValueError, match="unknown compression"):
        build_batch(_records(1), compression=7)
    with pytest.raises(ValueError, match="at least one record"):
        build_batch([])
    with pytest.raises(ValueError, match="producer id"):
        build_batch(_records(1), is_transactional=True)
    with pytest.raises(ValueError, match="out of range"):
        build_batch(_records(1), producer_epoch=40000)


# --------------------------------------------------------------------------- kafka-python


def _kafka_python_batch(records: list[Record], compression: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=10_000_000,
    )
    for i, r in enumerate(records):
        builder.append(i, timestamp=r.timestamp, key=r.key, value=r.value, headers=list(r.headers))
    return bytes(builder.build())


@given(records=records_strategy)
@settings(suppress_health_check=[HealthCheck.too_slow])
def test_we_read_kafka_python_batches(records: list[Record]) -> None:
    batch = _kafka_python_batch(records, compression=0)
    [h] = scan_batches(batch)
    assert h.record_count == len(records)
    assert h.size == len(batch)
    decoded = list(iter_records(batch))
    assert _payload_fields(decoded) == _payload_fields(records)
    assert [r.offset for r in decoded] == list(range(len(records)))


def test_we_read_kafka_python_gzip_batch() -> None:
    records = [Record(b"k", b"z" * 500, (("a", b"b"),), timestamp=1000 + i) for i in range(10)]
    batch = _kafka_python_batch(records, compression=1)
    [h] = scan_batches(batch)
    assert h.compression == 1
    assert _payload_fields(list(iter_records(batch))) == _payload_fields(records)


@given(records=records_strategy, compression=st.sampled_from([0, 1]))
@settings(suppress_health_check=[HealthCheck.too_slow])
def test_kafka_python_reads_our_batches(records: list[Record], compression: int) -> None:
    batch = build_batch(records, base_offset=50, compression=compression, producer_id=-1)
    kbatch = DefaultRecordBatch(batch)
    assert kbatch.validate_crc()
    assert kbatch.magic == 2
    assert kbatch.base_offset == 50
    assert kbatch.records_count == len(records)
    assert kbatch.compression_type == compression
    decoded = list(kbatch)
    assert [(r.key, r.value, tuple(r.headers), r.timestamp) for r in decoded] == _payload_fields(
        records
    )
    assert [r.offset for r in decoded] == list(range(50, 50 + len(records)))


def test_kafka_python_reads_transactional_producer_fields() -> None:
    batch = build_batch(
        _records(3), producer_id=1234, producer_epoch=5, base_sequence=60, is_transactional=True
    )
    kbatch = DefaultRecordBatch(batch)
    assert kbatch.validate_crc()
    assert (kbatch.producer_id, kbatch.producer_epoch, kbatch.base_sequence) == (1234, 5, 60)
    assert kbatch.is_transactional
    assert kbatch.last_offset_delta == 2


def test_the_small_zigzag_table_is_the_general_encoding() -> None:
    from kplane.protocol import records

    assert all(
        records._SMALL_ZIGZAG[v + 1] == records._zigzag_bytes(v) for v in range(-1, 16384)
    )
