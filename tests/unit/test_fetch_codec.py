"""Fetch's hand-written codec against kio's, for every version served: a request kio
encodes decodes to the same fields; a response written by hand is byte for byte what kio
encodes; bodies that do not fit are refused, not trusted."""

from __future__ import annotations

import datetime
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.body_scan import MalformedBody
from kplane.protocol.errors import ErrorCode
from kplane.protocol.fetch_codec import (
    FetchPartitionResult,
    FetchTopicResult,
    decode_fetch_request,
    encode_fetch_response,
)

VERSIONS = list(api.kio_versions(ApiKey.FETCH))
TOPIC_ID = uuid.UUID("6a1f1f43-0d6e-4e5c-9d3e-111122223333")


def _request(version: int, replica_id: int = -1, cluster_id: str | None = None) -> object:
    module = api.request_module(ApiKey.FETCH, version)
    by_id = version >= 13
    partitions = (
        api.make(
            module.FetchPartition,
            partition=3,
            current_leader_epoch=7,
            fetch_offset=2**40,
            last_fetched_epoch=6,
            log_start_offset=5,
            partition_max_bytes=1 << 20,
        ),
        api.make(module.FetchPartition, partition=0, fetch_offset=0, partition_max_bytes=1),
    )
    values: dict[str, object] = {
        "replica_id": replica_id,
        "max_wait": datetime.timedelta(milliseconds=500),
        "min_bytes": 1,
        "max_bytes": 52428800,
        "isolation_level": 1,
        "session_id": 9,
        "session_epoch": 2,
        "topics": (
            api.make(
                module.FetchTopic,
                topic=None if by_id else "t\u00e9",
                topic_id=TOPIC_ID if by_id else None,
                partitions=partitions,
            ),
        ),
        "rack_id": "rack-a",
        "cluster_id": cluster_id,
    }
    if version >= 7:
        values["forgotten_topics_data"] = (
            api.make(
                module.ForgottenTopic,
                topic=None if by_id else "gone",
                topic_id=uuid.UUID(int=5) if by_id else None,
                partitions=(1, 2),
            ),
        )
    if version >= 15:
        values["replica_state"] = api.make(
            module.ReplicaState, replica_id=replica_id, replica_epoch=11
        )
    return api.make(api.request_class(ApiKey.FETCH, version), **values)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("replica_id", [-1, 2])
def test_requests_decode_as_kio_reads_them(version: int, replica_id: int) -> None:
    cluster_id = "abc" if version >= 12 else None
    wire = b"\xaa\xbb" + api.encode(_request(version, replica_id, cluster_id))
    kio_request = api.decode_request(ApiKey.FETCH, version, wire, 2)
    ours = decode_fetch_request(version, wire, 2)
    assert ours.replica_id == replica_id
    assert ours.max_wait_ms == 500
    assert (ours.min_bytes, ours.max_bytes) == (1, 52428800)
    assert ours.isolation_level == int(kio_request.isolation_level)
    assert ours.cluster_id == cluster_id
    if version >= 7:
        assert (ours.session_id, ours.session_epoch) == (9, 2)
        forgotten = ours.forgotten_topics_data[0]
        assert forgotten.partitions == (1, 2)
    if version >= 11:
        assert ours.rack_id == "rack-a"
    if version >= 15:
        assert ours.replica_state is not None
        assert ours.replica_state.replica_epoch == 11
    else:
        assert ours.replica_state is None
    for theirs, mine in zip(kio_request.topics, ours.topics, strict=True):
        assert mine.topic == getattr(theirs, "topic", None)
        assert mine.topic_id == getattr(theirs, "topic_id", None)
        for tp, mp in zip(theirs.partitions, mine.partitions, strict=True):
            assert mp.partition == tp.partition
            assert mp.fetch_offset == tp.fetch_offset
            assert mp.partition_max_bytes == tp.partition_max_bytes
            assert mp.current_leader_epoch == getattr(tp, "current_leader_epoch", -1)
            assert mp.last_fetched_epoch == getattr(tp, "last_fetched_epoch", -1)
            assert mp.log_start_offset == getattr(tp, "log_start_offset", -1)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_truncated_request_is_refused_at_every_length(version: int) -> None:
    wire = api.encode(_request(version, 1, "abc" if version >= 12 else None))
    for end in range(len(wire)):
        with pytest.raises(MalformedBody):
            decode_fetch_request(version, wire[:end], 0)


@pytest.mark.parametrize("version", [4, 12])
def test_a_count_past_the_bytes_left_is_refused(version: int) -> None:
    head = bytes(17 if version < 15 else 13) + (bytes(8) if version >= 7 else b"")
    count = b"\xff\xff\xff\x7f" if version >= 12 else b"\x7f\xff\xff\xff"
    with pytest.raises(MalformedBody, match="elements announced"):
        decode_fetch_request(version, head + count + bytes(30), 0)


batches = st.lists(st.binary(min_size=0, max_size=64), max_size=3)
aborted = st.none() | st.lists(st.tuples(st.integers(0, 2**40), st.integers(0, 2**40)), max_size=2)
partitions = st.lists(
    st.tuples(st.integers(0, 50), st.sampled_from([0, 1, 6]), aborted, batches), max_size=3
)
topics = st.lists(
    st.tuples(st.text("abcxyz\u00e9", min_size=1, max_size=8), partitions), max_size=3
)


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=25, deadline=None)
@given(topics=topics, throttle_ms=st.integers(0, 2**31 - 1))
def test_responses_are_what_kio_encodes(version: int, topics: list, throttle_ms: int) -> None:
    module = api.response_module(ApiKey.FETCH, version)
    by_id = version >= 13

    def key(name: str) -> uuid.UUID:
        return uuid.uuid5(uuid.NAMESPACE_DNS, name)

    expected = api.encode(
        api.make(
            api.response_class(ApiKey.FETCH, version),
            throttle_time=datetime.timedelta(milliseconds=throttle_ms),
            error_code=ErrorCode.none,
            session_id=4,
            responses=tuple(
                api.make(
                    module.FetchableTopicResponse,
                    topic=None if by_id else name,
                    topic_id=key(name) if by_id else None,
                    partitions=tuple(
                        api.make(
                            module.PartitionData,
                            partition_index=index,
                            error_code=ErrorCode(error),
                            high_watermark=10,
                            last_stable_offset=9,
                            log_start_offset=2,
                            aborted_transactions=None
                            if txns is None
                            else tuple(
                                api.make(module.AbortedTransaction, producer_id=p, first_offset=f)
                                for p, f in txns
                            ),
                            preferred_read_replica=-1,
                            records=b"".join(bs),
                        )
                        for index, error, txns, bs in parts
                    ),
                )
                for name, parts in topics
            ),
        )
    )
    pieces = encode_fetch_response(
        version,
        [
            FetchTopicResult(
                None if by_id else name,
                key(name) if by_id else None,
                [
                    FetchPartitionResult(
                        index, error, 10, 9, 2, txns, -1, [memoryview(b) for b in bs]
                    )
                    for index, error, txns, bs in parts
                ],
            )
            for name, parts in topics
        ],
        session_id=4,
        throttle_time_ms=throttle_ms,
    )
    assert b"".join(bytes(p) for p in pieces) == expected


def test_stored_batches_are_passed_through_not_copied() -> None:
    batch = memoryview(b"stored batch bytes")
    pieces = encode_fetch_response(
        16, [FetchTopicResult(None, TOPIC_ID, [FetchPartitionResult(0, records=[batch])])]
    )
    assert any(piece is batch for piece in pieces)
    assert bytes(pieces[0][:4]) == bytes(4)  # throttle_time_ms leads the body
