"""Which broker coordinates a group."""

from kplane.broker.group.placement import coordinator_for, java_string_hash, offsets_partition


def test_java_string_hash_matches_java() -> None:
    # Values from Java's "...".hashCode().
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Hello World") == -862545276
    assert java_string_hash("é") == 233


def test_groups_spread_over_brokers_and_stay_put() -> None:
    groups = [f"group-{i}" for i in range(300)]
    owners = [coordinator_for(g, [2, 0, 1], 50) for g in groups]
    assert set(owners) == {0, 1, 2}
    assert owners == [coordinator_for(g, [0, 1, 2], 50) for g in groups]
    assert coordinator_for("g", [], 50) is None
    assert 0 <= offsets_partition("console-consumer-12345", 50) < 50
