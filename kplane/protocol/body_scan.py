"""Scan a message body against its schema before kio's decoder sees it (sans-IO).

kio's native decoder trusts the counts it reads: an array announcing 2^32-2 elements is
allocated up front and the process aborts. The scan walks the schema of the kio class
and checks, as Kafka's readers do, that every count, length and size fits in the bytes
left, that nothing non-nullable is null, and that known tagged fields fill exactly the
size they announce. Tagged fields the schema does not know are skipped (KIP-482): the
scan returns the body without them, since kio refuses tags it does not know.

A scan step takes ``(buffer, position, end, edits)`` and returns the position after its
field; ``edits`` collects ``(start, stop, replacement)`` spans for unknown tagged fields.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from functools import cache
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)

Edit = tuple[int, int, bytes]
Step = Callable[[bytes, int, int, list[Edit]], int]

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_TIMEDELTA_MAX_MS = 9_223_372_036_854_775
"""The most ms kio's decoder turns into a timedelta (int64 microseconds, about 292,000
years): ``timedelta_i64`` fields are an int64 of ms on the wire, where Kafka takes any value,
and kio fails past this."""

_NONE_TIME = b"\xff" * 8
"""-1 as an int64: a nullable ``datetime_i64`` that kio reads as None."""

_FIXED_SIZES = {
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "float64": 8,
    "uuid": 16,
}


class MalformedBody(Exception):
    """A body that does not fit its schema; the message says where and why."""


def uvarint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """Read an unsigned varint (at most 5 bytes) below ``end``; return (value, next)."""
    value = 0
    shift = 0
    while True:
        if pos >= end:
            raise MalformedBody("truncated unsigned varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise MalformedBody("unsigned varint longer than 5 bytes")


_ONE_BYTE_UVARINTS = tuple(bytes((v,)) for v in range(0x80))


def write_uvarint(value: int) -> bytes:
    """Encode an unsigned varint."""
    if 0 <= value < 0x80:  # one byte: most counts and lengths
        return _ONE_BYTE_UVARINTS[value]
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def apply_edits(buf: bytes, start: int, end: int, edits: list[Edit]) -> bytes:
    """``buf[start:end]`` with each edit's span replaced (edits ordered, not overlapping)."""
    pieces: list[bytes] = []
    pos = start
    for edit_start, edit_stop, replacement in edits:
        pieces.append(buf[pos:edit_start])
        pieces.append(replacement)
        pos = edit_stop
    pieces.append(buf[pos:end])
    return b"".join(pieces)


def scan(cls: type[Any], buf: bytes, offset: int, end: int | None = None) -> tuple[bytes, int]:
    """Check the body of ``cls`` in ``buf[offset:end]``; return the buffer and offset to
    decode from: the same ones, or a copy of the body without unknown tagged fields."""
    stop = len(buf) if end is None else end
    edits: list[Edit] = []
    _entity_step(cls)(buf, offset, stop, edits)  # type: ignore[arg-type]
    if not edits:
        return buf, offset
    return apply_edits(buf, offset, stop, edits), 0


# ---------------------------------------------------------------- compiling steps


def _skip(size: int, what: str) -> Step:
    def step(buf: bytes, pos: int, end: int, edits: list[Edit]) -> int:
        pos += size
        if pos > end:
            raise MalformedBody(f"{what}: {size} bytes needed, {end - pos + size} left")
        return pos

    return step


def _length(flexible: bool, wide: bool) -> Callable[[bytes, int, int], tuple[int, int]]:
    """Reader of a length or count: compact (uvarint, minus one) or int16/int32; -1 null."""
    if flexible:

        def compact(buf: bytes, pos: int, end: int) -> tuple[int, int]:
            value, pos = uvarint(buf, pos, end)
            return value - 1, pos

        return compact
    fmt = _INT32 if wide else _INT16
    width = fmt.size

    def legacy(buf: bytes, pos: int, end: int) -> tuple[int, int]:
        if pos + width > end:
            raise MalformedBody("truncated length")
        return fmt.unpack_from(buf, pos)[0], pos + width

    return legacy


def _sized(name: str, flexible: bool, nullable: bool, wide: bool) -> Step:
    """A string (int16 length when legacy) or bytes/records (int32 length when legacy)."""
    read_length = _length(flexible, wide)

    def step(buf: bytes, pos: int, end: int, edits: list[Edit]) -> int:
        size, pos = read_length(buf, pos, end)
        if size < 0:
            if size == -1 and nullable:
                return pos
            raise MalformedBody(f"{name}: null or negative length {size} where not nullable")
        pos += size
        if pos > end:
            raise MalformedBody(f"{name}: length {size} exceeds the {end - pos + size} bytes left")
        return pos

    return step


def _array(name: str, flexible: bool, nullable: bool, element: Step, min_size: int) -> Step:
    read_count = _length(flexible, wide=True)
    per_element = max(min_size, 1)  # as Kafka: never more elements than bytes left

    def step(buf: bytes, pos: int, end: int, edits: list[Edit]) -> int:
        count, pos = read_count(buf, pos, end)
        if count < 0:
            if count == -1 and nullable:
                return pos
            raise MalformedBody(f"{name}: null or negative count {count} where not nullable")
        if count * per_element > end - pos:
            raise MalformedBody(f"{name}: {count} elements cannot fit in {end - pos} bytes")
        for _ in range(count):
            pos = element(buf, pos, end, edits)
        return pos

    return step


def _nullable_struct(inner: Step) -> Step:
    """KIP-893: a nullable struct is an int8 marker (-1 null) before the struct."""

    def step(buf: bytes, pos: int, end: int, edits: list[Edit]) -> int:
        if pos >= end:
            raise MalformedBody("truncated nullable struct marker")
        marker = buf[pos]
        if marker == 0xFF:
            return pos + 1
        if marker != 1:
            raise MalformedBody(f"nullable struct marker {marker} is neither -1 nor 1")
        return inner(buf, pos + 1, end, edits)

    return step


def _clamped_ms(name: str) -> Step:
    """An int64 of ms beyond what a timedelta holds is clamped to it (an edit), so a
    retention of "practically forever" decodes instead of failing."""

    def step(buf: bytes, pos: int, end: int, edits: list[Edit]) -> int:
        if pos + 8 > end:
            raise MalformedBody(f"{name}: 8 bytes needed, {end - pos} left")
        (value,) = _INT64.unpack_from(buf, pos)
        if abs(value) > _TIMEDELTA_MAX_MS:
            clamped = _TIMEDELTA_MAX_MS if value > 0 else -_TIMEDELTA_MAX_MS
            edits.append((pos, pos + 8, _INT64.pack(clamped)))
        return pos + 8

    return step


def _epoch_floor(name: str, nullable: bool) -> Step:
    """A timestamp before the epoch (Kafka's -1 for "none", as in a refused
    CreateDelegationToken's answer) is read as the epoch (an edit): kio's datetimes start
    there, and its decoder fails on less. Where the field is nullable, -1 stays (None)."""

    def step(buf: bytes, pos: int, end: int, edits: list[Edit]) -> int:
        if pos + 8 > end:
            raise MalformedBody(f"{name}: 8 bytes needed, {end - pos} left")
        if buf[pos] & 0x80 and not (nullable and buf[pos : pos + 8] == _NONE_TIME):
            edits.append((pos, pos + 8, bytes(8)))
        return pos + 8

    return step


def _primitive_step(name: str, kafka_type: str, flexible: bool, nullable: bool) -> Step:
    if kafka_type == "timedelta_i64":
        return _clamped_ms(name)
    if kafka_type == "datetime_i64":
        return _epoch_floor(name, nullable)
    size = _FIXED_SIZES.get(kafka_type)
    if size is not None:
        return _skip(size, name)
    if kafka_type == "string":
        return _sized(name, flexible, nullable, wide=False)
    if kafka_type in ("bytes", "records"):
        return _sized(name, flexible, nullable, wide=True)
    raise LookupError(f"no scan for kafka_type {kafka_type!r} ({name})")


def _primitive_min(kafka_type: str, flexible: bool) -> int:
    size = _FIXED_SIZES.get(kafka_type)
    if size is not None:
        return size
    if flexible:
        return 1
    return 2 if kafka_type == "string" else 4


def _field_step(field: dataclasses.Field[Any], flexible: bool) -> tuple[Step, int]:
    """The step for one field and the fewest bytes it can take."""
    name = field.name
    nullable = is_optional(field)
    kind = classify_field(field)
    if isinstance(kind, EntityField | EntityTupleField):
        inner = _entity_step(kind.type_)
        inner_min = _entity_min(kind.type_)
        if isinstance(kind, EntityTupleField):
            return _array(name, flexible, nullable, inner, inner_min), 1 if flexible else 4
        if nullable:
            return _nullable_struct(inner), 1
        return inner, inner_min
    kafka_type = field.metadata["kafka_type"]
    if kind.is_array:
        element = _primitive_step(name, kafka_type, flexible, nullable=False)
        element_min = _primitive_min(kafka_type, flexible)
        return _array(name, flexible, nullable, element, element_min), 1 if flexible else 4
    return _primitive_step(name, kafka_type, flexible, nullable), _primitive_min(
        kafka_type, flexible
    )


def _merge(steps: list[tuple[Step, int | None]]) -> list[Step]:
    """Fold runs of fixed-size fields into one skip (the hot path reads fewer steps)."""
    merged: list[Step] = []
    run = 0
    for step, fixed in steps:
        if fixed is not None:
            run += fixed
            continue
        if run:
            merged.append(_skip(run, "fixed-size fields"))
            run = 0
        merged.append(step)
    if run:
        merged.append(_skip(run, "fixed-size fields"))
    return merged


def _tagged_section(tagged: dict[int, Step]) -> Step:
    """A flexible struct's tagged fields: known ones checked, unknown ones dropped."""

    def step(buf: bytes, pos: int, end: int, edits: list[Edit]) -> int:
        section_start = pos
        count, pos = uvarint(buf, pos, end)
        if count > end - pos:
            raise MalformedBody(f"{count} tagged fields cannot fit in {end - pos} bytes")
        kept: list[bytes] = []
        rewritten = False
        for _ in range(count):
            field_start = pos
            tag, pos = uvarint(buf, pos, end)
            size, pos = uvarint(buf, pos, end)
            value_end = pos + size
            if value_end > end:
                raise MalformedBody(f"tagged field {tag}: size {size} exceeds the bytes left")
            known = tagged.get(tag)
            if known is None:
                rewritten = True
            else:
                inner: list[Edit] = []
                if known(buf, pos, value_end, inner) != value_end:
                    raise MalformedBody(f"tagged field {tag} does not fill its {size} bytes")
                if inner:
                    value = apply_edits(buf, pos, value_end, inner)
                    kept.append(write_uvarint(tag) + write_uvarint(len(value)) + value)
                    rewritten = True
                else:
                    kept.append(buf[field_start:value_end])
            pos = value_end
        if rewritten:
            edits.append((section_start, pos, write_uvarint(len(kept)) + b"".join(kept)))
        return pos

    return step


@cache
def _entity_step(cls: type[Any]) -> Step:
    flexible = bool(cls.__flexible__)
    plain: list[tuple[Step, int | None]] = []
    tagged: dict[int, Step] = {}
    for field in dataclasses.fields(cls):
        step, _ = _field_step(field, flexible)
        tag = get_field_tag(field)
        if tag is not None:
            tagged[int(tag)] = step
        else:
            kafka_type = field.metadata.get("kafka_type")
            fixed = (
                _FIXED_SIZES.get(kafka_type)
                if kafka_type
                and kafka_type not in ("timedelta_i64", "datetime_i64")
                and not classify_field(field).is_array
                else None
            )
            plain.append((step, fixed))
    steps = _merge(plain)
    if flexible:
        steps.append(_tagged_section(tagged))
    if len(steps) == 1:
        return steps[0]

    def entity(buf: bytes, pos: int, end: int, edits: list[Edit]) -> int:
        for step in steps:
            pos = step(buf, pos, end, edits)
        return pos

    return entity


@cache
def _entity_min(cls: type[Any]) -> int:
    """The fewest bytes one ``cls`` takes on the wire (bounds an array's count)."""
    flexible = bool(cls.__flexible__)
    total = 1 if flexible else 0
    for field in dataclasses.fields(cls):
        if get_field_tag(field) is None:
            total += _field_step(field, flexible)[1]
    return total
