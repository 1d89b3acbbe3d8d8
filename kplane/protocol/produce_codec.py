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

from kplane.protocol.body_scan import MalformedBody
from kplane.protocol.wire_codec import (
    I32,
    claim,
    length_prefix,
    read_count,
    read_length,
    read_text,
    skip_tagged_fields,
    string_field,
)

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

_HEAD = struct.Struct(">hi")  # acks, timeout_ms
_PARTITION_V3 = struct.Struct(">ihqq")  # index, error, base offset, append time
_PARTITION_V5 = struct.Struct(">ihqqq")  # ... log start offset
_PARTITION_MIN = 4 + 1  # index, then at least a null/empty records length
_TOPIC_MIN = 1 + 1  # at least an empty name and an empty partition array


@dataclass(slots=True)
class PartitionProduceData:
    """One partition's records (None when the request sent null): a view of the request's
    frame, not a copy, starting at ``records_at`` in it (None when the request was not
    decoded from ``bytes``)."""

    index: int
    records: memoryview | None
    records_at: int | None = None


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


def decode_produce_request(version: int, buf: bytes, offset: int) -> ProduceRequestData:
    """The Produce request body at ``buf[offset:]``; MalformedBody when it does not fit.
    (Read with positions in local variables, not a :class:`WireReader`: a method call a
    field is most of what a small request costs to decode.)"""
    flexible = version >= FLEXIBLE_SINCE
    by_id = version >= TOPIC_ID_SINCE
    end = len(buf)
    backed = type(buf) is bytes  # the records' views are of ``buf`` itself
    n, pos = read_length(buf, offset, end, flexible, False, "transactional_id")
    transactional_id = None if n < 0 else read_text(buf, pos, n, end, "transactional_id")
    pos += max(n, 0)
    stop = claim(pos, _HEAD.size, end, "acks and timeout_ms")
    acks, timeout_ms = _HEAD.unpack_from(buf, pos)
    count, pos = read_count(buf, stop, end, flexible, _TOPIC_MIN, "topic_data")
    topics = []
    for _ in range(count):
        name: str | None = None
        topic_id: uuid.UUID | None = None
        if by_id:
            stop = claim(pos, 16, end, "topic_id")
            topic_id = uuid.UUID(bytes=bytes(buf[pos:stop]))
            pos = stop
        else:
            n, pos = read_length(buf, pos, end, flexible, False, "name")
            if n < 0:
                raise MalformedBody("name: null where not nullable")
            name = read_text(buf, pos, n, end, "name")
            pos += n
        partitions = []
        partition_count, pos = read_count(buf, pos, end, flexible, _PARTITION_MIN, "partition_data")
        for _ in range(partition_count):
            stop = claim(pos, 4, end, "index")
            index = I32.unpack_from(buf, pos)[0]
            n, pos = read_length(buf, stop, end, flexible, True, "records")
            records = None
            at = pos if backed else None
            if n >= 0:
                stop = claim(pos, n, end, "records")
                records = memoryview(buf)[pos:stop]
                pos = stop
            if flexible:
                pos = skip_tagged_fields(buf, pos, end)
            partitions.append(PartitionProduceData(index, records, at))
        if flexible:
            pos = skip_tagged_fields(buf, pos, end)
        topics.append(TopicProduceData(name, topic_id, tuple(partitions)))
    if flexible:
        skip_tagged_fields(buf, pos, end)
    return ProduceRequestData(transactional_id, acks, timeout_ms, tuple(topics))


def encode_produce_response(
    version: int, topics: Sequence[TopicResult], throttle_time_ms: int = 0
) -> bytes:
    """The Produce response body for ``version``."""
    flexible = version >= FLEXIBLE_SINCE
    by_id = version >= TOPIC_ID_SINCE
    partition_struct = _PARTITION_V5 if version >= _LOG_START_SINCE else _PARTITION_V3
    errors_since = version >= _RECORD_ERRORS_SINCE
    out = [length_prefix(len(topics), flexible)]
    for topic in topics:
        if by_id:
            topic_id = topic.topic_id
            out.append(topic_id.bytes if topic_id is not None else bytes(16))
        else:
            out.append(string_field(topic.name, flexible))
        out.append(length_prefix(len(topic.partitions), flexible))
        for p in topic.partitions:
            fields = (p.index, p.error_code, p.base_offset, p.log_append_time_ms)
            if version >= _LOG_START_SINCE:
                out.append(partition_struct.pack(*fields, p.log_start_offset))
            else:
                out.append(partition_struct.pack(*fields))
            if errors_since:
                out.append(length_prefix(len(p.record_errors), flexible))
                for batch_index, message in p.record_errors:
                    out.append(I32.pack(batch_index))
                    out.append(string_field(message, flexible))
                    if flexible:
                        out.append(b"\x00")
                out.append(string_field(p.error_message, flexible))
            if flexible:
                out.append(b"\x00")  # no tagged fields (current_leader unset)
        if flexible:
            out.append(b"\x00")
    out.append(I32.pack(throttle_time_ms))
    if flexible:
        out.append(b"\x00")  # no tagged fields (node_endpoints unset)
    return b"".join(out)
