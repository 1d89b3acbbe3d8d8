"""A bad frame size after valid requests in the same write: the requests before it are
answered, in order, then the connection closes (Kafka reads frame by frame, so it answers
them too)."""

from __future__ import annotations

import struct

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from structlog.testing import capture_logs

from kplane.protocol import api
from kplane.protocol.errors import ErrorCode
from kplane.protocol.framing import encode_request_frame
from kplane.testing.plugin import RunningBroker

API_VERSIONS = ApiVersionsRequest(client_software_name="t", client_software_version="1")


def _request(correlation_id: int) -> bytes:
    return encode_request_frame(18, 3, correlation_id, "t", api.encode(API_VERSIONS))


@pytest.mark.parametrize(
    ("requests", "size"), [(1, -1), (3, -1), (2, (100 << 20) + 1), (1, -(2**31))]
)
def test_requests_before_a_bad_size_are_answered_then_the_connection_closes(
    broker: RunningBroker, requests: int, size: int
) -> None:
    stream = b"".join(_request(i) for i in range(requests)) + struct.pack(">i", size)
    with capture_logs() as logs, broker.wire() as client:
        client.send_raw(stream)
        for expected in range(requests):
            correlation_id, response = client.receive(18, 3)
            assert (correlation_id, response.error_code) == (expected, ErrorCode.none)
        assert client.is_closed_by_peer()
    closes = [e for e in logs if e["event"] == "closing connection: request frame too large"]
    assert len(closes) == 1 and closes[0]["size"] == size, logs
    with broker.wire() as client:
        assert client.request(API_VERSIONS).error_code == ErrorCode.none
