"""The ``range`` server-side assignor (Kafka's RangeAssignor): for each topic, its
subscribers in order of instance id (member id for dynamic members) get consecutive
ranges of partitions, the first ones one more when the count does not divide; members
subscribed to co-partitioned topics get the same partition numbers of each."""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from kplane.broker.group.assignor import MemberSubscription, TopicMetadata, freeze
from kplane.broker.group.modern_group import Assignment


class RangeAssignor:
    name = "range"

    def assign(
        self,
        members: Mapping[str, MemberSubscription],
        topics: Mapping[uuid.UUID, TopicMetadata],
        current: Mapping[str, Assignment],
    ) -> dict[str, Assignment]:
        out: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
        for topic_id, topic in topics.items():
            subscribers = sorted(
                (m for m in members.values() if topic_id in m.topic_ids),
                key=lambda m: (m.instance_id is None, m.instance_id or "", m.member_id),
            )
            if not subscribers:
                continue
            quota, extra = divmod(topic.num_partitions, len(subscribers))
            start = 0
            for index, member in enumerate(subscribers):
                size = quota + (1 if index < extra else 0)
                if size:
                    out[member.member_id][topic_id] = set(range(start, start + size))
                start += size
        return {m: freeze(a) for m, a in out.items()}
