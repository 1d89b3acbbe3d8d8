"""BrokerConnection: one asyncio connection to a broker, many requests in flight.

Responses are matched to requests by correlation id; the API versions to use are
negotiated with ApiVersions right after connecting (after the TLS handshake when there is
one), then SASL authenticates the connection when configured.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import ssl
import struct
from collections.abc import Callable
from typing import Any

import structlog

from kplane.common.network.sasl import SaslCredentials, authenticate
from kplane.common.network.security import tls_failure
from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode
from kplane.protocol.framing import encode_request_frame, response_body_offset

log = structlog.get_logger(__name__)

_SIZE = struct.Struct(">i")
_CORRELATION = struct.Struct(">i")


class BrokerConnectionError(ConnectionError):
    """The connection failed or closed; pending requests fail with it."""


class UnsupportedApi(Exception):
    """The broker serves no version of an API that this client can speak."""


class BrokerConnection:
    """A connection to ``host:port`` with ApiVersions-negotiated versions."""

    def __init__(
        self,
        host: str,
        port: int,
        client_id: str,
        request_timeout_ms: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
        sasl: SaslCredentials | None = None,
        receive_buffer_bytes: int = -1,
    ) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.request_timeout = request_timeout_ms / 1000.0
        self.ssl_context = ssl_context
        self.sasl = sasl
        self.receive_buffer_bytes = receive_buffer_bytes
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: dict[int, tuple[asyncio.Future[Any], int, int]] = {}
        self._ids = itertools.count(1)
        self._read_task: asyncio.Task[None] | None = None
        self.versions: dict[int, range] = {}
        self.closed = False
        self.last_used = 0.0

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet answered."""
        return len(self._pending)

    async def connect(self, timeout: float) -> None:
        """Open the socket (TLS with an ``ssl_context``), negotiate API versions, then
        authenticate with ``sasl``. SslAuthenticationError when the TLS handshake fails;
        SaslAuthenticationError when the broker refuses the SASL mechanism or credentials."""
        server_hostname = self.host if self.ssl_context is not None else None
        try:
            opening = self._open(server_hostname)
            self._reader, self._writer = await asyncio.wait_for(opening, timeout)
        except ssl.SSLError as exc:
            failure = tls_failure(self.address, exc)
            if failure is None:
                raise
            raise failure from exc
        self.last_used = asyncio.get_running_loop().time()
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop())
        await self._negotiate()
        if self.sasl is not None:
            await authenticate(self, self.sasl)

    async def _open(
        self, server_hostname: str | None
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """The stream of a new connection: asyncio's own connect, or with
        ``receive_buffer_bytes`` a socket of ours that has SO_RCVBUF before it connects."""
        if self.receive_buffer_bytes <= 0:
            return await asyncio.open_connection(
                self.host, self.port, ssl=self.ssl_context, server_hostname=server_hostname
            )
        return await asyncio.open_connection(
            ssl=self.ssl_context, server_hostname=server_hostname, sock=await self._socket()
        )

    async def _socket(self) -> socket.socket:
        """A TCP socket connected to ``host:port`` (each resolved address in turn), with
        SO_RCVBUF set before the connect, so TCP window scaling sees it."""
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        failure: OSError | None = None
        for family, kind, proto, _, address in infos:
            sock = socket.socket(family, kind, proto)
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer_bytes)
                await loop.sock_connect(sock, address)
                return sock
            except OSError as exc:
                sock.close()
                failure = exc
            except BaseException:
                sock.close()
                raise
        assert failure is not None  # getaddrinfo answers at least one address or raises
        raise failure

    async def _negotiate(self) -> None:
        """ApiVersions v3; a broker that does not know v3 answers v0 with error 35."""
        request = api.make(
            api.request_class(ApiKey.API_VERSIONS, 3),
            client_software_name="kplane",
            client_software_version="0.1",
        )
        response = await self._send(ApiKey.API_VERSIONS, 3, request)
        if response.error_code == ErrorCode.unsupported_version:
            response = await self._send(
                ApiKey.API_VERSIONS, 0, api.make(api.request_class(ApiKey.API_VERSIONS, 0))
            )
        if response.error_code != ErrorCode.none:
            raise BrokerConnectionError(
                f"ApiVersions failed on {self.address}: {response.error_code.name}"
            )
        self.versions = {
            int(k.api_key): range(int(k.min_version), int(k.max_version) + 1)
            for k in response.api_keys
        }

    def version_for(self, api_key: int, max_version: int | None = None) -> int:
        """The highest version both sides speak (and at most ``max_version``: a client API
        whose newer versions are another caller's, as AddPartitionsToTxn v4+ is the
        brokers')."""
        ours = api.kio_versions(api_key)
        theirs = self.versions.get(api_key)
        if theirs is None or not ours:
            raise UnsupportedApi(f"{self.address} does not serve {api.API_NAMES.get(api_key)}")
        version = min(ours.stop, theirs.stop) - 1
        if max_version is not None:
            version = min(version, max_version)
        if version < max(ours.start, theirs.start):
            raise UnsupportedApi(
                f"no common version of {api.API_NAMES.get(api_key)} with {self.address}"
            )
        return version

    async def request(
        self,
        api_key: int,
        build: Callable[[int], Any],
        extra_timeout_ms: int = 0,
        max_version: int | None = None,
    ) -> Any:
        """Send ``build(version)`` at the negotiated version (at most ``max_version``);
        await its response."""
        version = self.version_for(api_key, max_version)
        return await self._send(api_key, version, build(version), extra_timeout_ms)

    def send_no_response(self, api_key: int, build: Callable[[int], Any]) -> None:
        """Send a request that gets no answer (Produce with acks=0)."""
        version = self.version_for(api_key)
        self._write(api_key, version, next(self._ids), build(version))

    def _write(self, api_key: int, version: int, correlation_id: int, request: Any) -> None:
        if self.closed or self._writer is None:
            raise BrokerConnectionError(f"connection to {self.address} is closed")
        frame = encode_request_frame(
            api_key, version, correlation_id, self.client_id, api.encode(request)
        )
        self._writer.write(frame)
        self.last_used = asyncio.get_running_loop().time()

    async def _send(
        self, api_key: int, version: int, request: Any, extra_timeout_ms: int = 0
    ) -> Any:
        correlation_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = (future, api_key, version)
        try:
            self._write(api_key, version, correlation_id, request)
            timeout = self.request_timeout + extra_timeout_ms / 1000.0
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        except TimeoutError:
            self.close(BrokerConnectionError(f"request to {self.address} timed out"))
            raise
        finally:
            self._pending.pop(correlation_id, None)

    async def _read_loop(self) -> None:
        assert self._reader is not None
        try:
            while True:
                (size,) = _SIZE.unpack(await self._reader.readexactly(4))
                frame = await self._reader.readexactly(size)
                (correlation_id,) = _CORRELATION.unpack_from(frame, 0)
                entry = self._pending.get(correlation_id)
                if entry is None:
                    continue
                future, api_key, version = entry
                try:
                    response = api.decode_response(
                        api_key, version, frame, response_body_offset(api_key, version)
                    )
                except Exception as exc:
                    if not future.done():
                        future.set_exception(exc)
                    continue
                if not future.done():
                    future.set_result(response)
        except (asyncio.IncompleteReadError, OSError) as exc:
            self.close(self._lost(exc))
        except asyncio.CancelledError:
            pass

    def _lost(self, exc: Exception) -> Exception:
        """What a failed read fails the pending requests with. Before ApiVersions is
        answered a TLS alert is the handshake failing (TLS 1.3 reports a refused client
        certificate on the first read)."""
        if isinstance(exc, ssl.SSLError) and not self.versions:
            failure = tls_failure(self.address, exc)
            if failure is not None:
                return failure
        return BrokerConnectionError(f"connection to {self.address} lost: {exc!r}")

    def close(self, error: Exception | None = None) -> None:
        """Close; every pending request fails with ``error``."""
        if self.closed:
            return
        self.closed = True
        failure = error or BrokerConnectionError(f"connection to {self.address} closed")
        for future, _, _ in list(self._pending.values()):
            if not future.done():
                future.set_exception(failure)
        self._pending.clear()
        if self._writer is not None:
            self._writer.close()
        if self._read_task is not None and self._read_task is not asyncio.current_task():
            self._read_task.cancel()
