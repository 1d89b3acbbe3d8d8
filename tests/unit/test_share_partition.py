"""The share-partition state machine: acquisition, locks, acknowledgements, delivery
counts, the start offset, the stored form, and the share sessions' epochs."""

from __future__ import annotations

import pytest

from kplane.broker.log.partition import TopicPartition
from kplane.broker.share.share_partition import (
    AcknowledgementBatch,
    AcknowledgeType,
    AcquiredRecords,
    FetchedBatch,
    RecordState,
    SharePartition,
)
from kplane.broker.share.share_session import ShareSessionCache
from kplane.protocol.errors import ErrorCode, KafkaError

ACCEPT, RELEASE, REJECT, RENEW = (
    AcknowledgeType.ACCEPT,
    AcknowledgeType.RELEASE,
    AcknowledgeType.REJECT,
    AcknowledgeType.RENEW,
)


def partition(start: int = 0, limit: int = 3, max_in_flight: int = 100) -> SharePartition:
    return SharePartition(start, delivery_count_limit=limit, max_in_flight=max_in_flight)


def ack(first: int, last: int, *types: int) -> AcknowledgementBatch:
    return AcknowledgementBatch(first, last, tuple(types))


def test_new_records_are_acquired_once_and_accepting_moves_the_start() -> None:
    sp = partition()
    got = sp.acquire("a", [FetchedBatch(0, 4)], 100, 1000)
    assert got == [AcquiredRecords(0, 4, 1)]
    assert sp.acquire("b", [FetchedBatch(0, 4)], 100, 1000) == []
    assert sp.next_fetch_offset() == 5
    sp.acknowledge("a", [ack(0, 1, ACCEPT)], 0)
    assert sp.start_offset == 2


def test_released_records_come_back_with_a_higher_delivery_count() -> None:
    sp = partition()
    sp.acquire("a", [FetchedBatch(0, 2)], 100, 1000)
    sp.acknowledge("a", [ack(0, 2, ACCEPT, RELEASE, REJECT)], 0)
    assert sp.next_fetch_offset() == 1
    assert sp.acquire("b", [FetchedBatch(0, 2)], 100, 1000) == [AcquiredRecords(1, 1, 2)]
    sp.acknowledge("b", [ack(1, 1, ACCEPT)], 0)
    assert sp.start_offset == 3 and not sp.records


def test_only_the_holder_may_acknowledge_and_a_bad_ack_changes_nothing() -> None:
    sp = partition()
    sp.acquire("a", [FetchedBatch(0, 1)], 100, 1000)
    with pytest.raises(KafkaError) as refused:
        sp.acknowledge("b", [ack(0, 0, ACCEPT)], 0)
    assert refused.value.code == ErrorCode.invalid_record_state
    with pytest.raises(KafkaError):
        sp.acknowledge("a", [ack(0, 0, ACCEPT), ack(5, 5, ACCEPT)], 0)
    assert sp.records[0].state is RecordState.ACQUIRED
    with pytest.raises(KafkaError) as bad:
        sp.acknowledge("a", [ack(0, 1, ACCEPT, ACCEPT, ACCEPT)], 0)
    assert bad.value.code == ErrorCode.invalid_request


def test_past_the_delivery_limit_a_record_is_archived() -> None:
    sp = partition(limit=2)
    for member in ("a", "b"):
        assert sp.acquire(member, [FetchedBatch(0, 0)], 100, 1000)
        sp.acknowledge(member, [ack(0, 0, RELEASE)], 0)
    assert sp.acquire("c", [FetchedBatch(0, 0)], 100, 1000) == []
    assert sp.start_offset == 1


def test_expired_locks_and_a_leaving_member_give_records_back() -> None:
    sp = partition()
    sp.acquire("a", [FetchedBatch(0, 1)], 100, 1000)
    sp.acknowledge("a", [ack(1, 1, RENEW)], 5000)
    assert sp.expire_locks(2000) == 1
    assert sp.records[0].state is RecordState.AVAILABLE
    assert sp.release_member("a") == 1
    assert sp.acquire("b", [FetchedBatch(0, 1)], 100, 1000) == [AcquiredRecords(0, 1, 2)]


def test_aborted_and_control_batches_are_archived_not_handed_out() -> None:
    sp = partition()
    got = sp.acquire(
        "a",
        [FetchedBatch(0, 2, aborted=True), FetchedBatch(3, 3, aborted=True), FetchedBatch(4, 5)],
        100, 1000,
    )  # fmt: skip
    assert got == [AcquiredRecords(4, 5, 1)]
    assert sp.start_offset == 4


def test_in_flight_records_are_bounded() -> None:
    sp = partition(max_in_flight=3)
    assert sp.acquire("a", [FetchedBatch(0, 9)], 100, 1000) == [AcquiredRecords(0, 2, 1)]
    assert not sp.can_acquire(10)
    sp.acknowledge("a", [ack(0, 0, ACCEPT)], 0)
    assert sp.can_acquire(10)


def test_the_stored_form_keeps_progress_and_gives_acquired_records_back() -> None:
    sp = partition()
    sp.acquire("a", [FetchedBatch(0, 5)], 100, 1000)
    sp.acknowledge("a", [ack(0, 0, ACCEPT), ack(2, 3, ACCEPT), ack(4, 4, REJECT)], 0)
    doc = sp.to_json()
    assert doc["start_offset"] == 1
    loaded = SharePartition(
        doc["start_offset"],
        records=[(f, last, RecordState(s), c) for f, last, s, c in doc["state_batches"]],
        delivery_count_limit=3,
        max_in_flight=100,
    )
    assert loaded.end_offset == 6
    got = loaded.acquire("b", [FetchedBatch(0, 5)], 100, 1000)
    assert got == [AcquiredRecords(1, 1, 2), AcquiredRecords(5, 5, 2)]


def test_share_sessions_check_epochs() -> None:
    cache = ShareSessionCache(max_sessions=1)
    tp = TopicPartition("t", 0)
    session = cache.open("g", "m", [tp])
    assert session.epoch == 1
    assert cache.next("g", "m", 1).epoch == 2
    with pytest.raises(KafkaError) as stale:
        cache.next("g", "m", 1)
    assert stale.value.code == ErrorCode.invalid_share_session_epoch
    with pytest.raises(KafkaError) as missing:
        cache.next("g", "other", 1)
    assert missing.value.code == ErrorCode.share_session_not_found
    with pytest.raises(KafkaError) as full:
        cache.open("g", "other", [])
    assert full.value.code == ErrorCode.share_session_limit_reached
    assert cache.close("g", "m") is session
