"""The share groups' simple assignor: partitions go to at least one member each, and members
outnumbering partitions share them."""

from __future__ import annotations

import uuid

from kplane.broker.group.assignor import MemberSubscription, TopicMetadata
from kplane.broker.group.share_assignor import SimpleAssignor

T1, T2 = uuid.uuid4(), uuid.uuid4()
TOPICS = {T1: TopicMetadata(T1, "t1", 2), T2: TopicMetadata(T2, "t2", 1)}


def members(*specs: tuple[str, frozenset[uuid.UUID]]) -> dict[str, MemberSubscription]:
    return {m: MemberSubscription(m, None, None, topics) for m, topics in specs}


def test_as_many_members_as_partitions_split_them() -> None:
    subs = members(("a", frozenset({T1})), ("b", frozenset({T1})))
    out = SimpleAssignor().assign(subs, TOPICS, {})
    assert sorted(sorted(a[T1]) for a in out.values()) == [[0], [1]]


def test_more_members_than_partitions_share() -> None:
    subs = members(*((m, frozenset({T2})) for m in "abc"))
    out = SimpleAssignor().assign(subs, TOPICS, {})
    assert all(a == {T2: frozenset({0})} for a in out.values())


def test_every_subscribed_partition_is_assigned_and_previous_holders_keep_theirs() -> None:
    subs = members(("a", frozenset({T1, T2})), ("b", frozenset({T1})))
    first = SimpleAssignor().assign(subs, TOPICS, {})
    held = {(t, p) for a in first.values() for t, ps in a.items() for p in ps}
    assert held == {(T1, 0), (T1, 1), (T2, 0)}
    assert SimpleAssignor().assign(subs, TOPICS, first) == first


def test_a_member_of_no_existing_topic_gets_nothing() -> None:
    out = SimpleAssignor().assign(members(("a", frozenset({uuid.uuid4()}))), TOPICS, {})
    assert out == {"a": {}}
