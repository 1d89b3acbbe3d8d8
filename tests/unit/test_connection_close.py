"""The per-connection close hook (Kafka's ConnectionDisconnectListener): a handler asks to
be told when the connection its request came on closes; a real Processor on a loopback
socket tells it once, on its network thread, whatever closed the connection."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from kplane.broker.config.endpoint import EndPoint, SecurityProtocol
from kplane.broker.network.plane import data_plane
from kplane.broker.network.processor import Processor
from kplane.broker.network.request_channel import Request, RequestChannel, Response
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.framing import encode_request_frame


@pytest.fixture
def processor() -> Iterator[tuple[Processor, RequestChannel]]:
    channel = RequestChannel(data_plane(10, 1))
    endpoint = EndPoint("PLAINTEXT", "127.0.0.1", 0, SecurityProtocol.PLAINTEXT)
    proc = Processor(0, endpoint, channel, 1 << 20, 600_000, lambda _key: True)
    proc.start()
    yield proc, channel
    proc.shutdown()


def _connect(proc: Processor) -> socket.socket:
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        sock, addr = server.accept()
    proc.accept(sock, addr)
    return client


def _request(client: socket.socket, channel: RequestChannel) -> Request:
    """A request read off ``client``'s connection, answered (nothing written) so the
    connection goes on."""
    client.sendall(encode_request_frame(ApiKey.API_VERSIONS, 0, 1, "t", b""))
    request = channel.receive_request(timeout=30)
    assert isinstance(request, Request)
    channel.send_response(Response(request, None))
    return request


class _Calls:
    def __init__(self) -> None:
        self.threads: list[str] = []
        self.done = threading.Event()

    def __call__(self) -> None:
        self.threads.append(threading.current_thread().name)
        self.done.set()


def test_called_once_on_the_network_thread_when_the_client_closes(
    processor: tuple[Processor, RequestChannel],
) -> None:
    proc, channel = processor
    client = _connect(proc)
    request = _request(client, channel)
    first, second = _Calls(), _Calls()
    request.on_connection_close(first)
    request.on_connection_close(second)
    assert not first.done.wait(0.2)  # open: nothing yet
    client.close()
    assert first.done.wait(30) and second.done.wait(30)
    assert first.threads == ["data-plane-kafka-network-thread-PLAINTEXT-0"]
    late = _Calls()
    request.on_connection_close(late)  # already closed: at once, here
    assert late.threads == [threading.current_thread().name]
    assert first.threads == second.threads == ["data-plane-kafka-network-thread-PLAINTEXT-0"]


def test_called_when_the_broker_closes_the_connection(
    processor: tuple[Processor, RequestChannel],
) -> None:
    proc, channel = processor
    clients = [_connect(proc) for _ in range(2)]
    calls = [_Calls() for _ in clients]
    for client, call in zip(clients, calls, strict=True):
        _request(client, channel).on_connection_close(call)
    proc.shutdown()
    for call in calls:
        assert call.done.wait(30)
        assert call.threads == ["data-plane-kafka-network-thread-PLAINTEXT-0"]
    for client in clients:
        client.close()


def test_a_failing_callback_does_not_keep_the_others_from_running(
    processor: tuple[Processor, RequestChannel],
) -> None:
    proc, channel = processor
    client = _connect(proc)
    request = _request(client, channel)

    def boom() -> None:
        raise RuntimeError("listener fault")

    after = _Calls()
    request.on_connection_close(boom)
    request.on_connection_close(after)
    client.close()
    assert after.done.wait(30)
