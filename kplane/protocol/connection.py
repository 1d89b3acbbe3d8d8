"""The broker's side of one Kafka connection as a state machine, sans-IO (h11's shape).

Bytes go in with ``receive_data`` (``b""`` for the peer's end of stream), or are read
where ``get_buffer`` says and announced with ``buffer_updated``; events come out of
``next_event``. It owns what Kafka's KafkaChannel and Selector do for a connection:
framing under ``socket.request.max.bytes`` (``sasl.server.max.receive.size`` before SASL
authentication) with a memory pool asked for each frame's bytes as they arrive, the request
header, the known-API check and the SASL gate, muting (one request in flight, pipelined
frames held until its response is sent), write back-pressure and the peer's half-close. A
frame size it refuses closes the connection after the requests before it are answered. The
caller owns sockets, threads, clocks and the pool's waiting.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Collection, Mapping
from typing import Final

from kplane.protocol.framing import (
    FrameDecoder,
    FrameTooLarge,
    InvalidRequestHeader,
    RequestHeader,
    parse_request_header,
)


class RequestReady:
    """A request to hand to a handler; the next comes after ``response_sent``."""

    __slots__ = ("frame", "header")

    def __init__(self, header: RequestHeader, frame: bytes) -> None:
        self.header = header
        self.frame = frame  # without its size prefix; the pool holds ``len(frame)`` for it


class Close:
    """The client broke the protocol: close the connection. ``reason`` completes
    "closing connection: ..."; ``details`` are the facts to log with it."""

    __slots__ = ("details", "reason")

    def __init__(self, reason: str, **details: object) -> None:
        self.reason = reason
        self.details: Mapping[str, object] = details


class ConnectionClosed:
    """The client closed its side and every request it sent has been answered."""

    __slots__ = ()


class Wait(enum.Enum):
    """No event for now: ``NEED_DATA`` until more bytes arrive, ``PAUSED`` until a
    response is sent or writing resumes."""

    NEED_DATA = "NEED_DATA"
    PAUSED = "PAUSED"


NEED_DATA: Final = Wait.NEED_DATA
PAUSED: Final = Wait.PAUSED
CONNECTION_CLOSED: Final = ConnectionClosed()

Event = RequestReady | Close | ConnectionClosed | Wait


class ServerConnection:
    """One client connection: bytes in, requests out, one request in flight at a time.

    ``allocate`` asks the memory pool for a frame's bytes as they arrive, and
    ``frame_complete`` says when the frame being received ends (``FrameDecoder``); a
    refusal sets ``awaiting_memory`` until ``retry_frame``. With ``pre_auth_apis`` the
    connection starts unauthenticated: only those APIs pass, in frames of at most
    ``pre_auth_max_size`` bytes, until the caller sets ``authenticated``.
    """

    __slots__ = (
        "_authenticated",
        "_closed",
        "_decoder",
        "_framing_error",
        "_in_flight",
        "_is_known_api",
        "_max_request_size",
        "_peer_closed",
        "_pending",
        "_pre_auth_apis",
        "_pre_auth_max_size",
        "_writing_paused",
    )

    def __init__(
        self,
        max_request_size: int,
        is_known_api: Callable[[int], bool],
        *,
        allocate: Callable[[int], bool] | None = None,
        frame_complete: Callable[[], None] | None = None,
        pre_auth_apis: Collection[int] | None = None,
        pre_auth_max_size: int = 524288,
    ) -> None:
        self._max_request_size = max_request_size
        self._pre_auth_max_size = pre_auth_max_size
        self._is_known_api = is_known_api
        self._pre_auth_apis = frozenset(pre_auth_apis or ())
        self._authenticated = pre_auth_apis is None
        self._decoder = FrameDecoder(
            max_request_size if self._authenticated else pre_auth_max_size,
            allocate,
            frame_complete,
        )
        self._pending: deque[bytes] = deque()  # complete frames not yet handed out
        self._in_flight = False
        self._writing_paused = False
        self._peer_closed = False
        self._closed: Close | ConnectionClosed | None = None
        self._framing_error: Close | None = None  # comes once the frames before it are done

    @property
    def authenticated(self) -> bool:
        """Whether SASL authentication succeeded (always, without a SASL gate)."""
        return self._authenticated

    @authenticated.setter
    def authenticated(self, value: bool) -> None:
        self._authenticated = value
        self._decoder.max_size = self._max_request_size if value else self._pre_auth_max_size

    def receive_data(self, data: bytes) -> None:
        """Bytes received from the client; ``b""`` when it closed its side."""
        if not data:
            self._peer_closed = True
        elif self._reading:
            try:
                self._decoder.feed_into(data, self._pending)
            except FrameTooLarge as exc:
                self._too_large(exc)

    def get_buffer(self, stage: memoryview) -> memoryview:
        """Where the next read should go: ``stage``, a buffer the caller lends, or a large
        frame's own bytes (``FrameDecoder.get_buffer``)."""
        return self._decoder.get_buffer(stage) if self._reading else stage

    def buffer_updated(self, stage: memoryview, size: int) -> None:
        """``size`` bytes were read into the buffer ``get_buffer`` gave."""
        if self._reading:
            try:
                self._decoder.buffer_updated(stage, size, self._pending)
            except FrameTooLarge as exc:
                self._too_large(exc)

    def retry_frame(self) -> None:
        """Memory was released: ask the pool again for the frame it refused."""
        if self._closed is None and self._framing_error is None and self._decoder.blocked:
            try:
                self._decoder.resume_into(self._pending)
            except FrameTooLarge as exc:
                self._too_large(exc)

    @property
    def _reading(self) -> bool:
        """Received bytes still go to the decoder."""
        return self._closed is None and self._framing_error is None and not self._peer_closed

    def _too_large(self, exc: FrameTooLarge) -> None:
        """A size over the limit: the close that follows the frames before it."""
        reason = "request frame too large"
        if not self._authenticated:
            reason += " before SASL authentication"
        self._framing_error = Close(reason, size=exc.size, limit=exc.limit)

    def next_event(self) -> Event:
        """The next thing the caller must act on, or a ``Wait`` saying why there is none.
        After a ``Close`` or ``ConnectionClosed`` that event comes again."""
        if self._closed is not None:
            return self._closed
        if self._in_flight:
            return PAUSED
        if not self._pending:
            if self._framing_error is not None:
                return self._close(self._framing_error)
            if self._peer_closed:
                self._closed = CONNECTION_CLOSED
                return CONNECTION_CLOSED
            return NEED_DATA
        if self._writing_paused:
            return PAUSED
        frame = self._pending[0]
        try:
            header = parse_request_header(frame)
        except InvalidRequestHeader as exc:
            return self._close(Close("invalid request header", error=str(exc)))
        if not self._is_known_api(header.api_key):
            return self._close(
                Close(
                    "unknown or unsupported api key",
                    api_key=header.api_key,
                    api_version=header.api_version,
                    client_id=header.client_id,
                )
            )
        if not self._authenticated and header.api_key not in self._pre_auth_apis:
            return self._close(Close("request before SASL authentication", api_key=header.api_key))
        self._pending.popleft()
        self._in_flight = True
        return RequestReady(header, frame)

    def _close(self, event: Close) -> Close:
        self._closed = event  # the refused frame stays pending: ``drop_unread`` counts it
        return event

    def response_sent(self) -> None:
        """The in-flight request's response was written (or there was none to write)."""
        self._in_flight = False

    def pause_writing(self) -> None:
        """The client is slow to read its responses: hand out no new request."""
        self._writing_paused = True

    def resume_writing(self) -> None:
        """The client read its responses down: requests may go on."""
        self._writing_paused = False

    @property
    def writing_paused(self) -> bool:
        """Whether the client is behind reading its responses."""
        return self._writing_paused

    @property
    def idle(self) -> bool:
        """No request in flight and none waiting (nor a close after them)."""
        return not self._in_flight and not self._pending and self._framing_error is None

    @property
    def awaiting_memory(self) -> bool:
        """The pool refused the next frame; ``retry_frame`` once memory is released."""
        return self._decoder.blocked

    @property
    def wants_reading_paused(self) -> bool:
        """Stop reading the socket: complete frames wait (a pipelining client is held
        back), the pool has no room for more, or a bad frame size ends what is read."""
        return bool(self._pending) or self._decoder.blocked or self._framing_error is not None

    @property
    def unfinished_frame(self) -> int | None:
        """Which frame (counted from 0) has partly arrived, or None: the caller's clock
        for a frame that takes too long starts when this number first shows."""
        return self._decoder.frames if self._decoder.receiving else None

    @property
    def frame_progress(self) -> tuple[int, int | None]:
        """Bytes of the unfinished frame received so far, and its size once known."""
        decoder = self._decoder
        size = decoder.frame_size
        received = decoder.buffered if size is None else min(decoder.buffered, size)
        return received, size

    def drop_unread(self) -> int:
        """Forget the frames not handed out and the one being received; return the bytes
        the pool had given them."""
        size = sum(map(len, self._pending)) + self._decoder.abandon()
        self._pending.clear()
        return size
