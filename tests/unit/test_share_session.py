"""ShareSessionCache: a session goes with the connection that opened it; a full cache
refuses a new session rather than evicting one."""

from __future__ import annotations

import pytest

from kplane.broker.log.partition import TopicPartition
from kplane.broker.share.share_session import ShareSessionCache
from kplane.protocol.errors import ErrorCode, KafkaError

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


def test_a_full_cache_refuses_a_new_session_and_evicts_none() -> None:
    """Kafka 4.1's ShareSessionCache: no eviction (an evicted session's member would keep
    its records until their locks expired); SHARE_SESSION_LIMIT_REACHED instead."""
    cache = ShareSessionCache(max_sessions=2)
    a = cache.open("g", "a", [TP], "c1")
    cache.open("g", "b", [TP], "c2")
    with pytest.raises(KafkaError) as full:
        cache.open("g", "c", [TP], "c3")
    assert full.value.code == ErrorCode.share_session_limit_reached
    assert cache.get("g", "a") is a and len(cache) == 2
    assert not cache.watches("c3")
    again = cache.open("g", "a", [TP], "c1")  # a member opening its own again takes its place
    assert again is not a and cache.get("g", "a") is again
    assert cache.close("g", "b") is not None  # a session that goes makes room at once
    assert cache.open("g", "c", [TP], "c3").epoch == 1
