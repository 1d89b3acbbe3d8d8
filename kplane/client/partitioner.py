"""The producer's partitioner, Java's built-in one.

A keyed record goes to ``toPositive(murmur2(key)) % partitions``; a record without a key goes
to the topic's sticky partition, which changes whenever the batch it fills is full or sent.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Mapping

from kplane.client.kafka_client import PartitionMetadata

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF
_WORDS: dict[int, struct.Struct] = {}


def _murmur2_u32(data: bytes) -> int:
    length = len(data)
    h = 0x9747B28C ^ length
    words = length >> 2
    if words:
        unpack = _WORDS.get(words)
        if unpack is None:
            unpack = _WORDS[words] = struct.Struct(f"<{words}I")
        for k in unpack.unpack_from(data):
            k = (k * _M) & _MASK
            k ^= k >> 24
            h = ((h * _M) & _MASK) ^ ((k * _M) & _MASK)
    tail = length & 3
    if tail:
        base = length - tail
        if tail == 3:
            h ^= data[base + 2] << 16
        if tail >= 2:
            h ^= data[base + 1] << 8
        h = ((h ^ data[base]) * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    return h ^ (h >> 15)


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: the 32-bit MurmurHash2 (seed 0x9747b28c) as a Java int."""
    h = _murmur2_u32(data)
    return h - (1 << 32) if h & 0x80000000 else h


def default_partition(key: bytes, partitions: int) -> int:
    """The partition of ``key`` under Java's default partitioner:
    ``toPositive(murmur2(key)) % partitions``."""
    return (_murmur2_u32(key) & 0x7FFFFFFF) % partitions


class BuiltInPartitioner:
    """Java's built-in partitioner: murmur2 for keyed records, a sticky partition per topic
    for the others."""

    def __init__(self) -> None:
        self._sticky: dict[str, int] = {}
        self._sticky_prev: dict[str, int] = {}

    def partition(
        self, topic: str, key: bytes | None, parts: Mapping[int, PartitionMetadata]
    ) -> int:
        """The partition of a record of ``topic`` with ``key``, among ``parts``."""
        if key is None:
            partition = self._sticky.get(topic)
            if partition is None or partition not in parts:
                partition = self._choose_sticky(topic, parts)
            return partition
        return default_partition(key, len(parts))

    def on_batch_closed(self, topic: str, partition: int) -> None:
        """A batch of ``partition`` is full or sent: the topic's next keyless record picks a
        new sticky partition (another one, when there is a choice)."""
        if self._sticky.get(topic) == partition:
            del self._sticky[topic]
            self._sticky_prev[topic] = partition

    def _choose_sticky(self, topic: str, parts: Mapping[int, PartitionMetadata]) -> int:
        available = [p for p, meta in parts.items() if meta.leader >= 0] or list(parts)
        previous = self._sticky_prev.get(topic)
        if len(available) > 1 and previous in available:
            available.remove(previous)
        choice = random.choice(available)
        self._sticky[topic] = choice
        return choice
