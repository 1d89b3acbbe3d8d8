"""Produce's hand-written codec against kio's, for every version served: a request kio
encodes decodes to the same fields; a response written by hand decodes with kio to what
was meant; bodies that do not fit are refused, not trusted."""

from __future__ import annotations

import datetime
import uuid

import pytest

from kplane.protocol import api
from kplane.protocol.body_scan import MalformedBody
from kplane.protocol.produce_codec import (
    PartitionResult,
    TopicResult,
    decode_produce_request,
    encode_produce_response,
)

PRODUCE = 0
VERSIONS = list(api.kio_versions(PRODUCE))
TOPIC_ID = uuid.UUID("6a1f1f43-0d6e-4e5c-9d3e-111122223333")


def _request(version: int, transactional_id: str | None = "tx") -> object:
    module = api.request_module(PRODUCE, version)
    by_id = version >= 13
    partitions = (
        api.make(module.PartitionProduceData, index=0, records=b"\x01\x02\x03"),
        api.make(module.PartitionProduceData, index=7, records=None),
    )
    topics = (
        api.make(
            module.TopicProduceData,
            name=None if by_id else "t\u00e9",
            topic_id=TOPIC_ID if by_id else None,
            partition_data=partitions,
        ),
        api.make(
            module.TopicProduceData,
            name=None if by_id else "other",
            topic_id=uuid.UUID(int=5) if by_id else None,
            partition_data=(),
        ),
    )
    return api.make(
        api.request_class(PRODUCE, version),
        transactional_id=transactional_id,
        acks=-1,
        timeout=datetime.timedelta(milliseconds=30000),
        topic_data=topics,
    )


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("transactional_id", ["tx", None])
def test_requests_decode_as_kio_reads_them(version: int, transactional_id: str | None) -> None:
    request = _request(version, transactional_id)
    wire = b"\xaa\xbb" + api.encode(request)
    decoded = decode_produce_request(version, wire, 2)
    expected = api.decode_request(PRODUCE, version, wire, 2)
    assert decoded.transactional_id == expected.transactional_id
    assert decoded.acks == expected.acks
    assert decoded.timeout_ms == expected.timeout / datetime.timedelta(milliseconds=1)
    assert [(t.name, t.topic_id) for t in decoded.topic_data] == [
        (t.name if version < 13 else None, t.topic_id if version >= 13 else None)
        for t in expected.topic_data
    ]
    assert [[(p.index, p.records) for p in t.partition_data] for t in decoded.topic_data] == [
        [(p.index, p.records) for p in t.partition_data] for t in expected.topic_data
    ]


def test_unknown_tagged_fields_are_skipped() -> None:
    version = 9
    wire = bytearray(api.encode(_request(version)))
    assert wire[-1] == 0  # the request's own tagged fields: none
    wire[-1:] = b"\x01\x05\x02\xee\xee"  # one unknown tag (5) of two bytes
    assert decode_produce_request(version, bytes(wire), 0).acks == -1


@pytest.mark.parametrize("version", [3, 9])
def test_counts_and_lengths_beyond_the_body_are_refused(version: int) -> None:
    wire = api.encode(_request(version))
    for cut in range(len(wire) - 1):
        with pytest.raises(MalformedBody):
            decode_produce_request(version, wire[:cut], 0)
    flexible = version >= 9
    huge_count = (b"\x00" if flexible else b"\xff\xff") + b"\x00\x01" + b"\x00\x00\x00\x00"
    huge_count += b"\xff\xff\xff\x0f" if flexible else b"\x7f\xff\xff\xff"
    with pytest.raises(MalformedBody, match="announced"):
        decode_produce_request(version, huge_count, 0)


def test_a_null_topic_array_is_refused() -> None:
    with pytest.raises(MalformedBody, match="null"):
        decode_produce_request(3, b"\xff\xff\x00\x01\x00\x00\x00\x00\xff\xff\xff\xff", 0)


@pytest.mark.parametrize("version", VERSIONS)
def test_responses_decode_with_kio_as_meant(version: int) -> None:
    topics = [
        TopicResult(
            "t\u00e9",
            TOPIC_ID,
            [
                PartitionResult(0, 0, 41, 1_700_000_000_123, 3),
                PartitionResult(
                    2,
                    87,
                    error_message="bad records",
                    record_errors=[(1, "no key"), (4, None)],
                ),
            ],
        ),
        TopicResult("empty", uuid.UUID(int=9), []),
    ]
    decoded = api.decode_response(PRODUCE, version, encode_produce_response(version, topics, 7))
    assert decoded.throttle_time == datetime.timedelta(milliseconds=7)
    first, second = decoded.responses
    if version >= 13:
        assert (first.topic_id, second.topic_id) == (TOPIC_ID, uuid.UUID(int=9))
    else:
        assert (first.name, second.name) == ("t\u00e9", "empty")
    assert second.partition_responses == ()
    ok, refused = first.partition_responses
    assert (ok.index, ok.error_code, ok.base_offset) == (0, 0, 41)
    assert ok.log_append_time == datetime.datetime.fromtimestamp(1_700_000_000.123, datetime.UTC)
    assert getattr(ok, "log_start_offset", None) == (3 if version >= 5 else None)
    assert (refused.index, refused.error_code, refused.base_offset) == (2, 87, -1)
    assert refused.log_append_time is None
    if version >= 8:
        assert refused.error_message == "bad records"
        assert [(e.batch_index, e.batch_index_error_message) for e in refused.record_errors] == [
            (1, "no key"),
            (4, None),
        ]
