"""What a server-side assignor is given and gives (Kafka's ConsumerGroupPartitionAssignor):
the members' subscriptions and racks, the subscribed topics' partitions and the racks of
their replicas, and the current target; it returns the next target, one assignment per
member."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from kplane.broker.group.modern_group import Assignment


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    topic_ids: frozenset[uuid.UUID]


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic_id: uuid.UUID
    name: str
    num_partitions: int
    partition_racks: Mapping[int, frozenset[str]] = field(default_factory=dict)
    """Racks of each partition's replicas (empty when brokers name none)."""


class PartitionAssignor(Protocol):
    name: str

    def assign(
        self,
        members: Mapping[str, MemberSubscription],
        topics: Mapping[uuid.UUID, TopicMetadata],
        current: Mapping[str, Assignment],
    ) -> dict[str, Assignment]: ...


def rack_matches(member: MemberSubscription, topic: TopicMetadata, partition: int) -> bool:
    """Whether the member sits in a rack holding a replica of the partition."""
    return member.rack_id is not None and member.rack_id in topic.partition_racks.get(
        partition, frozenset()
    )


def freeze(assignment: Mapping[uuid.UUID, set[int]]) -> dict[uuid.UUID, frozenset[int]]:
    return {topic_id: frozenset(parts) for topic_id, parts in assignment.items() if parts}
