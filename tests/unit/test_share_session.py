"""ShareSessionCache: a session goes with the connection that opened it."""

from __future__ import annotations

from kplane.broker.log.partition import TopicPartition
from kplane.broker.share.share_session import ShareSessionCache

TP = TopicPartition("t", 0)


def test_a_connections_close_removes_the_sessions_it_opened_and_no_others() -> None:
    cache = ShareSessionCache()
    assert not cache.watches("c1")
    cache.open("g", "m1", [TP], "c1")
    cache.open("g", "m2", [TP], "c2")
    assert cache.watches("c1")
    gone = cache.connection_closed("c1")
    assert [(s.group_id, s.member_id, list(s.partitions)) for s in gone] == [("g", "m1", [TP])]
    assert cache.get("g", "m1") is None and cache.get("g", "m2") is not None
    assert not cache.watches("c1")
    assert cache.connection_closed("c1") == []  # once


def test_a_session_opened_again_on_another_connection_outlives_the_first() -> None:
    cache = ShareSessionCache()
    cache.open("g", "m", [TP], "old")
    again = cache.open("g", "m", [TP], "new")
    assert cache.connection_closed("old") == []
    assert cache.get("g", "m") is again
    assert cache.connection_closed("new") == [again]


def test_a_session_closed_by_its_member_is_not_returned_at_the_connections_close() -> None:
    cache = ShareSessionCache()
    cache.open("g", "m", [TP], "c")
    assert cache.close("g", "m") is not None
    assert cache.connection_closed("c") == []
