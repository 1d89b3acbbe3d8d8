"""Tests for protocol.record_filter: one stored batch filtered as Kafka's filterTo does."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

from kplane.protocol.compression import COMPRESSION_NAMES
from kplane.protocol.errors import ErrorCode
from kplane.protocol.record_filter import FilterResult, filter_batch
from kplane.protocol.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    InvalidRecordError,
    Record,
    build_batch,
    encode_batch,
    iter_records,
    scan_batches,
)

CODECS = sorted(COMPRESSION_NAMES)
CODEC_IDS = [COMPRESSION_NAMES[c] for c in CODECS]

_LOG_APPEND_TIME = 0x08
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_DELETE_HORIZON = 0x40
_TS = 1_700_000_000_000


def _records(n: int, ts: int = _TS) -> list[Record]:
    """Keyed records with values, every fourth keyless, every fifth a tombstone."""
    return [
        Record(
            key=None if i % 4 == 3 else f"key-{i % 3}".encode(),
            value=None if i % 5 == 4 else f"value-{i}".encode() * 4,
            headers=(("h", f"{i}".encode()), ("null", None)) if i % 2 else (),
            timestamp=ts + 10 * i,
        )
        for i in range(n)
    ]


def _producer_batch(codec: int, n: int = 10, *, is_transactional: bool = False) -> bytes:
    return build_batch(
        _records(n),
        base_offset=1000,
        producer_id=4242,
        producer_epoch=3,
        base_sequence=77,
        partition_leader_epoch=9,
        compression=codec,
        is_transactional=is_transactional,
    )


def _header(batch: bytes) -> BatchHeader:
    [header] = scan_batches(batch)  # CRC verified
    return header


def _patched(batch: bytes, fmt: str, pos: int, value: int) -> bytes:
    """``batch`` with one header field overwritten and the CRC computed again."""
    out = bytearray(batch)
    struct.pack_into(fmt, out, pos, value)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def _with_attributes(batch: bytes, bits: int) -> bytes:
    (attributes,) = struct.unpack_from(">h", batch, 21)
    return _patched(batch, ">h", 21, attributes | bits)


def _fields(records: list[Record]) -> list[tuple[object, ...]]:
    return [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in records]


def _same_producer_and_offsets(out: BatchHeader, original: BatchHeader) -> None:
    assert out.base_offset == original.base_offset
    assert out.last_offset_delta == original.last_offset_delta
    assert out.next_offset == original.next_offset
    assert out.partition_leader_epoch == original.partition_leader_epoch
    assert out.producer_id == original.producer_id
    assert out.producer_epoch == original.producer_epoch
    assert out.base_sequence == original.base_sequence
    assert out.is_transactional == original.is_transactional
    assert out.is_control == original.is_control
    assert out.log_append_time == original.log_append_time


# --------------------------------------------------------------------------- keep all


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_keep_all_returns_the_original_bytes(codec: int) -> None:
    batch = _producer_batch(codec)
    result = filter_batch(batch, lambda r: True)
    assert result.output is batch  # not re-encoded, not even copied
    assert result == FilterResult(batch, 10, 0, len(batch), len(batch), unchanged=True)


@pytest.mark.parametrize("wrap", [bytearray, memoryview], ids=["bytearray", "memoryview"])
def test_keep_all_from_a_buffer_returns_the_same_bytes(wrap: type) -> None:
    batch = _producer_batch(1)
    result = filter_batch(wrap(batch), lambda r: True)
    assert result.output == batch
    assert isinstance(result.output, bytes)
    assert result.unchanged


def test_keep_sees_every_record_in_order_with_offsets_and_timestamps() -> None:
    batch = build_batch(_records(7), base_offset=500, compression=4)
    seen: list[Record] = []

    def keep(record: Record) -> bool:
        seen.append(record)
        return True

    filter_batch(batch, keep)
    assert _fields(seen) == _fields(list(iter_records(batch)))
    assert [r.offset for r in seen] == list(range(500, 507))


def test_keyless_and_tombstone_records_reach_keep() -> None:
    batch = build_batch(_records(10), base_offset=0, compression=2)
    result = filter_batch(batch, lambda r: r.key is None or r.value is None)
    kept = list(iter_records(result.output or b""))
    assert [r.offset for r in kept] == [3, 4, 7, 9]
    assert [(r.key, r.value) for r in kept] == [
        (None, b"value-3" * 4),
        (b"key-1", None),
        (None, b"value-7" * 4),
        (b"key-0", None),
    ]


# --------------------------------------------------------------------------- keep none


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_keep_none_drops_the_batch(codec: int) -> None:
    batch = _producer_batch(codec)
    result = filter_batch(batch, lambda r: False)
    assert result == FilterResult(None, 0, 10, len(batch), 0, unchanged=False)


def test_keep_none_without_a_producer_is_dropped_even_when_asked_to_retain() -> None:
    batch = build_batch(_records(3), base_offset=10)
    result = filter_batch(batch, lambda r: False, retain_empty=True)
    assert result.output is None
    assert result.records_dropped == 3


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_keep_none_retains_an_empty_batch_for_the_producer(codec: int) -> None:
    batch = _producer_batch(codec, is_transactional=True)
    original = _header(batch)
    result = filter_batch(batch, lambda r: False, retain_empty=True)
    assert result.output is not None
    assert (result.records_kept, result.records_dropped) == (0, 10)
    assert result.bytes_out == len(result.output) == BATCH_HEADER_SIZE
    assert not result.unchanged
    out = _header(result.output)
    _same_producer_and_offsets(out, original)
    assert out.record_count == 0
    assert out.is_transactional
    # Kafka's DefaultRecordBatch.writeEmptyHeader: no codec, no base timestamp, the max kept.
    assert out.compression == 0
    assert out.base_timestamp == -1
    assert out.max_timestamp == original.max_timestamp
    assert list(iter_records(result.output)) == []
    kbatch = DefaultRecordBatch(result.output)
    assert kbatch.validate_crc()
    assert (kbatch.producer_id, kbatch.producer_epoch, kbatch.base_sequence) == (4242, 3, 77)
    assert kbatch.last_offset_delta == 9


def test_an_empty_batch_is_retained_again_or_dropped() -> None:
    empty = filter_batch(_producer_batch(3), lambda r: False, retain_empty=True).output
    assert empty is not None
    again = filter_batch(empty, lambda r: pytest.fail("no records to see"), retain_empty=True)
    assert again.output == empty
    assert (again.records_kept, again.records_dropped) == (0, 0)
    assert filter_batch(empty, lambda r: True).output is None


def test_retain_empty_keeps_the_log_append_time_bit_and_drops_the_delete_horizon() -> None:
    batch = _with_attributes(_producer_batch(1), _LOG_APPEND_TIME | _DELETE_HORIZON)
    out = _header(filter_batch(batch, lambda r: False, retain_empty=True).output or b"")
    assert out.log_append_time
    assert not out.has_delete_horizon


# --------------------------------------------------------------------------- keep some


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_keep_some_rebuilds_the_batch_in_place(codec: int) -> None:
    batch = _producer_batch(codec, n=12)
    original = _header(batch)
    records = list(iter_records(batch))
    result = filter_batch(batch, lambda r: r.offset % 3 == 1)
    assert result.output is not None
    assert (result.records_kept, result.records_dropped) == (4, 8)
    assert (result.bytes_in, result.bytes_out) == (len(batch), len(result.output))
    assert not result.unchanged
    out = _header(result.output)
    _same_producer_and_offsets(out, original)
    assert out.compression == codec
    assert out.attributes == original.attributes
    assert out.record_count == 4
    kept = [r for r in records if r.offset % 3 == 1]
    assert _fields(list(iter_records(result.output))) == _fields(kept)
    # As Kafka's MemoryRecordsBuilder: the first kept record's timestamp, the largest kept.
    assert out.base_timestamp == kept[0].timestamp
    assert out.max_timestamp == max(r.timestamp or 0 for r in kept)


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_dropping_the_last_record_keeps_the_last_offset_delta(codec: int) -> None:
    batch = _producer_batch(codec, n=6)
    result = filter_batch(batch, lambda r: r.offset < 1003)
    out = _header(result.output or b"")
    assert out.record_count == 3
    assert out.last_offset_delta == 5
    assert out.last_offset == 1005
    assert [r.offset for r in iter_records(result.output or b"")] == [1000, 1001, 1002]


def test_offset_deltas_keep_their_gaps() -> None:
    batch = build_batch(_records(8), base_offset=40, compression=0)
    result = filter_batch(batch, lambda r: r.offset in (41, 44, 46))
    assert [r.offset for r in iter_records(result.output or b"")] == [41, 44, 46]
    kbatch = DefaultRecordBatch(result.output or b"")
    assert kbatch.validate_crc()
    assert [r.offset for r in kbatch] == [41, 44, 46]


def test_timestamps_out_of_order_survive() -> None:
    stamps = [5_000, 3_000, 9_000, 1_000, 7_000]
    records = [Record(b"k", b"v", timestamp=t) for t in stamps]
    batch = build_batch(records, base_offset=0, compression=1)
    result = filter_batch(batch, lambda r: r.offset in (1, 3))
    out = _header(result.output or b"")
    assert (out.base_timestamp, out.max_timestamp) == (3_000, 3_000)
    assert [r.timestamp for r in iter_records(result.output or b"")] == [3_000, 1_000]


@pytest.mark.parametrize("codec", [0, 1], ids=["none", "gzip"])
def test_kafka_python_reads_the_rebuilt_batch(codec: int) -> None:
    batch = _producer_batch(codec, n=9, is_transactional=True)
    result = filter_batch(batch, lambda r: r.offset % 2 == 0)
    kbatch = DefaultRecordBatch(result.output or b"")
    assert kbatch.validate_crc()
    assert kbatch.compression_type == codec
    assert kbatch.is_transactional
    assert (kbatch.producer_id, kbatch.producer_epoch, kbatch.base_sequence) == (4242, 3, 77)
    assert kbatch.last_offset_delta == 8
    assert [(r.offset, r.key, r.value) for r in kbatch] == [
        (r.offset, r.key, r.value) for r in iter_records(batch) if r.offset % 2 == 0
    ]


def test_log_append_time_batch_keeps_its_time() -> None:
    batch = _with_attributes(_producer_batch(4), _LOG_APPEND_TIME)
    original = _header(batch)
    result = filter_batch(batch, lambda r: r.offset > 1004)
    out = _header(result.output or b"")
    assert out.log_append_time
    assert out.max_timestamp == original.max_timestamp
    # Kafka reads every record of such a batch at the append time and rebuilds from those.
    assert out.base_timestamp == original.max_timestamp
    assert {r.timestamp for r in iter_records(result.output or b"")} == {original.max_timestamp}


def test_filtering_twice_is_stable() -> None:
    batch = _producer_batch(2, n=10)
    once = filter_batch(batch, lambda r: r.offset % 2 == 1).output or b""
    assert filter_batch(once, lambda r: True).output is once
    twice = filter_batch(once, lambda r: r.offset > 1004).output or b""
    _same_producer_and_offsets(_header(twice), _header(batch))
    assert [r.offset for r in iter_records(twice)] == [1005, 1007, 1009]


# --------------------------------------------------------------------------- control batches


@pytest.mark.parametrize("retain_empty", [False, True])
def test_control_batches_pass_through_untouched(retain_empty: bool) -> None:
    marker = Record(key=b"\x00\x00\x00\x00", value=b"\x00\x00\x00\x00\x00\x00", timestamp=_TS)
    batch = build_batch(
        [marker], base_offset=77, producer_id=5, producer_epoch=1, is_transactional=True
    )
    batch = _with_attributes(batch, _CONTROL)

    def keep(record: Record) -> bool:
        raise AssertionError("keep is not asked about control records")

    result = filter_batch(batch, keep, retain_empty=retain_empty, delete_horizon_ms=1)
    assert result.output is batch
    assert result == FilterResult(batch, 1, 0, len(batch), len(batch), unchanged=True)


# --------------------------------------------------------------------------- delete horizon


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_a_kept_tombstone_gets_the_delete_horizon(codec: int) -> None:
    batch = _producer_batch(codec, n=6)  # offset 1004 is a tombstone
    records = list(iter_records(batch))
    horizon = _TS + 86_400_000
    result = filter_batch(batch, lambda r: True, delete_horizon_ms=horizon)
    assert not result.unchanged
    assert (result.records_kept, result.records_dropped) == (6, 0)
    out = _header(result.output or b"")
    _same_producer_and_offsets(out, _header(batch))
    assert out.has_delete_horizon
    assert out.compression == codec
    assert out.base_timestamp == horizon
    assert out.max_timestamp == _header(batch).max_timestamp
    assert _fields(list(iter_records(result.output or b""))) == _fields(records)


def test_no_tombstone_kept_no_delete_horizon() -> None:
    without = _producer_batch(1, n=4)  # records 0..3, none a tombstone
    assert filter_batch(without, lambda r: True, delete_horizon_ms=1).output is without
    batch = _producer_batch(1, n=6)  # record 4 is a tombstone
    result = filter_batch(batch, lambda r: r.value is not None, delete_horizon_ms=1)
    assert result.records_dropped == 1
    assert not _header(result.output or b"").has_delete_horizon


def test_an_existing_delete_horizon_is_kept() -> None:
    batch = _producer_batch(0, n=10)
    marked = filter_batch(batch, lambda r: True, delete_horizon_ms=123).output or b""
    assert filter_batch(marked, lambda r: True, delete_horizon_ms=999).output is marked
    result = filter_batch(marked, lambda r: r.offset >= 1004, delete_horizon_ms=999)
    out = _header(result.output or b"")
    assert out.has_delete_horizon
    assert out.base_timestamp == 123
    assert _fields(list(iter_records(result.output or b""))) == _fields(
        [r for r in iter_records(batch) if r.offset >= 1004]
    )


def test_negative_delete_horizon_is_refused() -> None:
    with pytest.raises(ValueError, match="delete horizon"):
        filter_batch(_producer_batch(0), lambda r: True, delete_horizon_ms=-1)


# --------------------------------------------------------------------------- malformed input


def _refused(batch: bytes, code: ErrorCode | None = None) -> InvalidRecordError:
    with pytest.raises(InvalidRecordError) as info:
        filter_batch(batch, lambda r: True)
    if code is not None:
        assert info.value.error_code == code
    return info.value


def test_empty_and_truncated_input_is_refused() -> None:
    batch = _producer_batch(1)
    _refused(b"", ErrorCode.corrupt_message)
    for cut in (1, 20, BATCH_HEADER_SIZE - 1, BATCH_HEADER_SIZE, len(batch) - 1):
        _refused(batch[:cut], ErrorCode.corrupt_message)


def test_a_length_past_the_bytes_is_refused() -> None:
    batch = _producer_batch(0)
    longer = bytearray(batch)
    struct.pack_into(">i", longer, 8, len(batch))  # 12 bytes more than present
    _refused(bytes(longer), ErrorCode.corrupt_message)


def test_a_bad_crc_is_refused() -> None:
    batch = bytearray(_producer_batch(0))
    batch[-1] ^= 0xFF
    assert "CRC" in _refused(bytes(batch), ErrorCode.corrupt_message).message


def test_two_batches_or_trailing_bytes_are_refused() -> None:
    batch = _producer_batch(0)
    assert "exactly one batch" in _refused(batch + batch).message
    _refused(batch + b"\x00" * 5, ErrorCode.corrupt_message)


def test_legacy_magic_is_refused() -> None:
    batch = bytearray(_producer_batch(0))
    batch[16] = 1
    _refused(bytes(batch), ErrorCode.invalid_record)


@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=["gzip", "snappy", "lz4", "zstd"])
def test_a_payload_that_does_not_decompress_is_refused(codec: int) -> None:
    batch = bytearray(_producer_batch(codec))
    batch[BATCH_HEADER_SIZE:] = b"\x07" * (len(batch) - BATCH_HEADER_SIZE)
    fixed = _patched(bytes(batch), ">i", 8, len(batch) - 12)
    _refused(fixed, ErrorCode.corrupt_message)


def test_a_record_count_that_does_not_match_is_refused() -> None:
    batch = _producer_batch(0, n=3)
    _refused(_patched(batch, ">i", 57, 4), ErrorCode.corrupt_message)  # records run out
    _refused(_patched(batch, ">i", 57, 2), ErrorCode.invalid_record)  # bytes left over


def test_an_offset_delta_past_the_last_offset_delta_is_refused() -> None:
    batch = _producer_batch(0, n=3)
    error = _refused(_patched(batch, ">i", 23, 1), ErrorCode.invalid_record)
    assert "offset delta 2" in error.message


def test_offset_deltas_that_do_not_increase_are_refused() -> None:
    records = [
        Record(b"a", b"1", timestamp=_TS, offset=5),
        Record(b"b", b"2", timestamp=_TS, offset=5),
    ]
    batch = encode_batch(
        records, base_offset=5, last_offset_delta=1, base_timestamp=_TS, max_timestamp=_TS
    )
    _refused(batch, ErrorCode.invalid_record)


# --------------------------------------------------------------------------- encode_batch


def test_encode_batch_refuses_records_outside_the_batch_or_without_time() -> None:
    with pytest.raises(ValueError, match="outside the batch"):
        encode_batch(
            [Record(b"k", b"v", timestamp=1, offset=9)],
            base_offset=5,
            last_offset_delta=3,
            base_timestamp=1,
            max_timestamp=1,
        )
    with pytest.raises(ValueError, match="no timestamp"):
        encode_batch(
            [Record(b"k", b"v", offset=5)],
            base_offset=5,
            last_offset_delta=3,
            base_timestamp=1,
            max_timestamp=1,
        )
    with pytest.raises(ValueError, match="codec"):
        encode_batch(
            [], base_offset=5, last_offset_delta=3, base_timestamp=1, max_timestamp=1, attributes=7
        )


# --------------------------------------------------------------------------- properties


keys = st.none() | st.binary(max_size=8)
values = st.none() | st.binary(max_size=60)
headers = st.lists(
    st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=2
).map(tuple)
records_strategy = st.lists(
    st.builds(
        Record,
        key=keys,
        value=values,
        headers=headers,
        timestamp=st.integers(min_value=0, max_value=2**41),
    ),
    min_size=1,
    max_size=20,
)


@given(
    records=records_strategy,
    mask=st.lists(st.booleans(), min_size=20, max_size=20),
    codec=st.sampled_from(CODECS),
    base_offset=st.integers(min_value=0, max_value=2**40),
    producer_id=st.sampled_from([-1, 0, 99]),
)
@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
def test_filtered_batches_hold_exactly_the_kept_records(
    records: list[Record], mask: list[bool], codec: int, base_offset: int, producer_id: int
) -> None:
    batch = build_batch(
        records,
        base_offset=base_offset,
        compression=codec,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=0 if producer_id >= 0 else -1,
    )
    decoded = list(iter_records(batch))
    wanted = [r for r in decoded if mask[r.offset - base_offset]]
    result = filter_batch(batch, lambda r: mask[r.offset - base_offset], retain_empty=True)
    assert result.records_kept == len(wanted)
    assert result.records_kept + result.records_dropped == len(records)
    assert result.bytes_in == len(batch)
    if not wanted and producer_id < 0:
        assert result.output is None and result.bytes_out == 0
        return
    assert result.output is not None
    assert result.bytes_out == len(result.output)
    assert result.unchanged == (len(wanted) == len(records))
    out = _header(result.output)
    _same_producer_and_offsets(out, _header(batch))
    assert out.compression == (codec if wanted else 0)
    assert _fields(list(iter_records(result.output))) == _fields(wanted)
