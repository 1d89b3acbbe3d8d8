"""The ``uniform`` server-side assignor (Kafka's UniformAssignor): every member gets as
many partitions of its subscribed topics as the others, within one; partitions stay where
the current target has them as far as balance allows, and when racks are given a free
partition goes to a member in a rack holding one of its replicas, among the least loaded."""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from kplane.broker.group.assignor import (
    MemberSubscription,
    TopicMetadata,
    freeze,
    rack_matches,
)
from kplane.broker.group.modern_group import Assignment


class UniformAssignor:
    name = "uniform"

    def assign(
        self,
        members: Mapping[str, MemberSubscription],
        topics: Mapping[uuid.UUID, TopicMetadata],
        current: Mapping[str, Assignment],
    ) -> dict[str, Assignment]:
        eligible: dict[uuid.UUID, list[str]] = {
            topic_id: sorted(m for m, sub in members.items() if topic_id in sub.topic_ids)
            for topic_id in topics
        }
        owner: dict[tuple[uuid.UUID, int], str] = {}
        for member_id, assignment in sorted(current.items()):
            if member_id not in members:
                continue
            for topic_id, parts in assignment.items():
                topic = topics.get(topic_id)
                if topic is None or topic_id not in members[member_id].topic_ids:
                    continue
                for p in parts:
                    if p < topic.num_partitions:
                        owner.setdefault((topic_id, p), member_id)
        count = dict.fromkeys(members, 0)
        for member_id in owner.values():
            count[member_id] += 1

        def best(topic_id: uuid.UUID, p: int, candidates: list[str]) -> str:
            topic = topics[topic_id]
            return min(
                candidates,
                key=lambda m: (count[m], not rack_matches(members[m], topic, p), m),
            )

        ordered = sorted(
            ((topic_id, p) for topic_id, t in topics.items() for p in range(t.num_partitions)),
            key=lambda tp: (topics[tp[0]].name, tp[1]),
        )
        for topic_id, p in ordered:
            if (topic_id, p) not in owner and eligible[topic_id]:
                chosen = best(topic_id, p, eligible[topic_id])
                owner[(topic_id, p)] = chosen
                count[chosen] += 1
        # Balance: move a partition to an eligible member holding two or more fewer. Each
        # move lowers the sum of squared counts, so this ends.
        moved = True
        while moved:
            moved = False
            for topic_id, p in ordered:
                holder = owner.get((topic_id, p))
                if holder is None:
                    continue
                lighter = [m for m in eligible[topic_id] if count[m] < count[holder] - 1]
                if lighter:
                    chosen = best(topic_id, p, lighter)
                    owner[(topic_id, p)] = chosen
                    count[holder] -= 1
                    count[chosen] += 1
                    moved = True
        out: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
        for (topic_id, p), member_id in owner.items():
            out[member_id].setdefault(topic_id, set()).add(p)
        return {m: freeze(a) for m, a in out.items()}
