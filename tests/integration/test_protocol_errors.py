"""Bad input on the wire: Kafka's answers, connections closed only where Kafka closes them."""

from __future__ import annotations

import struct

from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsV3
from kio.schema.metadata.v12.request import MetadataRequest

from kplane.protocol import api
from kplane.protocol.errors import ErrorCode
from kplane.protocol.framing import encode_request_frame
from kplane.testing.plugin import RunningBroker


def _still_serves(broker: RunningBroker) -> None:
    with broker.wire() as client:
        response = client.request(
            ApiVersionsV3(client_software_name="t", client_software_version="1")
        )
        assert response.error_code == ErrorCode.none


def test_api_versions_lists_every_served_api(broker: RunningBroker) -> None:
    with broker.wire() as client:
        response = client.request(
            ApiVersionsV3(client_software_name="t", client_software_version="1")
        )
    keys = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    for key in (0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 19, 20, 22, 37, 42, 60):
        assert key in keys, key
        versions = api.kio_versions(key)
        assert keys[key] == (versions.start, versions.stop - 1)


def test_unsupported_api_versions_version_answers_v0_with_error_35(broker: RunningBroker) -> None:
    with broker.wire() as client:
        body = api.encode(ApiVersionsV0())
        client.send_raw(encode_request_frame(18, 99, 7, "t", body))
        frame = client.read_frame()
        (correlation_id,) = struct.unpack_from(">i", frame, 0)
        response = api.decode_response(18, 0, frame, 4)
    assert correlation_id == 7
    assert response.error_code == ErrorCode.unsupported_version
    assert any(k.api_key == 18 for k in response.api_keys)


def test_unsupported_version_of_other_api_closes_connection(broker: RunningBroker) -> None:
    with broker.wire() as client:
        client.send_raw(encode_request_frame(3, 99, 1, "t", b"\x00"))
        assert client.is_closed_by_peer()
    _still_serves(broker)


def test_unknown_api_key_closes_connection(broker: RunningBroker) -> None:
    with broker.wire() as client:
        client.send_raw(encode_request_frame(9999 % 32768, 0, 1, "t", b""))
        assert client.is_closed_by_peer()
    _still_serves(broker)


def test_frame_over_socket_request_max_bytes_closes_connection(broker_factory) -> None:
    broker = broker_factory({"socket.request.max.bytes": "1024"})
    with broker.wire() as client:
        client.send_raw(struct.pack(">i", 4096) + b"\x00" * 16)
        assert client.is_closed_by_peer()
    _still_serves(broker)


def test_negative_frame_size_closes_connection(broker: RunningBroker) -> None:
    with broker.wire() as client:
        client.send_raw(struct.pack(">i", -5))
        assert client.is_closed_by_peer()
    _still_serves(broker)


def test_malformed_body_closes_connection(broker: RunningBroker) -> None:
    with broker.wire() as client:
        client.send_raw(encode_request_frame(3, 12, 1, "t", b"\xff\xff\xff"))
        assert client.is_closed_by_peer()
    _still_serves(broker)


def test_garbage_header_closes_connection(broker: RunningBroker) -> None:
    with broker.wire() as client:
        client.send_raw(struct.pack(">i", 3) + b"\x00\x03\x00")
        assert client.is_closed_by_peer()
    _still_serves(broker)


def test_pipelined_requests_answered_in_order(broker: RunningBroker) -> None:
    with broker.wire() as client:
        request = MetadataRequest(
            topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
        )
        ids = [client.send(request) for _ in range(20)]
        got = [client.receive(3, 12)[0] for _ in ids]
    assert got == ids
