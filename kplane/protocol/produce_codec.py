"""Produce's wire format, read and written by hand: the broker's hot path (sans-IO).

A Produce request is decoded in one pass that checks every count and length against the
bytes left (what :mod:`protocol.body_scan` does for the other APIs before kio decodes
them) and skips tagged fields (KIP-482; Produce requests have none Kafka knows), into
slotted dataclasses named as Kafka's schema names the fields, so code written for the
schema's entities (fault injection mirrors requests into error responses) reads them
alike. A response is written straight to bytes from one :class:`PartitionResult` per
partition, for every version served (3 to 13): no per-partition message objects.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from kplane.protocol.body_scan import MalformedBody, uvarint, write_uvarint

__all__ = (
    "PartitionProduceData",
    "PartitionResult",
    "ProduceRequestData",
    "TopicProduceData",
    "TopicResult",
    "decode_produce_request",
    "encode_produce_response",
)

FLEXIBLE_SINCE = 9
TOPIC_ID_SINCE = 13
_LOG_START_SINCE = 5
_RECORD_ERRORS_SINCE = 8

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEAD = struct.Struct(">hi")  # acks, timeout_ms
_PARTITION_V3 = struct.Struct(">ihqq")  # index, error, base offset, append time
_PARTITION_V5 = struct.Struct(">ihqqq")  # ... log start offset
_PARTITION_MIN = 4 + 1  # index, then at least a null/empty records length
_TOPIC_MIN = 1 + 1  # at least an empty name and an empty partition array


@dataclass(slots=True)
class PartitionProduceData:
    """One partition's records (None when the request sent null)."""

    index: int
    records: bytes | None


@dataclass(slots=True)
class TopicProduceData:
    """One topic of a request: its name (v3-12) or id (v13+), and its partitions."""

    name: str | None
    topic_id: uuid.UUID | None
    partition_data: tuple[PartitionProduceData, ...]


@dataclass(slots=True)
class ProduceRequestData:
    """A decoded Produce request."""

    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: tuple[TopicProduceData, ...]


@dataclass(slots=True)
class PartitionResult:
    """What a partition's response says: ``base_offset`` -1 and ``log_append_time_ms``
    -1 when nothing was appended (or the topic uses CreateTime)."""

    index: int
    error_code: int = 0
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    record_errors: Sequence[tuple[int, str | None]] = ()


@dataclass(slots=True)
class TopicResult:
    """A topic's partition results, keyed as the request named the topic."""

    name: str | None
    topic_id: uuid.UUID | None
    partitions: list[PartitionResult] = field(default_factory=list)


class _Reader:
    """Reads fields below ``end``; every length and count is checked before it is used."""

    __slots__ = ("buf", "end", "pos")

    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf)

    def take(self, size: int, what: str) -> int:
        """Claim ``size`` bytes; their start."""
        start = self.pos
        stop = start + size
        if stop > self.end:
            raise MalformedBody(f"{what}: {size} bytes needed, {self.end - start} left")
        self.pos = stop
        return start

    def uvarint(self) -> int:
        value, self.pos = uvarint(self.buf, self.pos, self.end)
        return value

    def length(self, flexible: bool, wide: bool, what: str) -> int:
        """A length or count (compact: uvarint minus one; else int16/int32); -1 is null."""
        if flexible:
            return self.uvarint() - 1
        if wide:
            return int(_I32.unpack_from(self.buf, self.take(4, what))[0])
        return int(_I16.unpack_from(self.buf, self.take(2, what))[0])

    def count(self, flexible: bool, element_min: int, what: str) -> int:
        """A non-nullable array's count, at most what the bytes left can hold."""
        n = self.length(flexible, True, what)
        if n < 0:
            raise MalformedBody(f"{what}: null where not nullable")
        if n * element_min > self.end - self.pos:
            raise MalformedBody(f"{what}: {n} elements announced, {self.end - self.pos} bytes left")
        return n

    def string(self, flexible: bool, nullable: bool, what: str) -> str | None:
        n = self.length(flexible, False, what)
        if n < 0:
            if nullable:
                return None
            raise MalformedBody(f"{what}: null where not nullable")
        start = self.take(n, what)
        try:
            return bytes(self.buf[start : start + n]).decode()
        except UnicodeDecodeError as exc:
            raise MalformedBody(f"{what}: not UTF-8") from exc

    def nullable_bytes(self, flexible: bool, what: str) -> bytes | None:
        n = self.length(flexible, True, what)
        if n < 0:
            return None
        start = self.take(n, what)
        return bytes(self.buf[start : start + n])

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self.take(self.uvarint(), "tagged field")


def decode_produce_request(version: int, buf: bytes, offset: int) -> ProduceRequestData:
    """The Produce request body at ``buf[offset:]``; MalformedBody when it does not fit."""
    flexible = version >= FLEXIBLE_SINCE
    by_id = version >= TOPIC_ID_SINCE
    r = _Reader(buf, offset)
    transactional_id = r.string(flexible, True, "transactional_id")
    acks, timeout_ms = _HEAD.unpack_from(buf, r.take(_HEAD.size, "acks and timeout_ms"))
    topics = []
    for _ in range(r.count(flexible, _TOPIC_MIN, "topic_data")):
        if by_id:
            start = r.take(16, "topic_id")
            name, topic_id = None, uuid.UUID(bytes=bytes(buf[start : start + 16]))
        else:
            name, topic_id = r.string(flexible, False, "name"), None
        partitions = []
        for _ in range(r.count(flexible, _PARTITION_MIN, "partition_data")):
            index = int(_I32.unpack_from(buf, r.take(4, "index"))[0])
            records = r.nullable_bytes(flexible, "records")
            if flexible:
                r.skip_tagged_fields()
            partitions.append(PartitionProduceData(index, records))
        if flexible:
            r.skip_tagged_fields()
        topics.append(TopicProduceData(name, topic_id, tuple(partitions)))
    if flexible:
        r.skip_tagged_fields()
    return ProduceRequestData(transactional_id, int(acks), int(timeout_ms), tuple(topics))


def _length(n: int, flexible: bool) -> bytes:
    return write_uvarint(n + 1) if flexible else _I32.pack(n)


def _string(value: str | None, flexible: bool) -> bytes:
    if value is None:
        return b"\x00" if flexible else b"\xff\xff"
    data = value.encode()
    return (write_uvarint(len(data) + 1) if flexible else _I16.pack(len(data))) + data


def encode_produce_response(
    version: int, topics: Sequence[TopicResult], throttle_time_ms: int = 0
) -> bytes:
    """The Produce response body for ``version``."""
    flexible = version >= FLEXIBLE_SINCE
    by_id = version >= TOPIC_ID_SINCE
    partition_struct = _PARTITION_V5 if version >= _LOG_START_SINCE else _PARTITION_V3
    errors_since = version >= _RECORD_ERRORS_SINCE
    out = [_length(len(topics), flexible)]
    for topic in topics:
        if by_id:
            topic_id = topic.topic_id
            out.append(topic_id.bytes if topic_id is not None else bytes(16))
        else:
            out.append(_string(topic.name, flexible))
        out.append(_length(len(topic.partitions), flexible))
        for p in topic.partitions:
            fields = (p.index, p.error_code, p.base_offset, p.log_append_time_ms)
            if version >= _LOG_START_SINCE:
                out.append(partition_struct.pack(*fields, p.log_start_offset))
            else:
                out.append(partition_struct.pack(*fields))
            if errors_since:
                out.append(_length(len(p.record_errors), flexible))
                for batch_index, message in p.record_errors:
                    out.append(_I32.pack(batch_index))
                    out.append(_string(message, flexible))
                    if flexible:
                        out.append(b"\x00")
                out.append(_string(p.error_message, flexible))
            if flexible:
                out.append(b"\x00")  # no tagged fields (current_leader unset)
        if flexible:
            out.append(b"\x00")
    out.append(_I32.pack(throttle_time_ms))
    if flexible:
        out.append(b"\x00")  # no tagged fields (node_endpoints unset)
    return b"".join(out)
