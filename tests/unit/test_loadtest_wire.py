"""The wire load's frames: a real Produce request, patched only in its correlation id."""

from __future__ import annotations

import struct

from kio.schema.produce.v9.response import (
    PartitionProduceResponse,
    ProduceResponse,
    TopicProduceResponse,
)
from kio.static.primitive import i32, i64

from kplane.protocol import api
from kplane.protocol.errors import ErrorCode
from kplane.protocol.framing import parse_request_header, response_frame_prefix
from kplane.protocol.records import scan_batches
from kplane.tools.loadtest.wire_load import (
    CORRELATION_AT,
    PRODUCE,
    PRODUCE_VERSION,
    produce_error,
    produce_frame,
)


def test_the_frame_is_a_produce_of_one_batch() -> None:
    frame = produce_frame("load", 3, 100, 7)
    (size,) = struct.unpack_from(">i", frame, 0)
    assert size == len(frame) - 4
    struct.pack_into(">i", frame, CORRELATION_AT, 42)
    body = bytes(frame[4:])
    header = parse_request_header(body)
    assert (header.api_key, header.api_version, header.correlation_id) == (
        PRODUCE,
        PRODUCE_VERSION,
        42,
    )
    request = api.decode_request(PRODUCE, PRODUCE_VERSION, body, header.body_offset)
    assert request.acks == 1
    (topic,) = request.topic_data
    (partition,) = topic.partition_data
    assert (topic.name, partition.index) == ("load", 3)
    (batch,) = scan_batches(partition.records)
    assert batch.record_count == 7


def response_frame(code: ErrorCode) -> bytes:
    partition = api.make(
        PartitionProduceResponse, index=i32(0), error_code=code, base_offset=i64(0)
    )
    response = api.make(
        ProduceResponse,
        responses=(api.make(TopicProduceResponse, name="load", partition_responses=(partition,)),),
    )
    body = api.encode(response)
    return (response_frame_prefix(PRODUCE, PRODUCE_VERSION, 1, len(body)) + body)[4:]


def test_the_answer_s_error() -> None:
    assert produce_error(response_frame(ErrorCode.none)) == ErrorCode.none
    assert (
        produce_error(response_frame(ErrorCode.not_leader_or_follower))
        == ErrorCode.not_leader_or_follower
    )
