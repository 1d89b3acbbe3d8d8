"""SimpleAssignor: the share groups' server-side assignor (Kafka's ``simple``).

Partitions of a share group may be shared: every subscribed partition goes to at least one
member subscribed to its topic, and every member with a subscribed partition gets at least
one, sharing a partition with others when there are more members than partitions. Each
choice goes to the least loaded candidate, preferring one that held the partition before,
so a target moves little when members come and go.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from kplane.broker.group.assignor import MemberSubscription, TopicMetadata, freeze
from kplane.broker.group.modern_group import Assignment


class SimpleAssignor:
    """Implements :class:`~kplane.broker.group.assignor.PartitionAssignor`."""

    name = "simple"

    def assign(
        self,
        members: Mapping[str, MemberSubscription],
        topics: Mapping[uuid.UUID, TopicMetadata],
        current: Mapping[str, Assignment],
    ) -> dict[str, Assignment]:
        order = sorted(members)
        out: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in order}
        load = dict.fromkeys(order, 0)
        sharers: dict[tuple[uuid.UUID, int], int] = {}

        def held(member_id: str, topic_id: uuid.UUID, p: int) -> bool:
            return p in current.get(member_id, {}).get(topic_id, frozenset())

        def give(member_id: str, topic_id: uuid.UUID, p: int) -> None:
            out[member_id].setdefault(topic_id, set()).add(p)
            load[member_id] += 1
            sharers[(topic_id, p)] = sharers.get((topic_id, p), 0) + 1

        for topic_id in sorted(topics):
            candidates = [m for m in order if topic_id in members[m].topic_ids]
            if not candidates:
                continue
            for p in range(topics[topic_id].num_partitions):

                def rank(m: str, t: uuid.UUID = topic_id, p: int = p) -> tuple[int, bool, int]:
                    return load[m], not held(m, t, p), order.index(m)

                give(min(candidates, key=rank), topic_id, p)
        for member_id in order:
            if load[member_id]:
                continue
            choices = [
                (topic_id, p)
                for topic_id in sorted(members[member_id].topic_ids)
                if topic_id in topics
                for p in range(topics[topic_id].num_partitions)
            ]
            if choices:

                def least_shared(
                    tp: tuple[uuid.UUID, int], m: str = member_id
                ) -> tuple[int, bool, int]:
                    return sharers.get(tp, 0), not held(m, *tp), tp[1]

                give(member_id, *min(choices, key=least_shared))
        return {m: freeze(a) for m, a in out.items()}
