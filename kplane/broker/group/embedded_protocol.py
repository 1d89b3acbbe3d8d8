"""The consumer protocol embedded in the classic protocol's JoinGroup and SyncGroup bytes
(Kafka's ConsumerProtocolSubscription and ConsumerProtocolAssignment, versions 0-3, not
flexible): what the coordinator reads of a classic member's subscription and writes as its
assignment when the member belongs to a consumer group (KIP-848's online migration).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


class MalformedProtocol(ValueError):
    """Bytes that are not a ConsumerProtocolSubscription or Assignment."""


@dataclass(frozen=True, slots=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    owned_partitions: tuple[tuple[str, int], ...] = ()
    generation_id: int = -1
    rack_id: str | None = None


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, fmt: str) -> int:
        try:
            (value,) = struct.unpack_from(fmt, self.data, self.pos)
        except struct.error as exc:
            raise MalformedProtocol(str(exc)) from None
        self.pos += struct.calcsize(fmt)
        return int(value)

    def int16(self) -> int:
        return self._take(">h")

    def int32(self) -> int:
        return self._take(">i")

    def string(self, nullable: bool = False) -> str | None:
        length = self.int16()
        if length < 0:
            if nullable:
                return None
            raise MalformedProtocol("null string")
        end = self.pos + length
        if end > len(self.data):
            raise MalformedProtocol("string past the end")
        try:
            text = self.data[self.pos : end].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedProtocol(str(exc)) from None
        self.pos = end
        return text

    def count(self) -> int:
        n = self.int32()
        if n < 0 or n > len(self.data):
            raise MalformedProtocol("bad array length")
        return n

    def skip_bytes(self) -> None:
        length = self.int32()
        if length > 0:
            if self.pos + length > len(self.data):
                raise MalformedProtocol("bytes past the end")
            self.pos += length

    @property
    def at_end(self) -> bool:
        return self.pos >= len(self.data)


def _topic_partitions(reader: _Reader) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for _ in range(reader.count()):
        topic = reader.string()
        assert topic is not None
        out.extend((topic, reader.int32()) for _ in range(reader.count()))
    return out


def decode_subscription(data: bytes) -> Subscription:
    """A ConsumerProtocolSubscription; the fields a version lacks keep their defaults, and
    a newer version is read as far as version 3 goes (Kafka reads it the same way)."""
    reader = _Reader(data)
    version = reader.int16()
    if version < 0:
        raise MalformedProtocol(f"version {version}")
    topics = []
    for _ in range(reader.count()):
        topic = reader.string()
        assert topic is not None
        topics.append(topic)
    if reader.at_end:  # some clients stop after the topics
        return Subscription(version, tuple(topics))
    reader.skip_bytes()  # user data
    owned: list[tuple[str, int]] = []
    generation, rack = -1, None
    if version >= 1 and not reader.at_end:
        owned = _topic_partitions(reader)
    if version >= 2 and not reader.at_end:
        generation = reader.int32()
    if version >= 3 and not reader.at_end:
        rack = reader.string(nullable=True)
    return Subscription(version, tuple(topics), tuple(owned), generation, rack)


def decode_assignment(data: bytes) -> tuple[tuple[str, int], ...]:
    """The partitions of a ConsumerProtocolAssignment (empty bytes: none)."""
    if not data:
        return ()
    reader = _Reader(data)
    if reader.int16() < 0:
        raise MalformedProtocol("negative version")
    return tuple(sorted(_topic_partitions(reader)))


def protocol_version(data: bytes) -> int:
    """The version a subscription's bytes start with (0 when they cannot say)."""
    return struct.unpack_from(">h", data)[0] if len(data) >= 2 else 0


def encode_assignment(partitions: Mapping[str, Iterable[int]], version: int) -> bytes:
    """A ConsumerProtocolAssignment of ``partitions`` (by topic name), no user data, at
    ``version`` (0-3: the same layout)."""
    out = [struct.pack(">hi", max(0, min(version, 3)), len(partitions))]
    for topic in sorted(partitions):
        encoded = topic.encode("utf-8")
        parts = sorted(partitions[topic])
        out.append(struct.pack(">h", len(encoded)) + encoded + struct.pack(">i", len(parts)))
        out.append(struct.pack(f">{len(parts)}i", *parts))
    out.append(struct.pack(">i", -1))
    return b"".join(out)
