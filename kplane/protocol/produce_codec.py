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

from kplane.protocol.wire_codec import I32, WireReader, length_prefix, string_field

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


def decode_produce_request(version: int, buf: bytes, offset: int) -> ProduceRequestData:
    """The Produce request body at ``buf[offset:]``; MalformedBody when it does not fit."""
    flexible = version >= FLEXIBLE_SINCE
    by_id = version >= TOPIC_ID_SINCE
    r = WireReader(buf, offset)
    transactional_id = r.string(flexible, True, "transactional_id")
    acks, timeout_ms = r.unpack(_HEAD, "acks and timeout_ms")
    topics = []
    for _ in range(r.count(flexible, _TOPIC_MIN, "topic_data")):
        if by_id:
            name, topic_id = None, r.uuid("topic_id")
        else:
            name, topic_id = r.string(flexible, False, "name"), None
        partitions = []
        for _ in range(r.count(flexible, _PARTITION_MIN, "partition_data")):
            index = r.int32("index")
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
