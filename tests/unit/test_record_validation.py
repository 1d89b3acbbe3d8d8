"""Tests for protocol.record_validation, protocol.record_walk and protocol.compression: what a
leader refuses in produced batches (Kafka's LogValidator rules), and the strided record walk
agreeing with a record-by-record parse and with kafka-python's reader."""

from __future__ import annotations

import random
import struct
import time
import tracemalloc
import zlib

import cramjam
import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.errors import CorruptRecordError
from kafka.record.default_records import DefaultRecordBatch

from kplane.protocol.compression import (
    DecompressedSizeExceeded,
    DecompressionError,
    compress,
    decompress,
)
from kplane.protocol.errors import ErrorCode
from kplane.protocol.record_validation import ValidationPolicy, validate_batches
from kplane.protocol.record_walk import walk_records
from kplane.protocol.records import (
    BATCH_HEADER_SIZE,
    InvalidRecordError,
    Record,
    build_batch,
    iter_records,
    scan_batches,
)

NOW = 1_700_000_000_000
V9 = ValidationPolicy(produce_version=9)
CODECS = [0, 1, 2, 3, 4]


def _uniform(
    n: int, size: int = 100, headers: tuple[tuple[str, bytes | None], ...] = ()
) -> list[Record]:
    """Records as one producer writes them: same sizes, timestamps a few ms apart."""
    return [
        Record(key=None, value=b"v" * size, headers=headers, timestamp=NOW + i // 7)
        for i in range(n)
    ]


def _fix_crc(batch: bytearray) -> None:
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))


FRAME_AT = len(b"request header")


def _in_frame(batch: bytes | bytearray) -> memoryview:
    """The records as Produce hands them over: a view of the request's frame."""
    return memoryview(b"request header" + bytes(batch) + b"more")[FRAME_AT:-4]


def _outcome(data: memoryview, policy: ValidationPolicy, now: int, at: int | None) -> object:
    try:
        validate_batches(data, scan_batches(data), policy, now, at)
    except InvalidRecordError as exc:
        return exc
    return None


def _validate(batch: bytes | bytearray, policy: ValidationPolicy = V9, now: int = NOW) -> None:
    """Validate as Produce does, the records walked in their frame; a copy of them walked
    alone must get the same verdict."""
    data = _in_frame(batch)
    in_place = _outcome(data, policy, now, FRAME_AT)
    copied = _outcome(data, policy, now, None)
    if isinstance(in_place, InvalidRecordError):
        assert isinstance(copied, InvalidRecordError)
        assert (copied.error_code, str(copied), copied.record_errors) == (
            in_place.error_code,
            str(in_place),
            in_place.record_errors,
        )
        raise in_place
    assert copied is None


def test_records_in_their_frame_are_walked_there_not_copied() -> None:
    data = _in_frame(build_batch(_uniform(10_000)))
    batches = scan_batches(data)
    validate_batches(data, batches, V9, NOW, FRAME_AT)  # the walk's lookup tables, once
    tracemalloc.start()
    try:
        validate_batches(data, batches, V9, NOW, FRAME_AT)
        _size, in_place = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        validate_batches(data, batches, V9, NOW)
        _size, copied = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert copied > len(data) > 10 * in_place


def _refusal(batch: bytes | bytearray, policy: ValidationPolicy = V9) -> InvalidRecordError:
    with pytest.raises(InvalidRecordError) as exc:
        _validate(batch, policy)
    return exc.value


def _with_header_field(batch: bytes, fmt: str, offset: int, value: int) -> bytearray:
    edited = bytearray(batch)
    struct.pack_into(fmt, edited, offset, value)
    _fix_crc(edited)
    return edited


def _compressed(records_bytes: bytes, codec: int, count: int) -> bytes:
    """A batch of ``count`` records whose (uncompressed) record bytes are given."""
    template = bytearray(build_batch(_uniform(count)))
    payload = compress(codec, records_bytes) if codec else records_bytes
    batch = template[:BATCH_HEADER_SIZE] + payload
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">h", batch, 21, codec)
    _fix_crc(batch)
    return bytes(batch)


def _record_bytes(batch: bytes) -> bytes:
    return batch[BATCH_HEADER_SIZE:]


def _walk_each(data: bytes, count: int) -> None:
    """The record-by-record walk: a timestamp check that accepts all turns runs off."""
    walk_records(data, BATCH_HEADER_SIZE, len(data), count, lambda _i, _d: None)


def _walk_runs(data: bytes, count: int) -> None:
    walk_records(data, BATCH_HEADER_SIZE, len(data), count)


# ----------------------------------------------------------------------- accepted batches
header_lists = st.lists(
    st.tuples(st.text(max_size=12), st.none() | st.binary(max_size=20)), max_size=3
).map(tuple)
records_strategy = st.lists(
    st.builds(
        Record,
        key=st.none() | st.binary(max_size=30),
        value=st.none() | st.binary(max_size=200),
        headers=header_lists,
        timestamp=st.integers(min_value=NOW - 10**6, max_value=NOW + 10**6),
    ),
    min_size=1,
    max_size=30,
)


@given(records=records_strategy, codec=st.sampled_from(CODECS))
@settings(suppress_health_check=[HealthCheck.too_slow])
def test_well_formed_batches_pass(records: list[Record], codec: int) -> None:
    _validate(build_batch(records, compression=codec))


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("count", [1, 63, 64, 65, 9000])
def test_long_uniform_batches_pass_across_offset_delta_widths(codec: int, count: int) -> None:
    """zigzag(index) grows a byte at 64 and 8192 records: runs stop and restart there."""
    _validate(build_batch(_uniform(count, size=20), compression=codec))


def test_exactly_one_batch_per_partition() -> None:
    data = build_batch(_uniform(3)) + build_batch(_uniform(5), compression=1)
    error = _refusal(data)
    assert error.error_code == ErrorCode.invalid_record
    assert "exactly one record batch" in error.message


def test_idempotent_batch_passes_with_its_sequence() -> None:
    _validate(build_batch(_uniform(3), producer_id=7, producer_epoch=0, base_sequence=0))


# ----------------------------------------------------------------------- batch fields
def test_base_offset_must_be_zero() -> None:
    error = _refusal(build_batch(_uniform(2), base_offset=5))
    assert error.error_code == ErrorCode.invalid_record
    assert "baseOffset should be 0" in error.message


def test_huge_last_offset_delta_is_refused() -> None:
    """The fuzzing find: lastOffsetDelta 10**9 would move the log end by a billion."""
    batch = _with_header_field(build_batch(_uniform(3)), ">i", 23, 10**9)
    error = _refusal(batch)
    assert error.error_code == ErrorCode.invalid_record
    assert "inconsistent batch offset range [0, 1000000000]" in error.message


@pytest.mark.parametrize("count", [0, 2, 4])
def test_record_count_must_match_last_offset_delta(count: int) -> None:
    batch = _with_header_field(build_batch(_uniform(3)), ">i", 57, count)
    assert _refusal(batch).error_code == ErrorCode.invalid_record


@pytest.mark.parametrize("count", [2, 4])
def test_records_must_match_the_count(count: int) -> None:
    """Header count and lastOffsetDelta agree, but the records do not."""
    batch = build_batch(_uniform(3))
    batch = _with_header_field(batch, ">i", 57, count)
    batch = _with_header_field(bytes(batch), ">i", 23, count - 1)
    error = _refusal(batch)
    assert error.error_code == ErrorCode.invalid_record
    assert "incorrect declared batch size" in error.message


def test_control_batch_from_a_client_is_refused() -> None:
    batch = _with_header_field(build_batch(_uniform(1)), ">h", 21, 0x20)
    assert "control records" in _refusal(batch).message


def test_producer_id_needs_a_base_sequence() -> None:
    error = _refusal(build_batch(_uniform(2), producer_id=7, producer_epoch=0, base_sequence=-1))
    assert error.error_code == ErrorCode.invalid_record
    assert "invalid sequence number -1" in error.message


def test_zstd_needs_produce_v7() -> None:
    batch = build_batch(_uniform(2), compression=4)
    error = _refusal(batch, ValidationPolicy(produce_version=6))
    assert error.error_code == ErrorCode.unsupported_compression_type
    _validate(batch, ValidationPolicy(produce_version=7))


# ----------------------------------------------------------------------- records
def _uniform_batch(n: int = 200) -> bytearray:
    return bytearray(build_batch(_uniform(n, size=30, headers=(("trace", b"t"),))))


def _record_start(batch: bytes, index: int) -> int:
    """Where record ``index`` starts: a walk over the length varints (1 or 2 bytes here)."""
    pos = BATCH_HEADER_SIZE
    for _ in range(index):
        raw, width = batch[pos], 1
        if raw >= 0x80:
            raw, width = (raw & 0x7F) | batch[pos + 1] << 7, 2
        pos += width + (raw >> 1)
    return pos


@pytest.mark.parametrize(
    ("offset_in_record", "value", "reason"),
    [
        (3, 0x02, "offset delta"),  # offsetDelta of record 150 rewritten to 1
        (1, 0x80, "attributes byte"),
        (0, 0x7E, "invalid record size"),  # length 63: the record claims its neighbour
        (5, 0x03, "invalid key length -2"),
    ],
)
def test_a_bad_record_deep_in_a_run_is_named(
    offset_in_record: int, value: int, reason: str
) -> None:
    batch = _uniform_batch()
    at = _record_start(batch, 150) + offset_in_record
    if offset_in_record == 3:  # offset delta of 150 is two bytes wide: write a 1-byte varint
        batch[at : at + 2] = bytes((value, 0x00))
    else:
        batch[at] = value
    _fix_crc(batch)
    error = _refusal(batch)
    assert error.error_code == ErrorCode.invalid_record
    assert reason in error.message
    assert [index for index, _ in error.record_errors] == [150]


def test_header_key_must_be_utf8() -> None:
    batch = bytearray(build_batch(_uniform(3, headers=(("ab", b"x"),))))
    key_at = batch.index(b"ab", BATCH_HEADER_SIZE)
    batch[key_at] = 0xFF
    _fix_crc(batch)
    error = _refusal(batch)
    assert "UTF-8" in error.message
    with pytest.raises(CorruptRecordError, match="UnicodeDecodeError"):  # kafka-python
        list(DefaultRecordBatch(bytes(batch)))


def test_random_records_under_a_valid_crc_are_refused() -> None:
    """The fuzzing find: any bytes under a recomputed CRC used to be stored."""
    batch = bytearray(build_batch(_uniform(20)))
    batch[BATCH_HEADER_SIZE:] = random.Random(12).randbytes(len(batch) - BATCH_HEADER_SIZE)
    _fix_crc(batch)
    assert _refusal(batch).error_code == ErrorCode.invalid_record


def test_bytes_after_the_records_are_refused() -> None:
    batch = bytearray(build_batch(_uniform(2)))
    batch += b"\x00\x00"
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    _fix_crc(batch)
    assert "bytes left after 2 records" in _refusal(batch).message


@given(data=st.data())
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
def test_strided_walk_agrees_with_the_record_by_record_walk(data: st.DataObject) -> None:
    """Mutate a few bytes of a uniform batch: the run check and the one-record-at-a-time
    parse must agree, and whatever they accept kafka-python reads with index offsets."""
    count = data.draw(st.sampled_from([2, 17, 80, 300]), label="count")
    headers = data.draw(st.sampled_from([(), (("k", b"v"),), (("id", None), ("é", b""))]))
    key = data.draw(st.sampled_from([None, b"", b"key"]))
    batch = bytearray(
        build_batch(
            [
                Record(key=key, value=b"x" * 9, headers=headers, timestamp=NOW + 3 * i)
                for i in range(count)
            ]
        )
    )
    for _ in range(data.draw(st.integers(min_value=1, max_value=3), label="edits")):
        at = data.draw(st.integers(min_value=BATCH_HEADER_SIZE, max_value=len(batch) - 1))
        batch[at] = data.draw(st.integers(min_value=0, max_value=255), label="byte")
    _fix_crc(batch)
    raw = bytes(batch)
    verdicts = []
    for walk in (_walk_each, _walk_runs):
        try:
            walk(raw, count)
            verdicts.append(None)
        except InvalidRecordError as exc:
            verdicts.append(exc.record_errors[0][0] if exc.record_errors else -1)
    assert verdicts[0] == verdicts[1], verdicts
    if verdicts[0] is None:
        decoded = list(DefaultRecordBatch(raw))
        assert [r.offset for r in decoded] == list(range(count))
        assert [r.offset for r in iter_records(raw)] == list(range(count))


@given(records=records_strategy)
def test_kafka_python_reads_whatever_passes_after_one_mutation(records: list[Record]) -> None:
    batch = bytearray(build_batch(records))
    for at in range(BATCH_HEADER_SIZE, len(batch), 7):
        mutated = bytearray(batch)
        mutated[at] ^= 0x41
        raw = bytes(mutated)
        try:
            _walk_runs(raw, len(records))
        except InvalidRecordError:
            continue
        try:
            assert len(list(DefaultRecordBatch(raw))) == len(records)
        except CorruptRecordError as exc:  # pragma: no cover - the assertion's message
            pytest.fail(f"accepted a batch kafka-python cannot read: {exc}")


# ----------------------------------------------------------------------- compression
def _xerial(data: bytes, block: int = 32 * 1024) -> bytes:
    out = bytearray(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
    for i in range(0, len(data), block):
        chunk = bytes(cramjam.snappy.compress_raw(data[i : i + block]))
        out += struct.pack(">i", len(chunk)) + chunk
    return bytes(out)


def test_snappy_in_kafkas_xerial_framing_passes() -> None:
    records = _record_bytes(build_batch(_uniform(2000)))
    batch = bytearray(_compressed(records, 0, 2000))
    batch[BATCH_HEADER_SIZE:] = _xerial(records)
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">h", batch, 21, 2)
    _fix_crc(batch)
    _validate(batch)
    assert len(list(iter_records(bytes(batch)))) == 2000


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_garbage_under_a_codec_flag_is_corrupt(codec: int) -> None:
    """Includes the fuzzing find: a batch flagged gzip whose records are not gzip."""
    records = _record_bytes(build_batch(_uniform(3)))
    batch = bytearray(_compressed(records, 0, 3))
    struct.pack_into(">h", batch, 21, codec)
    _fix_crc(batch)
    error = _refusal(batch)
    assert error.error_code == ErrorCode.corrupt_message


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_compressed_records_are_walked(codec: int) -> None:
    """Valid compression of invalid records: offset deltas 0, 0."""
    records = _record_bytes(build_batch(_uniform(1))) * 2
    error = _refusal(_compressed(records, codec, 2))
    assert error.error_code == ErrorCode.invalid_record
    assert error.record_errors[0][0] == 1


@pytest.mark.parametrize("codec", [1, 3, 4])
def test_decompression_bomb_is_refused_before_inflating(codec: int) -> None:
    zeros = bytes(16 << 20)
    bomb = compress(codec, zeros)
    started = time.perf_counter()
    with pytest.raises(DecompressedSizeExceeded):
        decompress(codec, bomb, limit=1 << 20)
    assert time.perf_counter() - started < 1.0
    assert decompress(codec, bomb, limit=16 << 20) == zeros


def test_snappy_bomb_is_refused_from_its_preamble() -> None:
    claims_a_gigabyte = b"\x80\x80\x80\x80\x04" + b"\x00" * 10
    with pytest.raises(DecompressedSizeExceeded):
        decompress(2, claims_a_gigabyte, limit=1 << 20)
    with pytest.raises(DecompressedSizeExceeded):
        decompress(2, _xerial(bytes(3 << 20)), limit=1 << 20)


def test_zstd_rle_bomb_is_refused_from_block_headers() -> None:
    """A frame of RLE blocks (4 bytes each, 128 KiB out each): refused before decoding."""
    rle_block = struct.pack("<I", (128 << 10) << 3 | 1 << 1)[:3] + b"\x00"
    frame = struct.pack("<I", 0xFD2FB528) + b"\x00\x50" + rle_block * 9999
    last = struct.pack("<I", (128 << 10) << 3 | 1 << 1 | 1)[:3] + b"\x00"
    with pytest.raises(DecompressedSizeExceeded):
        decompress(4, frame + last, limit=64 << 20)


def test_gzip_with_trailing_bytes_is_refused() -> None:
    with pytest.raises(DecompressionError, match="after the gzip stream"):
        decompress(1, compress(1, b"abc") + b"junk")
    with pytest.raises(DecompressionError, match="truncated"):
        decompress(1, compress(1, b"abc" * 100)[:-10])
    assert zlib.decompress(compress(1, b"abc"), wbits=31) == b"abc"


def test_bomb_batch_answers_message_too_large() -> None:
    records = _record_bytes(build_batch(_uniform(1)))
    batch = _compressed(records + bytes(3 << 20), 4, 1)
    error = _refusal(batch, ValidationPolicy(produce_version=9, max_decompressed_bytes=1 << 20))
    assert error.error_code == ErrorCode.message_too_large


# ----------------------------------------------------------------------- timestamps
def test_create_time_outside_the_allowed_difference_is_refused() -> None:
    records = [Record(key=None, value=b"v", timestamp=NOW + delta) for delta in (0, -5000, 10)]
    policy = ValidationPolicy(produce_version=9, timestamp_difference_max_ms=1000)
    error = _refusal(build_batch(records), policy)
    assert error.error_code == ErrorCode.invalid_timestamp
    assert [index for index, _ in error.record_errors] == [1]
    _validate(build_batch(records), ValidationPolicy(produce_version=9))


def test_no_timestamp_is_exempt() -> None:
    records = [Record(key=None, value=b"v", timestamp=-1)]
    policy = ValidationPolicy(produce_version=9, timestamp_difference_max_ms=1000)
    _validate(build_batch(records), policy)


def test_producer_may_not_set_log_append_time() -> None:
    batch = _with_header_field(build_batch(_uniform(3)), ">h", 21, 0x08)
    struct.pack_into(">q", batch, 35, -1)
    _fix_crc(batch)
    error = _refusal(batch)
    assert error.error_code == ErrorCode.invalid_timestamp
    assert len(error.record_errors) == 3
    on_log_append_time_topic = ValidationPolicy(produce_version=9, log_append_time=True)
    assert (
        _refusal(
            _with_header_field(build_batch(_uniform(1)), ">h", 21, 0x08), on_log_append_time_topic
        ).error_code
        == ErrorCode.invalid_timestamp
    )


# ----------------------------------------------------------------------- every record named
@pytest.mark.parametrize("timestamps", [False, True], ids=["runs", "record by record"])
def test_every_keyless_record_is_refused_once_runs_included(timestamps: bool) -> None:
    """Identical keyless records form runs the walk skips over: each is still named, and a
    keyless record's timestamp is not judged too (Kafka's one error per record)."""
    records = [Record(key=None, value=b"same") for _ in range(40)]
    records[10:20] = [Record(key=b"k", value=b"same") for _ in range(10)]
    data = build_batch(records)
    check = (lambda _i, _d: "too old") if timestamps else None
    refused = walk_records(data, BATCH_HEADER_SIZE, len(data), 40, check, "no key")
    keyless = [*range(10), *range(20, 40)]
    assert [(r.index, r.message) for r in refused if not r.timestamp] == [
        (i, "no key") for i in keyless
    ]
    assert [r.index for r in refused if r.timestamp] == (list(range(10, 20)) if timestamps else [])


def test_keyless_and_timestamp_refusals_together_are_invalid_timestamp() -> None:
    """As Kafka's processRecordErrors: any refused timestamp makes the batch's error
    INVALID_TIMESTAMP; every refused record is in record_errors."""
    now = int(time.time() * 1000)
    records = [
        Record(key=None, value=b"v", timestamp=now),
        Record(key=b"k", value=b"v", timestamp=now - 10_000_000),
        Record(key=b"k", value=b"v", timestamp=now),
    ]
    policy = ValidationPolicy(
        produce_version=9, timestamp_difference_max_ms=1000, compacted_partition="t-0"
    )
    batch = build_batch(records, base_timestamp=now)
    with pytest.raises(InvalidRecordError) as raised:
        validate_batches(batch, scan_batches(batch), policy, now)
    assert raised.value.error_code == ErrorCode.invalid_timestamp
    assert [i for i, _ in raised.value.record_errors] == [0, 1]
