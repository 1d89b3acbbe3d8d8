"""A blocking, one-connection Kafka wire client for protocol-level tests."""

from __future__ import annotations

import itertools
import socket
import struct
from typing import Any

from kplane.protocol import api
from kplane.protocol.framing import encode_request_frame, response_body_offset


class WireClient:
    """Sends kio request entities over one socket and decodes the responses."""

    def __init__(self, host: str, port: int, client_id: str = "kplane-wire", timeout: float = 10):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.client_id = client_id
        self._correlation = itertools.count(1)

    def send_raw(self, data: bytes) -> None:
        """Write bytes as they are."""
        self.sock.sendall(data)

    def send(self, request: Any, api_version: int | None = None) -> int:
        """Send a kio request entity; returns its correlation id."""
        key = int(request.__api_key__)
        version = int(request.__version__) if api_version is None else api_version
        correlation_id = next(self._correlation)
        body = api.encode(request)
        self.sock.sendall(encode_request_frame(key, version, correlation_id, self.client_id, body))
        return correlation_id

    def read_frame(self) -> bytes:
        """Read one size-prefixed frame; raises ConnectionError when the peer closed."""
        (size,) = struct.unpack(">i", self._read_exactly(4))
        return self._read_exactly(size)

    def _read_exactly(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(n)
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def receive(self, api_key: int, api_version: int) -> tuple[int, Any]:
        """Read a response of ``api_key``/``api_version``: (correlation id, entity)."""
        frame = self.read_frame()
        (correlation_id,) = struct.unpack_from(">i", frame, 0)
        offset = response_body_offset(api_key, api_version)
        return correlation_id, api.decode_response(api_key, api_version, frame, offset)

    def request(self, request: Any) -> Any:
        """Send and wait for the response."""
        version = int(request.__version__)
        correlation_id = self.send(request)
        got, response = self.receive(int(request.__api_key__), version)
        assert got == correlation_id, (got, correlation_id)
        return response

    def is_closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True when the broker closes the connection within ``timeout``."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
