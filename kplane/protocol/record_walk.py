"""Prove the records of a magic-v2 batch well formed without a Python loop per record.

A record is ``length`` (varint), ``attributes`` (int8), ``timestampDelta`` (varlong),
``offsetDelta`` (varint), ``key`` and ``value`` (varint length, -1 for null, then bytes) and
``headers`` (varint count, then per header a varint key length, the UTF-8 key, a varint
value length and the value). :func:`walk_records` checks, as Kafka's ``DefaultRecord.readFrom``
does plus what Python consumers need, that every record's fields lie inside its length and
fill it exactly, that the lengths are not below -1 (keys, values) or 0 (header counts and
header keys), that header keys are UTF-8, that ``offsetDelta`` is the record's index, that
the attributes byte reads as a one-byte varint (kafka-python and aiokafka decode it so), and
that the records fill the batch exactly.

Producers write runs of records with the same layout: the same sizes and the same varint
widths, only the timestamp delta and offset delta changing. One record of a run is parsed in
Python; the rest are checked together, one field byte at a time across the whole run, with
C-speed operations on a strided slice (``data[first:last:record_size]``): a length byte must
repeat, a timestamp byte keep its continuation bit, an offset delta byte match a precomputed
table of ``zigzag(index)`` bytes. Runs are tried on windows that grow fourfold, so a batch
whose layout keeps changing costs at most a constant factor more than a per-record walk.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from kplane.protocol.errors import ErrorCode
from kplane.protocol.records import InvalidRecordError
from kplane.protocol.varint import VarintError, read_unsigned_varint

__all__ = ("walk_records",)

_HIGH_BIT = bytes(b & 0x80 for b in range(256))
_FIRST_WINDOW = 16
_NULL_LENGTH = 1  # the varint of -1: a null key
_MIN_BODY = 6  # attributes, and one byte each for the five varints after it
_OFFSET_DELTA_LIMITS = (0, 64, 8192, 1 << 20)  # zigzag(i) = 2i needs u bytes for i < 2**(7u-1)

# Run checks: (kind, offset in the record, argument).
_SAME = 0  # the byte equals argument
_MORE = 1  # the byte has its continuation bit set
_LAST = 2  # the byte has its continuation bit clear
_DELTA = 3  # the byte is byte ``argument`` of the offset delta varint of that width

Check = tuple[int, int, int]


def _nullable_bytes(data: bytes, p: int, index: int, what: str, marks: list[int]) -> int:
    """Skip a varint length (-1 for null) and its bytes; mark where the bytes start."""
    raw = data[p]
    p += 1
    if raw >= 0x80:
        raw, p = read_unsigned_varint(data, p - 1, 32)
    marks.append(p)
    if raw & 1 and raw != 1:
        raise _refuse(index, f"invalid {what} length {(raw >> 1) ^ -1}")
    return p + (raw >> 1)


def _refuse(index: int, message: str) -> InvalidRecordError:
    text = f"record {index}: {message}"
    return InvalidRecordError(ErrorCode.invalid_record, text, ((index, text),))


def _parse(data: bytes, pos: int, end: int, index: int) -> tuple[list[int], int]:
    """Check one record at ``pos``; return its field marks and its timestamp delta.

    The marks are where the length, attributes, timestamp delta, offset delta, key length,
    key, value length, value and header count start, then per header where its key
    length, key, value length and value start, then the record's end. Varints are read
    inline when one byte long (the common case), else by
    :func:`protocol.varint.read_unsigned_varint`; a field running past the record's end
    leaves the position past it for good, which the final size check catches.
    """
    try:
        raw = data[pos]
        p = pos + 1
        if raw >= 0x80:
            raw, p = read_unsigned_varint(data, pos, 32)
        length = (raw >> 1) ^ -(raw & 1)
        body = p
        stop = body + length
        if length < _MIN_BODY or stop > end:
            raise _refuse(
                index,
                f"invalid record size: {length} bytes announced, {end - body} left in the batch",
            )
        if data[body] >= 0x80:
            raise _refuse(index, f"attributes byte 0x{data[body]:02x} has its high bit set")
        ts_at = body + 1
        raw = data[ts_at]
        od_at = ts_at + 1
        if raw >= 0x80:
            raw, od_at = read_unsigned_varint(data, ts_at, 64)
        ts_delta = (raw >> 1) ^ -(raw & 1)
        raw = data[od_at]
        key_at = od_at + 1
        if raw >= 0x80:
            raw, key_at = read_unsigned_varint(data, od_at, 32)
        if raw != index << 1:
            raise _refuse(index, f"offset delta {(raw >> 1) ^ -(raw & 1)}, expected {index}")
        marks = [pos, body, ts_at, od_at, key_at]
        p = key_at
        for what in ("key", "value"):
            p = _nullable_bytes(data, p, index, what, marks)
            marks.append(p)
        raw = data[p]
        p += 1
        if raw >= 0x80:
            raw, p = read_unsigned_varint(data, p - 1, 32)
        count = (raw >> 1) ^ -(raw & 1)
        if count < 0 or count > stop - p:
            raise _refuse(index, f"invalid header count {count}")
        for _ in range(count):
            marks.append(p)
            raw = data[p]
            p += 1
            if raw >= 0x80:
                raw, p = read_unsigned_varint(data, p - 1, 32)
            key = p
            p += raw >> 1
            if raw & 1 or p > stop:
                raise _refuse(index, f"invalid header key length {(raw >> 1) ^ -(raw & 1)}")
            try:
                data[key:p].decode("utf-8")
            except UnicodeDecodeError:
                raise _refuse(index, "header key is not UTF-8") from None
            marks += (key, p)
            p = _nullable_bytes(data, p, index, "header value", marks)
    except IndexError:
        raise _refuse(index, "record runs past the end of the batch") from None
    except VarintError as exc:
        raise _refuse(index, str(exc)) from None
    if p != stop:
        raise _refuse(
            index, f"invalid record size: {length} bytes announced, fields use {p - body}"
        )
    marks.append(stop)
    return marks, ts_delta


def _run_checks(data: bytes, marks: list[int]) -> list[Check] | None:
    """The byte checks that records of the same layout as ``marks`` must pass; None when
    the layout cannot be checked across records (a non-ASCII header key)."""
    start, body, ts_at, od_at, key_at, key, value_at, value, count_at = marks[:9]
    headers = marks[9:-1]
    checks: list[Check] = [(_LAST, body - start, 0)]  # attributes
    checks += ((_MORE, p - start, 0) for p in range(ts_at, od_at - 1))
    checks.append((_LAST, od_at - 1 - start, 0))
    checks += ((_DELTA, p - start, p - od_at) for p in range(od_at, key_at))
    same = [(start, body), (key_at, key), (value_at, value)]
    same.append((count_at, headers[0] if headers else marks[-1]))
    for h in range(0, len(headers), 4):
        key_len_at, header_key, value_len_at, header_value = headers[h : h + 4]
        if not data[header_key:value_len_at].isascii():
            return None
        checks += ((_LAST, p - start, 0) for p in range(header_key, value_len_at))
        same += ((key_len_at, header_key), (value_len_at, header_value))
    for lo, hi in same:
        checks += ((_SAME, p - start, data[p]) for p in range(lo, hi))
    return checks


@cache
def _delta_table(width: int, byte: int) -> bytes:
    """Byte ``byte`` of the ``width``-byte varint of zigzag(i), for every i of that width."""
    lo, hi = _OFFSET_DELTA_LIMITS[width - 1], _OFFSET_DELTA_LIMITS[width]
    # (2i >> 7*byte) & 0x7f: every value 0..127 repeated 2**(7*byte-1) times (0, 2, 4, ...
    # for byte 0), the cycle repeated up to hi.
    if byte == 0:
        cycle = bytes(range(0, 128, 2))
    else:
        cycle = b"".join(bytes((v,)) * (1 << (7 * byte - 1)) for v in range(128))
    digits = (cycle * (hi // len(cycle) + 1))[lo:hi]
    if byte < width - 1:
        digits = digits.translate(bytes(b | 0x80 for b in range(256)))
    return digits


def _prefix(column: bytes, fill: int) -> int:
    """How many leading bytes of ``column`` equal ``fill``."""
    return len(column) - len(column.lstrip(bytes((fill,))))


def _matching(
    data: bytes, first: int, stride: int, count: int, checks: list[Check], index: int
) -> int:
    """How many of the ``count`` records at ``first``, ``first + stride``, ... (indexes from
    ``index``) pass every check, counted from the first."""
    good = count
    last = first + (count - 1) * stride + 1
    for kind, offset, arg in checks:
        column = data[first + offset : last + offset : stride]
        if kind == _SAME:
            if column.count(arg) != count:
                good = min(good, _prefix(column, arg))
        elif kind == _LAST:
            if not column.isascii():
                good = min(good, _prefix(column.translate(_HIGH_BIT), 0))
        elif kind == _MORE:
            high = column.translate(_HIGH_BIT)
            if high.count(0x80) != count:
                good = min(good, _prefix(high, 0x80))
        else:
            width = _width(index)
            lo = _OFFSET_DELTA_LIMITS[width - 1]
            expected = _delta_table(width, arg)[index - lo : index - lo + count]
            if column != expected:
                diff = int.from_bytes(column) ^ int.from_bytes(expected)
                good = min(good, count - 1 - (diff.bit_length() - 1) // 8)
        if good == 0:
            return 0
    return good


def _width(index: int) -> int:
    """Bytes in the varint of zigzag(index); 4 stands for "too wide for a run"."""
    if index < 64:
        return 1
    if index < 8192:
        return 2
    return 3 if index < 1 << 20 else 4


def _run(data: bytes, pos: int, end: int, count: int, index: int, marks: list[int]) -> int:
    """How many records after the one at ``pos`` (record ``index``, parsed into ``marks``)
    share its layout, up to the ``count`` the batch still declares."""
    size = marks[-1] - pos
    width = _width(index)
    if width > 3:
        return 0
    head = marks[1] - pos
    nxt = pos + size
    limit = min(count, (end - nxt) // size, _OFFSET_DELTA_LIMITS[width] - index - 1)
    if limit <= 0 or data[nxt : nxt + head] != data[pos : pos + head]:
        return 0
    checks = _run_checks(data, marks)
    if checks is None:
        return 0
    done = 0
    window = _FIRST_WINDOW
    while done < limit:
        step = min(window, limit - done)
        good = _matching(data, nxt + done * size, size, step, checks, index + 1 + done)
        done += good
        if good < step:
            break
        window *= 4
    return done


TimestampCheck = Callable[[int, int], str | None]
"""(record index, timestamp delta) -> why the timestamp is refused, or None."""


@dataclass(frozen=True, slots=True)
class RecordRefusal:
    """One record refused (Kafka's RecordError): its index in the batch, why, and whether
    it was its timestamp (``INVALID_TIMESTAMP``) or else the record (``INVALID_RECORD``)."""

    index: int
    message: str
    timestamp: bool


def walk_records(
    data: bytes,
    pos: int,
    end: int,
    count: int,
    timestamp_check: TimestampCheck | None = None,
    keyless_refusal: str | None = None,
) -> list[RecordRefusal]:
    """Check that ``data[pos:end]`` holds exactly ``count`` well-formed records; returns
    the records refused, each once, as Kafka's LogValidator does: a record without a key
    when ``keyless_refusal`` (the message) is given — a compacted topic — else one whose
    timestamp ``timestamp_check`` refuses (it sees every record: no runs are taken then).

    Malformed records raise :class:`InvalidRecordError` (``INVALID_RECORD``, with the
    offending record's index in ``record_errors`` when one is at fault). Records of a run
    share the key length of the one parsed, so a keyless parsed record refuses its run.
    """
    refused: list[RecordRefusal] = []
    index = 0
    while index < count:
        if pos >= end:
            raise InvalidRecordError(
                ErrorCode.invalid_record,
                f"incorrect declared batch size: {count} records announced, {index} found",
            )
        marks, ts_delta = _parse(data, pos, end, index)
        keyless = keyless_refusal is not None and data[marks[4]] == _NULL_LENGTH
        nxt = marks[-1]
        run = 0
        if timestamp_check is not None:
            refusal = None if keyless else timestamp_check(index, ts_delta)
            if refusal is not None:
                refused.append(RecordRefusal(index, f"record {index}: {refusal}", True))
        elif nxt < end and data[nxt] == data[pos]:  # the next record may be of the same size
            run = _run(data, pos, end, count - index - 1, index, marks)
        if keyless_refusal is not None and keyless:
            run_end = index + 1 + run
            refused.extend(RecordRefusal(i, keyless_refusal, False) for i in range(index, run_end))
        pos = nxt + run * (nxt - pos)
        index += 1 + run
    if pos != end:
        raise InvalidRecordError(
            ErrorCode.invalid_record,
            f"incorrect declared batch size: {end - pos} bytes left after {count} records",
        )
    return refused
