"""Fetch's wire format, read and written by hand: the broker's hot path (sans-IO).

A Fetch request (v4 to 18) is decoded in one pass that checks every count and length
against the bytes left, into slotted dataclasses named as Kafka's schema names the fields
(fault injection mirrors requests into error responses by those names). Of the tagged
fields it keeps ClusterId and ReplicaState; the others (a partition's ReplicaDirectoryId
and HighWatermark, which only KRaft controllers act on) are skipped.

A response is written straight to bytes around the stored batches that become each
partition's records: one :class:`FetchPartitionResult` per partition, no message objects,
and the batches (bytes, memoryviews or file regions) passed through as they are, never
copied. The body's first four bytes are ``throttle_time_ms`` in every version served.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Sequence, Sized
from dataclasses import dataclass, field
from functools import cache
from typing import Generic, TypeVar

from kplane.protocol.body_scan import write_uvarint
from kplane.protocol.wire_codec import (
    I32,
    I64,
    WireReader,
    length_prefix,
    string_field,
    uuid_field,
)

__all__ = (
    "FetchPartition",
    "FetchPartitionResult",
    "FetchRequestData",
    "FetchTopic",
    "FetchTopicResult",
    "ForgottenTopic",
    "Piece",
    "ReplicaState",
    "decode_fetch_request",
    "encode_fetch_response",
)

FLEXIBLE_SINCE = 12
TOPIC_ID_SINCE = 13
_SESSIONS_SINCE = 7
_LEADER_EPOCH_SINCE = 9
_LOG_START_SINCE = 5
_RACK_SINCE = 11
_REPLICA_STATE_SINCE = 15
_CLUSTER_ID_TAG = 0
_REPLICA_STATE_TAG = 1

_HEAD_V4 = struct.Struct(">iiiib")  # replica id, max wait, min bytes, max bytes, isolation
_HEAD_V7 = struct.Struct(">iiiibii")  # ... session id and epoch
_HEAD_V15 = struct.Struct(">iiibii")  # the replica id moved to the ReplicaState tag
_REPLICA_STATE = struct.Struct(">iq")
_PARTITION_MIN = 4 + 8 + 4  # partition, fetch offset, max bytes


@cache
def _partition_layout(version: int) -> tuple[struct.Struct, Callable[..., FetchPartition]]:
    """A partition's fixed fields in ``version`` (one unpack), and how they make one."""
    if version >= FLEXIBLE_SINCE:
        return struct.Struct(">iiqiqi"), FetchPartition
    if version >= _LEADER_EPOCH_SINCE:
        return struct.Struct(">iiqqi"), lambda p, e, o, s, m: FetchPartition(p, e, o, -1, s, m)
    if version >= _LOG_START_SINCE:
        return struct.Struct(">iqqi"), lambda p, o, s, m: FetchPartition(p, -1, o, -1, s, m)
    return struct.Struct(">iqi"), lambda p, o, m: FetchPartition(p, -1, o, -1, -1, m)


_TOPIC_MIN = 1 + 1  # an empty name (or more) and an empty partition array
_ABORTED = struct.Struct(">qq")

Piece = bytes | memoryview
"""Stored batches in memory."""
P = TypeVar("P", bound=Sized)
"""A stored slice of batches: bytes, a memoryview, or a file region."""


@dataclass(slots=True)
class FetchPartition:
    """One partition a fetch asks for (fields in their v12+ wire order)."""

    partition: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    partition_max_bytes: int


@dataclass(slots=True)
class FetchTopic:
    """A topic a fetch asks for, by name (v4-12) or id (v13+)."""

    topic: str | None
    topic_id: uuid.UUID | None
    partitions: tuple[FetchPartition, ...]


@dataclass(slots=True)
class ForgottenTopic:
    """Partitions an incremental fetch session stops fetching (v7+)."""

    topic: str | None
    topic_id: uuid.UUID | None
    partitions: tuple[int, ...]


@dataclass(slots=True)
class ReplicaState:
    """The fetching replica (v15+; -1 for a consumer)."""

    replica_id: int = -1
    replica_epoch: int = -1


@dataclass(slots=True)
class FetchRequestData:
    """A decoded Fetch request; ``replica_id`` is the fetching broker's id whichever
    version carried it (-1 for a consumer)."""

    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int
    topics: tuple[FetchTopic, ...]
    forgotten_topics_data: tuple[ForgottenTopic, ...] = ()
    session_id: int = 0
    session_epoch: int = -1
    rack_id: str = ""
    cluster_id: str | None = None
    replica_state: ReplicaState | None = None
    """Present from v15 on (the tag's defaults when the request left it out)."""


@dataclass(slots=True)
class FetchPartitionResult(Generic[P]):
    """What a partition's response says, with the stored batches that are its records."""

    partition_index: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted_transactions: Sequence[tuple[int, int]] | None = None
    """(producer id, first offset) of each aborted transaction; None: not asked for."""
    preferred_read_replica: int = -1
    records: Sequence[P] = ()


@dataclass(slots=True)
class FetchTopicResult(Generic[P]):
    """A topic's partition results, keyed as the request named the topic."""

    topic: str | None
    topic_id: uuid.UUID | None
    partitions: list[FetchPartitionResult[P]] = field(default_factory=list)


def decode_fetch_request(version: int, buf: bytes, offset: int) -> FetchRequestData:
    """The Fetch request body at ``buf[offset:]``; MalformedBody when it does not fit."""
    flexible = version >= FLEXIBLE_SINCE
    by_id = version >= TOPIC_ID_SINCE
    r = WireReader(buf, offset)
    replica_id = -1
    session_id, session_epoch = 0, -1
    if version >= _REPLICA_STATE_SINCE:
        max_wait_ms, min_bytes, max_bytes, isolation, session_id, session_epoch = r.unpack(
            _HEAD_V15, "fetch limits and session"
        )
    elif version >= _SESSIONS_SINCE:
        replica_id, max_wait_ms, min_bytes, max_bytes, isolation, session_id, session_epoch = (
            r.unpack(_HEAD_V7, "replica id, fetch limits and session")
        )
    else:
        replica_id, max_wait_ms, min_bytes, max_bytes, isolation = r.unpack(
            _HEAD_V4, "replica id and fetch limits"
        )
    layout, make_partition = _partition_layout(version)
    topics = []
    for _ in range(r.count(flexible, _TOPIC_MIN, "topics")):
        name, topic_id = _topic_key(r, flexible, by_id)
        partitions = []
        for _ in range(r.count(flexible, _PARTITION_MIN, "partitions")):
            partitions.append(make_partition(*r.unpack(layout, "partition")))
            if flexible:
                r.skip_tagged_fields()  # ReplicaDirectoryId (v17+), HighWatermark (v18+)
        if flexible:
            r.skip_tagged_fields()
        topics.append(FetchTopic(name, topic_id, tuple(partitions)))
    forgotten = []
    if version >= _SESSIONS_SINCE:
        for _ in range(r.count(flexible, _TOPIC_MIN, "forgotten_topics_data")):
            name, topic_id = _topic_key(r, flexible, by_id)
            indexes = tuple(
                r.int32("forgotten partition") for _ in range(r.count(flexible, 4, "partitions"))
            )
            if flexible:
                r.skip_tagged_fields()
            forgotten.append(ForgottenTopic(name, topic_id, indexes))
    rack_id = (r.string(flexible, False, "rack_id") or "") if version >= _RACK_SINCE else ""
    request = FetchRequestData(
        replica_id,
        max_wait_ms,
        min_bytes,
        max_bytes,
        isolation,
        tuple(topics),
        tuple(forgotten),
        session_id,
        session_epoch,
        rack_id,
        replica_state=ReplicaState() if version >= _REPLICA_STATE_SINCE else None,
    )
    if flexible:
        _read_request_tags(r, request)
    return request


def _topic_key(r: WireReader, flexible: bool, by_id: bool) -> tuple[str | None, uuid.UUID | None]:
    if by_id:
        return None, r.uuid("topic_id")
    return r.string(flexible, False, "topic"), None


def _read_request_tags(r: WireReader, request: FetchRequestData) -> None:
    for tag, field_reader in r.tagged_fields():
        if tag == _CLUSTER_ID_TAG:
            request.cluster_id = field_reader.string(True, True, "cluster_id")
        elif tag == _REPLICA_STATE_TAG and request.replica_state is not None:
            replica_id, epoch = field_reader.unpack(_REPLICA_STATE, "replica_state")
            request.replica_state = ReplicaState(int(replica_id), int(epoch))
            request.replica_id = int(replica_id)


def encode_fetch_response(
    version: int,
    topics: Sequence[FetchTopicResult[P]],
    error_code: int = 0,
    session_id: int = 0,
    throttle_time_ms: int = 0,
) -> list[bytes | P]:
    """The pieces of a Fetch response body: bytes written here, each partition's stored
    batches passed through between them (for ``transport.writelines`` or ``sendfile``)."""
    flexible = version >= FLEXIBLE_SINCE
    by_id = version >= TOPIC_ID_SINCE
    log_start_since = version >= _LOG_START_SINCE
    rack_since = version >= _RACK_SINCE
    pieces: list[bytes | P] = []
    out = bytearray(I32.pack(throttle_time_ms))
    if version >= _SESSIONS_SINCE:
        out += struct.pack(">hi", error_code, session_id)
    out += length_prefix(len(topics), flexible)
    for topic in topics:
        if by_id:
            out += uuid_field(topic.topic_id)
        else:
            out += string_field(topic.topic, flexible)
        out += length_prefix(len(topic.partitions), flexible)
        for p in topic.partitions:
            out += struct.pack(
                ">ihqq", p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset
            )
            if log_start_since:
                out += I64.pack(p.log_start_offset)
            aborted = p.aborted_transactions
            if aborted is None:
                out += b"\x00" if flexible else b"\xff\xff\xff\xff"
            else:
                out += length_prefix(len(aborted), flexible)
                for producer_id, first_offset in aborted:
                    out += _ABORTED.pack(producer_id, first_offset)
                    if flexible:
                        out += b"\x00"
            if rack_since:
                out += I32.pack(p.preferred_read_replica)
            size = sum(len(batch) for batch in p.records)
            out += write_uvarint(size + 1) if flexible else I32.pack(size)
            if size:
                pieces.append(bytes(out))
                pieces += p.records
                out = bytearray()
            if flexible:
                out += b"\x00"  # no tagged fields: diverging epoch, leader, snapshot unset
        if flexible:
            out += b"\x00"
    if flexible:
        out += b"\x00"  # no tagged fields: node endpoints unset
    if out:
        pieces.append(bytes(out))
    return pieces
