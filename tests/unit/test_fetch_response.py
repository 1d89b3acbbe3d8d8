"""The spliced Fetch response is byte-for-byte what kio encodes, for every version."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode
from kplane.protocol.fetch_response import encode_fetch_response

batches = st.lists(st.binary(min_size=0, max_size=64), max_size=3)
partitions = st.lists(st.tuples(st.integers(0, 50), batches), max_size=3)
topics = st.lists(st.tuples(st.text("abcxyz", min_size=1, max_size=8), partitions), max_size=3)


@pytest.mark.parametrize("version", list(api.kio_versions(ApiKey.FETCH)))
@settings(max_examples=25)
@given(topics=topics)
def test_matches_kio_encoding(version: int, topics: list) -> None:
    module = api.response_module(ApiKey.FETCH, version)
    by_id = version >= 13

    def partition(index: int, records: bytes) -> object:
        return api.make(
            module.PartitionData,
            partition_index=index,
            error_code=ErrorCode.none,
            high_watermark=10,
            last_stable_offset=10,
            log_start_offset=0,
            aborted_transactions=None,
            preferred_read_replica=-1,
            records=records,
        )

    def topic(name: str, parts: tuple) -> object:
        key = uuid.uuid5(uuid.NAMESPACE_DNS, name)
        return api.make(
            module.FetchableTopicResponse,
            topic=None if by_id else name,
            topic_id=key if by_id else None,
            partitions=parts,
        )

    def response(responses: tuple) -> object:
        return api.make(
            api.response_class(ApiKey.FETCH, version),
            error_code=ErrorCode.none,
            session_id=0,
            responses=responses,
        )

    expected = api.encode(
        response(
            tuple(
                topic(name, tuple(partition(i, b"".join(bs)) for i, bs in parts))
                for name, parts in topics
            )
        )
    )
    pieces = encode_fetch_response(
        response(()),
        [
            (topic(name, ()), [(partition(i, b""), [memoryview(b) for b in bs]) for i, bs in parts])
            for name, parts in topics
        ],
    )
    assert b"".join(bytes(p) for p in pieces) == expected
