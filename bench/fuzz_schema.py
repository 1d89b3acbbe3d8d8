"""Random request bodies that follow a kio schema, with at most one targeted flaw.

``BodyWriter`` walks a kio request class field by field (its ``kafka_type`` metadata, its
nullability, array or struct shape, tagged fields for flexible versions) and writes random
but valid values: nulls where nullable, empty and non-empty arrays, unicode strings,
extreme integers, sometimes a real record batch. Given a ``Twist`` it breaks one eligible
spot instead: an array count or string length far beyond the frame, null where the schema
forbids it, or an unknown tagged field (KIP-482).
"""

from __future__ import annotations

import dataclasses
import enum
import random
import struct
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)

from kplane.protocol.body_scan import write_uvarint
from kplane.protocol.records import Record, build_batch


class Twist(enum.Enum):
    """The one flaw a body may carry."""

    HUGE_COUNT = "huge_count"
    HUGE_LENGTH = "huge_length"
    NULL_REQUIRED = "null_required"
    UNKNOWN_TAG = "unknown_tag"


NAMES = ("fuzz", "fuzz-0", "fuzz-1", "t", "__consumer_offsets", "grp", "")
UNICODE = ("ü", "名前", "😀", "a\u0000b", "\u202e", "ÿ" * 40)
_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1, ">b"),
    "int16": (-(2**15), 2**15 - 1, ">h"),
    "error_code": (-(2**15), 2**15 - 1, ">h"),
    "int32": (-(2**31), 2**31 - 1, ">i"),
    "timedelta_i32": (-(2**31), 2**31 - 1, ">i"),
    "int64": (-(2**63), 2**63 - 1, ">q"),
    "timedelta_i64": (-(2**63), 2**63 - 1, ">q"),
    "datetime_i64": (-(2**63), 2**63 - 1, ">q"),
    "uint8": (0, 2**8 - 1, ">B"),
    "uint16": (0, 2**16 - 1, ">H"),
    "uint32": (0, 2**32 - 1, ">I"),
    "uint64": (0, 2**64 - 1, ">Q"),
}
_SIZED = ("string", "bytes", "records")


class BodyWriter:
    """Writes one random body; ``twist`` is applied at most once, at a random spot."""

    def __init__(self, rng: random.Random, twist: Twist | None = None) -> None:
        self.rng = rng
        self.twist = twist
        self.twisted = False
        self.out = bytearray()

    def body(self, cls: type[Any]) -> bytes:
        self.entity(cls)
        return bytes(self.out)

    def _take_twist(self, twist: Twist) -> bool:
        if self.twist is twist and not self.twisted and self.rng.random() < 0.4:
            self.twisted = True
            return True
        return False

    def entity(self, cls: type[Any]) -> None:
        flexible = bool(cls.__flexible__)
        tagged: list[tuple[int, dataclasses.Field[Any]]] = []
        for field in dataclasses.fields(cls):
            tag = get_field_tag(field)
            if tag is None:
                self.field(field, flexible)
            else:
                tagged.append((int(tag), field))
        if flexible:
            self.tags(tagged)

    def tags(self, tagged: list[tuple[int, dataclasses.Field[Any]]]) -> None:
        chosen: list[tuple[int, bytes]] = []
        for tag, field in tagged:
            if self.rng.random() < 0.3:
                chosen.append((tag, self._detached(field)))
        if self._take_twist(Twist.UNKNOWN_TAG) or self.rng.random() < 0.05:
            top = max((t for t, _ in tagged), default=-1)
            tag = self.rng.choice((top + 1, top + 7, 1000, 2**31 - 1))
            chosen.append((tag, self.rng.randbytes(self.rng.choice((0, 1, 3, 17)))))
        self.out += write_uvarint(len(chosen))
        for tag, value in sorted(chosen):
            self.out += write_uvarint(tag) + write_uvarint(len(value)) + value

    def _detached(self, field: dataclasses.Field[Any]) -> bytes:
        """A tagged field's value, written apart to learn its size."""
        saved, self.out = self.out, bytearray()
        self.field(field, True, tagged=True)
        value, self.out = bytes(self.out), saved
        return value

    def field(self, field: dataclasses.Field[Any], flexible: bool, tagged: bool = False) -> None:
        kind = classify_field(field)
        nullable = is_optional(field) and not tagged
        if kind.is_array:
            if self._null(nullable, flexible, wide=True):
                return
            count = self.rng.choice((0, 1, 1, 2, 3))
            if self._take_twist(Twist.HUGE_COUNT):
                self._count(flexible, self.rng.choice((2**31 - 1, 2**31 - 2, 2**20)))
                return
            self._count(flexible, count)
            for _ in range(count):
                self._element(field, kind, flexible)
            return
        if isinstance(kind, EntityField):
            if nullable:
                if self.rng.random() < 0.15:
                    self.out += b"\xff"
                    return
                self.out += b"\x01"
            self.entity(kind.type_)
            return
        self.primitive(field.metadata["kafka_type"], flexible, nullable)

    def _element(self, field: dataclasses.Field[Any], kind: Any, flexible: bool) -> None:
        if isinstance(kind, EntityTupleField):
            self.entity(kind.type_)
        else:
            self.primitive(field.metadata["kafka_type"], flexible, nullable=False)

    def _count(self, flexible: bool, count: int) -> None:
        self.out += write_uvarint(count + 1) if flexible else struct.pack(">i", count)

    def _null(self, nullable: bool, flexible: bool, wide: bool) -> bool:
        """Write a null length when the field is nullable (sometimes) or the null twist is
        due; True when written."""
        if not ((nullable and self.rng.random() < 0.15) or (
            not nullable and self._take_twist(Twist.NULL_REQUIRED)
        )):
            return False
        if flexible:
            self.out += b"\x00"
        else:
            self.out += struct.pack(">i", -1) if wide else struct.pack(">h", -1)
        return True

    def primitive(self, kafka_type: str, flexible: bool, nullable: bool) -> None:
        if kafka_type in _SIZED:
            self._sized(kafka_type, flexible, nullable)
        elif kafka_type == "uuid":
            self.out += self.rng.choice((bytes(16), self.rng.randbytes(16)))
        elif kafka_type == "bool":
            self.out += self.rng.choice((b"\x00", b"\x01"))
        elif kafka_type == "float64":
            self.out += struct.pack(">d", self.rng.choice((0.0, 1.5, -1e300, 1e-300)))
        else:
            low, high, fmt = _INT_RANGES[kafka_type]
            self.out += struct.pack(fmt, self._int(low, high))

    def _int(self, low: int, high: int) -> int:
        roll = self.rng.random()
        if roll < 0.6:
            return max(low, min(high, self.rng.randint(-1, 10)))
        if roll < 0.85:
            return self.rng.randint(low, high)
        return self.rng.choice((low, high, max(low, -1), 0))

    def _sized(self, kafka_type: str, flexible: bool, nullable: bool) -> None:
        wide = kafka_type != "string"
        if self._null(nullable, flexible, wide):
            return
        data = self._string().encode() if kafka_type == "string" else self._bytes(kafka_type)
        if self._take_twist(Twist.HUGE_LENGTH):
            if flexible:
                self.out += write_uvarint(self.rng.choice((2**31 - 1, 2**32 - 1, 2**20)))
            elif wide:
                self.out += struct.pack(">i", self.rng.choice((2**15 - 1, 2**31 - 2)))
            else:
                self.out += struct.pack(">h", self.rng.choice((2**15 - 1, 2**15 - 2)))
            self.out += data
            return
        if flexible:
            self.out += write_uvarint(len(data) + 1)
        else:
            self.out += struct.pack(">i" if wide else ">h", len(data))
        self.out += data

    def _string(self) -> str:
        roll = self.rng.random()
        if roll < 0.5:
            return self.rng.choice(NAMES)
        if roll < 0.75:
            return self.rng.choice(UNICODE)
        alphabet = "abcXYZ019._-é😀"
        return "".join(self.rng.choice(alphabet) for _ in range(self.rng.randint(1, 300)))

    def _bytes(self, kafka_type: str) -> bytes:
        if kafka_type == "records" and self.rng.random() < 0.5:
            count = self.rng.randint(1, 3)
            records = [
                Record(key=self.rng.choice((None, b"k")), value=self.rng.randbytes(8),
                       timestamp=1_700_000_000_000)
                for _ in range(count)
            ]
            return build_batch(records, producer_id=self.rng.choice((-1, 0, 7)))
        return self.rng.randbytes(self.rng.choice((0, 1, 8, 64)))
