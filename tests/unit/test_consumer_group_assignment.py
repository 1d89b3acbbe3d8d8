"""KIP-848's pure parts: the server-side assignors, one member's reconciliation step, the
RE2J check of SubscribedTopicRegex, and the start-up checks of the group settings."""

from __future__ import annotations

import uuid

import pytest

from kplane.broker.config.errors import ConfigException
from kplane.broker.config.kafka_config import KafkaConfig
from kplane.broker.group.assignor import MemberSubscription, TopicMetadata
from kplane.broker.group.consumer_group import ConsumerGroupMember, MemberState
from kplane.broker.group.current_assignment import reconcile
from kplane.broker.group.group_config import group_config_from
from kplane.broker.group.range_assignor import RangeAssignor
from kplane.broker.group.topic_regex import InvalidRegex, compile_topic_regex
from kplane.broker.group.uniform_assignor import UniformAssignor

T1, T2 = uuid.uuid4(), uuid.uuid4()
TOPICS = {T1: TopicMetadata(T1, "a", 6), T2: TopicMetadata(T2, "b", 3)}


def members(*names: str, topics: frozenset[uuid.UUID] = frozenset({T1})) -> dict:
    return {n: MemberSubscription(n, None, None, topics) for n in names}


def sizes(assignment: dict) -> list[int]:
    return sorted(sum(len(p) for p in a.values()) for a in assignment.values())


def test_uniform_balances_and_keeps_what_it_can() -> None:
    first = UniformAssignor().assign(members("m1", "m2"), {T1: TOPICS[T1]}, {})
    assert sizes(first) == [3, 3]
    second = UniformAssignor().assign(members("m1", "m2", "m3"), {T1: TOPICS[T1]}, first)
    assert sizes(second) == [2, 2, 2]
    for m in ("m1", "m2"):  # each old member keeps two of its three
        assert second[m][T1] <= first[m][T1]
    all_parts = [p for a in second.values() for p in a[T1]]
    assert sorted(all_parts) == list(range(6))


def test_uniform_heterogeneous_subscriptions() -> None:
    subs = {
        "m1": MemberSubscription("m1", None, None, frozenset({T1, T2})),
        "m2": MemberSubscription("m2", None, None, frozenset({T2})),
    }
    out = UniformAssignor().assign(subs, TOPICS, {})
    assert T1 not in out["m2"]
    assert sizes(out) == [3, 6]
    assert len(out["m1"].get(T1, ())) == 6


def test_uniform_prefers_a_member_in_a_replica_rack() -> None:
    racks = {p: frozenset({"r1" if p % 2 else "r0"}) for p in range(6)}
    topics = {T1: TopicMetadata(T1, "a", 6, racks)}
    subs = {
        "m0": MemberSubscription("m0", None, "r0", frozenset({T1})),
        "m1": MemberSubscription("m1", None, "r1", frozenset({T1})),
    }
    out = UniformAssignor().assign(subs, topics, {})
    assert out["m0"][T1] == {0, 2, 4}
    assert out["m1"][T1] == {1, 3, 5}


def test_range_gives_consecutive_partitions_in_member_order() -> None:
    out = RangeAssignor().assign(members("m2", "m1", "m3", topics=frozenset({T1, T2})), TOPICS, {})
    assert out["m1"] == {T1: {0, 1}, T2: {0}}
    assert out["m2"] == {T1: {2, 3}, T2: {1}}
    assert out["m3"] == {T1: {4, 5}, T2: {2}}


def test_reconcile_revokes_before_it_assigns() -> None:
    epochs: dict[tuple[uuid.UUID, int], int] = {}
    owner = ConsumerGroupMember("m1", member_epoch=1, assigned={T1: frozenset(range(6))})
    for p in range(6):
        epochs[(T1, p)] = 1
    target_m1 = {T1: frozenset({0, 1, 2})}
    step = reconcile(owner, 2, target_m1, lambda t, p: epochs.get((t, p), -1), None)
    assert step.state is MemberState.UNREVOKED_PARTITIONS
    assert step.member_epoch == 1
    assert step.assigned == target_m1
    assert step.pending_revocation == {T1: frozenset({3, 4, 5})}
    # m2 may not take 3-5 while m1 still holds them.
    newcomer = ConsumerGroupMember("m2", member_epoch=0)
    waiting = reconcile(
        newcomer, 2, {T1: frozenset({3, 4, 5})}, lambda t, p: epochs.get((t, p), -1), {}
    )
    assert waiting.state is MemberState.UNRELEASED_PARTITIONS
    assert waiting.assigned == {}
    # m1 reports the revocation done: it moves to epoch 2, and 3-5 are free.
    done = reconcile(step, 2, target_m1, lambda t, p: epochs.get((t, p), -1), target_m1)
    assert (done.state, done.member_epoch, done.assigned) == (MemberState.STABLE, 2, target_m1)
    for p in (3, 4, 5):
        del epochs[(T1, p)]
    got = reconcile(waiting, 2, {T1: frozenset({3, 4, 5})}, lambda t, p: epochs.get((t, p), -1), {})
    assert (got.state, got.assigned) == (MemberState.STABLE, {T1: frozenset({3, 4, 5})})


@pytest.mark.parametrize(
    "pattern", ["^rx-.*", "(^a|b)[0-9]+", r"topic\.\d+\z", "[]a]", "(orders|pay)-(eu-[0-9]+)?"]
)
def test_re2_patterns_accepted(pattern: str) -> None:
    compile_topic_regex(pattern)


@pytest.mark.parametrize(
    "pattern",
    [r"(a)\1", "a(?=b)", "a(?!b)", "(?<=a)b", "(?>a)", "a*+", r"a\Z", "(", "a{2}+", "(a+)+$",
     "(a|ab)*c", "(x.*)*"],
)  # fmt: skip
def test_what_re2j_refuses_is_refused(pattern: str) -> None:
    with pytest.raises(InvalidRegex):
        compile_topic_regex(pattern)


def test_regex_matches_whole_names() -> None:
    pattern = compile_topic_regex("rx-.*")
    assert pattern.fullmatch("rx-1")
    assert not pattern.fullmatch("xrx-1")


@pytest.mark.parametrize(
    ("settings", "complaint"),
    [
        ({"group.consumer.heartbeat.interval.ms": "45000"}, "less than"),
        ({"group.consumer.session.timeout.ms": "1000"}, "min.session"),
        ({"group.consumer.heartbeat.interval.ms": "20000"}, "max.heartbeat"),
        ({"group.consumer.assignors": "sticky"}, "unknown assignor sticky"),
        ({"group.coordinator.rebalance.protocols": "consumer"}, "'classic'"),
    ],
)
def test_group_settings_checked_at_start_up(settings: dict[str, str], complaint: str) -> None:
    config = KafkaConfig.from_properties({"log.dirs": "/unused", **settings}, log_unused=False)
    with pytest.raises(ConfigException, match=complaint):
        group_config_from(config)


def test_kafka_class_names_of_assignors_are_accepted() -> None:
    config = KafkaConfig.from_properties({"log.dirs": "/unused"}, log_unused=False)
    assert group_config_from(config).consumer_assignors == ("uniform", "range")
