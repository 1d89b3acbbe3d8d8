"""Hostile clients over real sockets: no request crashes, hangs or bloats the broker."""

from __future__ import annotations

import dataclasses
import datetime
import io
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.metadata.v10.request import MetadataRequest as MetadataV10
from kio.schema.metadata.v10.request import MetadataRequestTopic as MetadataTopicV10
from kio.serial._introspect import classify_field, get_field_tag
from kio.serial._serialize import get_field_writer
from structlog.testing import capture_logs

from kplane.broker.network.processor import WRITE_BUFFER_HIGH
from kplane.protocol import api
from kplane.protocol.body_scan import write_uvarint
from kplane.protocol.errors import ErrorCode
from kplane.protocol.framing import encode_request_frame
from kplane.testing.plugin import RunningBroker

API_VERSIONS = ApiVersionsRequest(client_software_name="t", client_software_version="1")


def _still_serves(broker: RunningBroker) -> None:
    with broker.wire() as client:
        assert client.request(API_VERSIONS).error_code == ErrorCode.none


def _oversized(cls: type[Any]) -> bytes | None:
    """A body of ``cls`` whose first top-level array count (or, lacking arrays, string or
    bytes length) claims far more than the frame holds; None when it has neither."""
    entity = api.make(cls)
    flexible = bool(cls.__flexible__)
    out = io.BytesIO()
    target: tuple[int, Any] | None = None
    for field in dataclasses.fields(cls):
        if get_field_tag(field) is not None:
            continue
        position = out.tell()
        if target is None or not target[1].is_array:
            kind = classify_field(field)
            sized = field.metadata.get("kafka_type") in ("string", "bytes", "records")
            if kind.is_array or (sized and target is None):
                target = (position, kind, field)
        get_field_writer(field, flexible, False, False)(out, getattr(entity, field.name))
    if target is None:
        return None
    body = out.getvalue() + (b"\x00" if flexible else b"")
    position, kind, field = target
    if flexible:
        _, after = _uvarint_end(body, position)
        return body[:position] + write_uvarint(0xFFFFFFFF) + body[after:]
    wide = kind.is_array or field.metadata["kafka_type"] != "string"
    size = struct.pack(">i", 0x7FFFFFFE) if wide else struct.pack(">h", 0x7FFE)
    return body[:position] + size + body[position + len(size) :]


def _uvarint_end(data: bytes, pos: int) -> tuple[int, int]:
    while data[pos] & 0x80:
        pos += 1
    return 0, pos + 1


def _served(broker: RunningBroker) -> Iterator[tuple[int, int]]:
    with broker.wire() as client:
        response = client.request(API_VERSIONS)
    for key in response.api_keys:
        for version in range(key.min_version, key.max_version + 1):
            yield int(key.api_key), version


def _error_lines(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in logs if e["log_level"] in ("error", "critical") or "exc_info" in e]


def test_counts_beyond_the_frame_are_refused_for_every_served_api(broker: RunningBroker) -> None:
    """Metadata v12 with a topic count of 2^32-2 used to abort the process; now every
    served (api, version) with such a count or length gets its connection closed."""
    tried = 0
    with capture_logs() as logs:
        with broker.wire() as client:  # the 21-byte request, as it was sent
            client.send_raw(bytes.fromhex("000000110003000c0000000100017800ffffffff0f"))
            assert client.is_closed_by_peer()
        for key, version in _served(broker):
            body = _oversized(api.request_class(key, version))
            if body is None:
                continue
            with broker.wire() as client:
                client.send_raw(encode_request_frame(key, version, 1, "t", body))
                assert client.is_closed_by_peer(), (api.API_NAMES[key], version)
            tried += 1
    assert tried > 150  # every served pair with an array, string or bytes field
    assert not _error_lines(logs)
    malformed = [e for e in logs if e["event"] == "closing connection: malformed request"]
    assert len(malformed) == tried + 1
    assert "cannot fit" in malformed[0]["reason"]
    _still_serves(broker)


def test_null_where_not_nullable_closes_as_kafka_does(broker: RunningBroker) -> None:
    """CreateTopics v5 with a null topics array: Kafka fails to parse it and closes."""
    body = b"\x00" + struct.pack(">i", 1000) + b"\x00" + b"\x00"
    with capture_logs() as logs, broker.wire() as client:
        client.send_raw(encode_request_frame(19, 5, 1, "t", body))
        assert client.is_closed_by_peer()
    assert not _error_lines(logs)
    assert any("not nullable" in e.get("reason", "") for e in logs)
    _still_serves(broker)


def test_unknown_tagged_fields_are_ignored(broker: RunningBroker) -> None:
    """KIP-482: a tag the broker does not know is skipped, on ApiVersions v3 too."""
    body = api.encode(API_VERSIONS)
    assert body.endswith(b"\x00")
    tagged = body[:-1] + b"\x02" + b"\x05\x02hi" + b"\x09\x00"
    with broker.wire() as client:
        client.send_raw(encode_request_frame(18, 3, 7, "t", tagged))
        frame = client.read_frame()
    response = api.decode_response(18, 3, frame, 4)
    assert response.error_code == ErrorCode.none
    assert response.api_keys


def test_metadata_v10_topic_by_id_without_name_is_closed_not_hung(
    broker: RunningBroker,
) -> None:
    """Used to leave the connection neither answered nor closed, and CLOSE-WAIT for good."""
    request = MetadataV10(
        topics=(MetadataTopicV10(topic_id=uuid.uuid4(), name=None),),
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    _still_serves(broker)  # the controller's connection is up
    before = set(broker.connections())
    with capture_logs() as logs, broker.wire() as client:
        client.send(request)
        assert client.is_closed_by_peer()
    assert not _error_lines(logs)
    assert _connections(broker, before) == 0


def _connections(broker: RunningBroker, before: set[str], settle: float = 5.0) -> int:
    """Connections opened since ``before`` that the broker still holds, once they had
    ``settle`` seconds to go (the broker's own controller connection is in ``before``)."""
    deadline = time.monotonic() + settle
    while True:
        count = len(set(broker.connections()) - before)
        if count == 0 or time.monotonic() > deadline:
            return count
        time.sleep(0.02)


def test_a_parked_fetch_of_a_closed_connection_is_released(broker: RunningBroker) -> None:
    """A Fetch waiting up to ten minutes lets go of its socket when the client leaves."""
    broker.create_topic("idle", 1)
    info = broker.topic_metadata("idle")
    fetch = FetchRequest(
        replica_id=-1,
        max_wait=datetime.timedelta(minutes=10),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(
            FetchTopic(
                topic="idle",
                partitions=(
                    FetchPartition(
                        partition=0,
                        current_leader_epoch=-1,
                        fetch_offset=0,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 20,
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    assert info.error_code == ErrorCode.none
    before = set(broker.connections())
    clients = [broker.wire() for _ in range(20)]
    for client in clients:
        client.send(fetch)
    time.sleep(0.3)  # the fetches are parked
    assert _connections(broker, before, settle=0) == 20
    for client in clients:
        client.close()
    assert _connections(broker, before) == 0
    _still_serves(broker)


def test_a_client_that_never_reads_is_not_buffered_without_bound(broker: RunningBroker) -> None:
    """Pipelined requests with no reads: the broker stops taking requests once its unsent
    responses pass a bound, and answers all of them in order once the client reads."""
    count = 12_000  # ~3 MB of answers: well past the bound and the kernel buffers
    frame = b"".join(
        encode_request_frame(18, 3, i, "t", api.encode(API_VERSIONS)) for i in range(count)
    )
    response_size = 4 + len(_answer_bytes(broker))  # the controller's connection is up
    before = set(broker.connections())
    sock = socket.create_connection(broker.address(), timeout=10)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sender = threading.Thread(target=sock.sendall, args=(frame,), daemon=True)
    sender.start()
    time.sleep(0.5)
    [connection] = set(broker.connections()) - before
    assert _settled_write_buffer(broker, connection) <= WRITE_BUFFER_HIGH + response_size
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)  # now read quickly
    reader = sock.makefile("rb")
    for i in range(count):
        (size,) = struct.unpack(">i", reader.read(4))
        body = reader.read(size)
        assert struct.unpack_from(">i", body)[0] == i
    sender.join(timeout=10)
    sock.close()


def _settled_write_buffer(broker: RunningBroker, connection: str, limit: float = 20.0) -> int:
    """The connection's unsent bytes once they stopped changing for a second."""
    deadline = time.monotonic() + limit
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        size = broker.connections().get(connection, 0)
        if size != last:
            last, since = size, time.monotonic()
        elif time.monotonic() - since >= 1.0:
            break
        time.sleep(0.05)
    return last


def _answer_bytes(broker: RunningBroker) -> bytes:
    with broker.wire() as client:
        client.send(API_VERSIONS)
        return client.read_frame()


def test_sasl_listener_bounds_frames_before_authentication(broker_factory) -> None:
    broker = broker_factory(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                'username="admin" password="admin-secret" user_admin="admin-secret";'
            ),
            "sasl.server.max.receive.size": "1024",
        }
    )
    with capture_logs() as logs, broker.wire("SASL_PLAINTEXT") as client:
        client.send_raw(struct.pack(">i", 2048) + b"\x00" * 64)
        assert client.is_closed_by_peer()
    assert any(e["event"].endswith("before SASL authentication") for e in logs)
    with broker.wire("SASL_PLAINTEXT") as client:  # within the bound: answered
        assert client.request(API_VERSIONS).error_code == ErrorCode.none


def test_a_half_sent_large_frame_holds_only_what_arrived(broker_factory) -> None:
    """A frame counts against queued.max.request.bytes as its bytes arrive, and frames still
    arriving hold at most half of the pool: a large frame half sent (more than half the
    pool) does not stop other connections' requests. Nothing is dropped."""
    broker = broker_factory({"queued.max.request.bytes": "65536"})
    hog = socket.create_connection(broker.address(), timeout=10)
    hog.sendall(struct.pack(">i", 10 << 20) + b"\x00" * 48_000)
    time.sleep(0.2)
    with broker.wire() as client:
        client.sock.settimeout(10)
        client.send(API_VERSIONS)
        frame = client.read_frame()
    assert api.decode_response(18, 3, frame, 4).error_code == ErrorCode.none
    hog.close()
    _still_serves(broker)


def test_controller_request_naming_an_impossible_topic_changes_nothing(
    broker: RunningBroker,
) -> None:
    """An UpdateMetadata from any client naming topic "" (epoch 2^31-1) used to enter the
    cache and refuse every later controller update as stale; now it is refused whole."""
    forged = bytes.fromhex(
        "000000450006000400000001000174000000007fffffff00000001000000000000000000000000"
        "00000000000000000001000000000000000000000001000000000000000000000000"
    )
    with broker.wire() as client:
        client.send_raw(forged)
        frame = client.read_frame()
    assert api.decode_response(6, 4, frame, 4).error_code == ErrorCode.invalid_topic_exception
    assert "" not in broker.topics()
    broker.create_topic("after-forgery")
    assert broker.topic_metadata("after-forgery").error_code == ErrorCode.none


def test_retention_beyond_a_timedelta_is_taken_as_kafka_takes_it(broker: RunningBroker) -> None:
    """OffsetCommit v2 with retention_time_ms 2^63-1: Kafka takes any int64; kio's decoder
    used to fail on it and the connection closed."""
    frame = bytes.fromhex(
        "000000200008000200000001000174000167ffffffff00007fffffffffffffff00000000"
    )
    with broker.wire() as client:
        client.send_raw(frame)
        answer = client.read_frame()
    assert api.decode_response(8, 2, answer, 4).topics == ()
