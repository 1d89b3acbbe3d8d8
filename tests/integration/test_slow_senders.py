"""Slow senders: unfinished frames hold the memory pool only for the bytes that arrived and
at most half of it, and must complete within ``connections.max.idle.ms`` (a trickle does
not keep one alive), so a handful of them never stop the broker answering others."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from structlog.testing import capture_logs

from kplane.protocol.errors import ErrorCode
from kplane.testing.plugin import RunningBroker

API_VERSIONS = ApiVersionsRequest(client_software_name="t", client_software_version="1")
MAX_FRAME = 2 << 20  # socket.request.max.bytes
POOL = 5 << 20  # queued.max.request.bytes: room for two and a half such frames
SENT = MAX_FRAME * 95 // 100  # what each slow sender sends of its frame


@pytest.fixture
def slow_senders() -> Iterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    yield opened
    for sock in opened:
        sock.close()


def _start_frame(broker: RunningBroker, opened: list[socket.socket]) -> socket.socket:
    """A connection that sends the size of a MAX_FRAME frame and 95 % of it."""
    sock = socket.create_connection(broker.address(), timeout=10)
    opened.append(sock)
    sock.sendall(struct.pack(">i", MAX_FRAME) + b"\x00" * SENT)
    return sock


def _answered_within(broker: RunningBroker, seconds: float) -> bool:
    with broker.wire() as client:
        client.sock.settimeout(seconds)
        try:
            return client.request(API_VERSIONS).error_code == ErrorCode.none
        except TimeoutError:
            return False


def test_slow_senders_holding_partial_frames_do_not_stop_other_clients(
    broker_factory, slow_senders
) -> None:
    broker = broker_factory(
        {"socket.request.max.bytes": str(MAX_FRAME), "queued.max.request.bytes": str(POOL)}
    )
    for _ in range(3):  # 3 x 95 % of a frame is more than the pool
        _start_frame(broker, slow_senders)
    time.sleep(1.0)  # their bytes are in
    assert _answered_within(broker, 5.0)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap()})
    assert admin.list_topics(timeout=5).brokers
    for sock in slow_senders:  # once they leave, their memory is back
        sock.close()
    assert _answered_within(broker, 5.0)


def test_a_trickled_frame_is_closed_at_its_deadline(broker_factory, slow_senders) -> None:
    broker = broker_factory(
        {
            "socket.request.max.bytes": str(MAX_FRAME),
            "queued.max.request.bytes": str(POOL),
            "connections.max.idle.ms": "3000",
        }
    )
    stop = threading.Event()
    closed_after: list[float] = []

    def trickle(sock: socket.socket) -> None:
        started = time.monotonic()
        while not stop.wait(0.5) and time.monotonic() - started < 15:
            try:
                sock.send(b"\x00")  # a byte every half second: never idle
            except OSError:
                closed_after.append(time.monotonic() - started)
                return

    with capture_logs() as logs:
        sock = _start_frame(broker, slow_senders)
        thread = threading.Thread(target=trickle, args=(sock,))
        thread.start()
        try:
            sock.settimeout(15)
            assert sock.recv(1) == b""  # the broker closed it
        except ConnectionResetError:
            pass
        finally:
            stop.set()
            thread.join(5)
    stalled = [e for e in logs if "not completed" in e["event"]]
    assert len(stalled) == 1, logs
    assert stalled[0]["connection"] and stalled[0]["received"] >= SENT
    assert stalled[0]["size"] == MAX_FRAME and stalled[0]["count"] == 1
    assert _answered_within(broker, 5.0)
