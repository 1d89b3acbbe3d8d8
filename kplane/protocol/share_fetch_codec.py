"""ShareFetch's response (KIP-932, v1 and v2), written by hand around stored batches
(sans-IO).

As a Fetch response (:mod:`protocol.fetch_codec`), each partition's records are the stored
batches passed through as they are (bytes, memoryviews or file regions), never copied;
the rest is written straight to bytes. The body's first four bytes are
``throttle_time_ms``, and the piece that holds them is bytes.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence, Sized
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from kplane.protocol.body_scan import write_uvarint
from kplane.protocol.wire_codec import I16, I32, length_prefix, string_field, uuid_field

__all__ = (
    "ShareFetchPartitionResult",
    "ShareFetchTopicResult",
    "encode_share_fetch_response",
)

VERSIONS = (1, 2)
"""The versions this layout serves (v0, Kafka 4.0's early access, is not served)."""

P = TypeVar("P", bound=Sized)
"""A stored slice of batches: bytes, a memoryview, or a file region."""

_INT32_ERROR = struct.Struct(">ih")  # throttle time or partition index, an error code
_ACQUIRED = struct.Struct(">qqhb")  # first offset, last offset, delivery count, no tags
_LEADER = struct.Struct(">iib")  # leader id, leader epoch, no tags


@dataclass(slots=True)
class ShareFetchPartitionResult(Generic[P]):
    """One partition's answer, with the stored batches that are its records."""

    partition_index: int
    error_code: int = 0
    error_message: str | None = None
    acknowledge_error_code: int = 0
    acknowledge_error_message: str | None = None
    leader_id: int = -1
    leader_epoch: int = -1
    records: Sequence[P] = ()
    acquired_records: Sequence[tuple[int, int, int]] = ()
    """(first offset, last offset, delivery count) of each acquired range."""


@dataclass(slots=True)
class ShareFetchTopicResult(Generic[P]):
    """A topic's partition answers."""

    topic_id: uuid.UUID | None
    """None: the zero UUID (as a request's zero topic id is decoded)."""
    partitions: list[ShareFetchPartitionResult[P]] = field(default_factory=list)


def encode_share_fetch_response(
    version: int,
    topics: Sequence[ShareFetchTopicResult[P]],
    acquisition_lock_timeout_ms: int,
    error_code: int = 0,
    error_message: str | None = None,
    throttle_time_ms: int = 0,
) -> list[bytes | P]:
    """The pieces of a ShareFetch response body: bytes written here, each partition's
    stored batches passed through between them; no node endpoints."""
    if version not in VERSIONS:
        raise ValueError(f"ShareFetch response v{version} is not written here")
    pieces: list[bytes | P] = []
    out = bytearray(_INT32_ERROR.pack(throttle_time_ms, error_code))
    out += string_field(error_message, True)
    out += I32.pack(acquisition_lock_timeout_ms)
    out += length_prefix(len(topics), True)
    for topic in topics:
        out += uuid_field(topic.topic_id)
        out += length_prefix(len(topic.partitions), True)
        for p in topic.partitions:
            out += _INT32_ERROR.pack(p.partition_index, p.error_code)
            out += string_field(p.error_message, True)
            out += I16.pack(p.acknowledge_error_code)
            out += string_field(p.acknowledge_error_message, True)
            out += _LEADER.pack(p.leader_id, p.leader_epoch, 0)
            size = sum(len(batch) for batch in p.records)
            out += write_uvarint(size + 1)
            if size:
                pieces.append(bytes(out))
                pieces += p.records
                out = bytearray()
            out += length_prefix(len(p.acquired_records), True)
            for first, last, count in p.acquired_records:
                out += _ACQUIRED.pack(first, last, count, 0)
            out += b"\x00"  # the partition's tagged fields
        out += b"\x00"  # the topic's
    out += b"\x01\x00"  # no node endpoints (an empty array); the body's tagged fields
    pieces.append(bytes(out))
    return pieces
