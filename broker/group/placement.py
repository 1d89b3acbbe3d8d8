"""Which broker coordinates a group: Kafka's rule without an offsets topic of its own.

Kafka maps a group to ``__consumer_offsets`` partition ``abs(groupId.hashCode) %
offsets.topic.num.partitions`` and the partition's leader coordinates it. kplane keeps
offsets in the coordinator's memory, so the partitions are spread over the live brokers in id
order instead: the same group always lands on the same broker while the brokers stay.
"""

from __future__ import annotations

from collections.abc import Sequence


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (32-bit, over UTF-16 code units)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def offsets_partition(group_id: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % offsets.topic.num.partitions``."""
    return (java_string_hash(group_id) & 0x7FFFFFFF) % partitions


def coordinator_for(group_id: str, live_brokers: Sequence[int], partitions: int) -> int | None:
    """The broker coordinating ``group_id``, or None without live brokers."""
    if not live_brokers:
        return None
    ordered = sorted(live_brokers)
    return ordered[offsets_partition(group_id, partitions) % len(ordered)]
