"""Which broker coordinates a group or a transactional id: Kafka's rule without internal
topics of its own.

Kafka maps a group to ``__consumer_offsets`` partition ``abs(groupId.hashCode) %
offsets.topic.num.partitions`` (a transactional id likewise to a ``__transaction_state``
partition) and the partition's leader coordinates it. kplane keeps that state in the
metadata store, so the partitions are spread over the live brokers in id order instead: the
same key always lands on the same broker while the brokers stay.
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


def partition_leader(partition: int, live_brokers: Sequence[int]) -> int | None:
    """The broker that leads partition ``partition`` of ``__consumer_offsets`` (or of
    ``__transaction_state``): the live brokers in id order, round robin; None without."""
    if not live_brokers:
        return None
    ordered = sorted(live_brokers)
    return ordered[partition % len(ordered)]


def coordinator_for(group_id: str, live_brokers: Sequence[int], partitions: int) -> int | None:
    """The broker coordinating ``group_id`` (a group, or a transactional id over the
    transaction state's partitions), or None without live brokers."""
    return partition_leader(offsets_partition(group_id, partitions), live_brokers)
