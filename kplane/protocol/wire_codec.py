"""Reading and writing Kafka's primitive fields by hand, for the hand codecs of the hot
path (Produce, Fetch): every count and length read is checked against the bytes left
before it is used, as :mod:`protocol.body_scan` checks them for kio (sans-IO)."""

from __future__ import annotations

import struct
import uuid

from kplane.protocol.body_scan import MalformedBody, uvarint, write_uvarint

I8 = struct.Struct(">b")
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")


class WireReader:
    """Reads fields of ``buf`` from ``pos`` on; nothing past the end is trusted."""

    __slots__ = ("buf", "end", "pos")

    def __init__(self, buf: bytes, pos: int, end: int | None = None) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf) if end is None else end

    def take(self, size: int, what: str) -> int:
        """Claim ``size`` bytes; their start."""
        start = self.pos
        self.pos = claim(start, size, self.end, what)
        return start

    def unpack(self, fmt: struct.Struct, what: str) -> tuple[int, ...]:
        """The fixed-size fields of ``fmt``."""
        return fmt.unpack_from(self.buf, self.take(fmt.size, what))

    def int32(self, what: str) -> int:
        return int(I32.unpack_from(self.buf, self.take(4, what))[0])

    def uuid(self, what: str) -> uuid.UUID:
        start = self.take(16, what)
        return uuid.UUID(bytes=bytes(self.buf[start : start + 16]))

    def uvarint(self) -> int:
        pos = self.pos
        if pos < self.end:
            byte = self.buf[pos]
            if byte < 0x80:  # one byte: most counts, lengths and tags
                self.pos = pos + 1
                return byte
        value, self.pos = uvarint(self.buf, pos, self.end)
        return value

    def length(self, flexible: bool, wide: bool, what: str) -> int:
        """A length or count (compact: uvarint minus one; else int16/int32); -1 is null."""
        n, self.pos = read_length(self.buf, self.pos, self.end, flexible, wide, what)
        return n

    def count(self, flexible: bool, element_min: int, what: str) -> int:
        """A non-nullable array's count, at most what the bytes left can hold."""
        n, self.pos = read_count(self.buf, self.pos, self.end, flexible, element_min, what)
        return n

    def string(self, flexible: bool, nullable: bool, what: str) -> str | None:
        n = self.length(flexible, False, what)
        if n < 0:
            if nullable:
                return None
            raise MalformedBody(f"{what}: null where not nullable")
        text = read_text(self.buf, self.pos, n, self.end, what)
        self.pos += n
        return text

    def nullable_bytes(self, flexible: bool, what: str) -> bytes | None:
        n = self.length(flexible, True, what)
        if n < 0:
            return None
        start = self.take(n, what)
        return bytes(self.buf[start : start + n])

    def tagged_fields(self) -> list[tuple[int, WireReader]]:
        """The tagged fields (KIP-482) here: each tag with a reader bounded to its bytes."""
        fields = []
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            size = self.uvarint()
            start = self.take(size, "tagged field")
            fields.append((tag, WireReader(self.buf, start, start + size)))
        return fields

    def skip_tagged_fields(self) -> None:
        self.pos = skip_tagged_fields(self.buf, self.pos, self.end)


def claim(pos: int, size: int, end: int, what: str) -> int:
    """The position after ``size`` bytes at ``pos``, when they lie before ``end``."""
    stop = pos + size
    if stop > end:
        raise MalformedBody(f"{what}: {size} bytes needed, {end - pos} left")
    return stop


def read_length(
    buf: bytes, pos: int, end: int, flexible: bool, wide: bool, what: str
) -> tuple[int, int]:
    """The length or count at ``pos`` (compact: uvarint minus one; else int16, or int32
    when ``wide``; -1 is null) and the position after it, nothing read past ``end``."""
    if flexible:
        if pos < end:
            byte = buf[pos]
            if byte < 0x80:  # one byte: most counts and lengths
                return byte - 1, pos + 1
        value, pos = uvarint(buf, pos, end)
        return value - 1, pos
    stop = claim(pos, 4 if wide else 2, end, what)
    return (I32 if wide else I16).unpack_from(buf, pos)[0], stop


def read_count(
    buf: bytes, pos: int, end: int, flexible: bool, element_min: int, what: str
) -> tuple[int, int]:
    """A non-nullable array's count, at most what the bytes left can hold (elements of at
    least ``element_min`` bytes), and the position after it."""
    n, pos = read_length(buf, pos, end, flexible, True, what)
    if n < 0:
        raise MalformedBody(f"{what}: null where not nullable")
    if n * element_min > end - pos:
        raise MalformedBody(f"{what}: {n} elements announced, {end - pos} bytes left")
    return n, pos


def read_text(buf: bytes, pos: int, n: int, end: int, what: str) -> str:
    """The UTF-8 string of ``n`` bytes at ``pos``, nothing read past ``end``."""
    try:
        return bytes(buf[pos : claim(pos, n, end, what)]).decode()
    except UnicodeDecodeError as exc:
        raise MalformedBody(f"{what}: not UTF-8") from exc


def skip_tagged_fields(buf: bytes, pos: int, end: int) -> int:
    """The position after the tagged fields (KIP-482) at ``pos``, none of them kept."""
    if pos < end and buf[pos] == 0:  # none, as nearly always
        return pos + 1
    count, pos = uvarint(buf, pos, end)
    for _ in range(count):
        _tag, pos = uvarint(buf, pos, end)
        size, pos = uvarint(buf, pos, end)
        pos = claim(pos, size, end, "tagged field")
    return pos


def length_prefix(n: int, flexible: bool) -> bytes:
    """An array count or bytes length: compact (uvarint n+1) or int32."""
    return write_uvarint(n + 1) if flexible else I32.pack(n)


def string_field(value: str | None, flexible: bool) -> bytes:
    """A (nullable) string: compact, or int16 length."""
    if value is None:
        return b"\x00" if flexible else b"\xff\xff"
    data = value.encode()
    return (write_uvarint(len(data) + 1) if flexible else I16.pack(len(data))) + data


def uuid_field(value: uuid.UUID | None) -> bytes:
    """A UUID's 16 bytes; None (how a decoded zero UUID comes) writes the zero UUID."""
    return value.bytes if value is not None else bytes(16)
