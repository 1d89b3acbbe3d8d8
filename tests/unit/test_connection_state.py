"""ServerConnection, the sans-IO connection state machine: bytes in, events out, no sockets."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from kplane.protocol.connection import (
    CONNECTION_CLOSED,
    NEED_DATA,
    PAUSED,
    Close,
    Event,
    RequestReady,
    ServerConnection,
)
from kplane.protocol.framing import encode_request_frame

KNOWN = frozenset({0, 3, 17, 18, 36})
SASL = frozenset({17, 18, 36})
API = st.sampled_from([(0, 9), (3, 12), (18, 3), (3, 0)])  # header v2, v2, v2, v1


def frame(correlation_id: int, api_key: int = 18, version: int = 3, body: bytes = b"") -> bytes:
    return encode_request_frame(api_key, version, correlation_id, "t", body)


class Pool:
    """A memory pool as the broker's: allocation succeeds while any room is left."""

    def __init__(self, size: int) -> None:
        self.available = size

    def allocate(self, size: int) -> bool:
        if self.available <= 0:
            return False
        self.available -= size
        return True


def connection(
    max_size: int = 1 << 20,
    pool: Pool | None = None,
    pre_auth_apis: frozenset[int] | None = None,
    pre_auth_max_size: int = 1000,
) -> ServerConnection:
    return ServerConnection(
        max_size,
        KNOWN.__contains__,
        allocate=pool.allocate if pool else None,
        pre_auth_apis=pre_auth_apis,
        pre_auth_max_size=pre_auth_max_size,
    )


def correlation_id(event: Event) -> int:
    assert isinstance(event, RequestReady), event
    return event.header.correlation_id


@given(
    st.lists(st.tuples(API, st.binary(max_size=300)), min_size=1, max_size=30),
    st.data(),
)
def test_any_chunking_yields_the_requests_in_order_one_at_a_time(
    requests: list[tuple[tuple[int, int], bytes]], data: st.DataObject
) -> None:
    stream = b"".join(frame(i, *api, body) for i, (api, body) in enumerate(requests))
    cuts = sorted(data.draw(st.sets(st.integers(1, len(stream) - 1), max_size=40)))
    pool = Pool(1 << 30)
    conn = connection(pool=pool)
    got: list[int] = []
    handed_out = 0
    in_flight: RequestReady | None = None
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        conn.receive_data(stream[start:end])
        while True:
            event = conn.next_event()
            if isinstance(event, RequestReady):
                assert in_flight is None  # never two requests in flight
                in_flight = event
                got.append(correlation_id(event))
                handed_out += len(event.frame)
                assert event.frame.startswith(struct.pack(">hh", *requests[got[-1]][0]))
            elif in_flight is not None and data.draw(st.booleans()):  # answer now or later
                assert event is PAUSED
                in_flight = None
                conn.response_sent()
            else:
                assert event is (PAUSED if in_flight else NEED_DATA)
                break
        if in_flight is None:  # every complete frame handed out: keep reading
            assert conn.idle and not conn.wants_reading_paused
    while in_flight is not None:
        conn.response_sent()
        event = conn.next_event()
        in_flight = event if isinstance(event, RequestReady) else None
        if in_flight is not None:
            got.append(correlation_id(in_flight))
            handed_out += len(in_flight.frame)
    assert got == list(range(len(requests)))
    assert conn.next_event() is NEED_DATA and not conn.wants_reading_paused
    assert (1 << 30) - pool.available == handed_out  # every frame's bytes reserved once
    assert conn.drop_unread() == 0


@given(st.integers(1, 5), st.integers(0, 4))
def test_end_of_stream_answers_what_was_sent_then_closes(sent: int, partial: int) -> None:
    pool = Pool(1 << 20)
    conn = connection(pool=pool)
    last = frame(sent)
    conn.receive_data(b"".join(frame(i) for i in range(sent)) + last[: 4 + partial])
    conn.receive_data(b"")
    conn.receive_data(b"late")  # nothing counts after the end of stream
    for i in range(sent):
        assert correlation_id(conn.next_event()) == i
        assert conn.next_event() is PAUSED
        conn.response_sent()
    assert conn.next_event() is CONNECTION_CLOSED
    assert conn.next_event() is CONNECTION_CLOSED
    assert conn.drop_unread() == partial  # the frame being received: the bytes that came


def test_end_of_stream_when_idle_closes_at_once() -> None:
    conn = connection()
    assert conn.idle
    conn.receive_data(b"")
    assert conn.next_event() is CONNECTION_CLOSED


@given(st.integers(0, 3), st.integers(1, 100))
def test_a_frame_over_the_limit_closes_once_its_predecessors_are_answered(
    before: int, over: int
) -> None:
    pool = Pool(1 << 20)
    conn = connection(max_size=100, pool=pool)
    frames = b"".join(frame(i) for i in range(before))
    conn.receive_data(frames + struct.pack(">i", 100 + over) + b"\x00" * 8)
    for i in range(before):  # the requests before the bad size are answered first
        assert correlation_id(conn.next_event()) == i
        conn.response_sent()
    event = conn.next_event()
    assert isinstance(event, Close)
    assert event.reason == "request frame too large"
    assert event.details == {"size": 100 + over, "limit": 100}
    assert conn.next_event() is event
    assert conn.drop_unread() == 0  # nothing left unread: no frame after the bad size


def test_a_negative_frame_size_closes() -> None:
    conn = connection()
    conn.receive_data(struct.pack(">i", -5))
    event = conn.next_event()
    assert isinstance(event, Close) and event.details == {"size": -5, "limit": 1 << 20}


def test_an_unknown_api_closes_after_the_requests_before_it() -> None:
    conn = connection()
    conn.receive_data(frame(1) + frame(2, api_key=9999, version=0))
    assert correlation_id(conn.next_event()) == 1
    conn.response_sent()
    event = conn.next_event()
    assert isinstance(event, Close)
    assert event.reason == "unknown or unsupported api key"
    assert event.details == {"api_key": 9999, "api_version": 0, "client_id": "t"}
    assert conn.drop_unread() == len(frame(2, api_key=9999, version=0)) - 4


def test_an_invalid_header_closes() -> None:
    conn = connection()
    conn.receive_data(struct.pack(">i", 3) + b"\x00\x03\x00")
    event = conn.next_event()
    assert isinstance(event, Close) and event.reason == "invalid request header"
    assert event.details == {"error": "frame shorter than a request header"}


@given(st.sampled_from(sorted(KNOWN - SASL)))
def test_before_sasl_authentication_only_the_sasl_apis_pass(api_key: int) -> None:
    conn = connection(pre_auth_apis=SASL)
    assert not conn.authenticated
    conn.receive_data(frame(1, 18) + frame(2, 17, 1) + frame(3, 36, 2) + frame(4, api_key, 9))
    for expected in (1, 2, 3):
        assert correlation_id(conn.next_event()) == expected
        conn.response_sent()
    event = conn.next_event()
    assert isinstance(event, Close)
    assert event.reason == "request before SASL authentication"
    assert event.details == {"api_key": api_key}


def test_after_sasl_authentication_every_known_api_passes() -> None:
    conn = connection(pre_auth_apis=SASL)
    conn.receive_data(frame(1, 36, 2) + frame(2, 3, 12))
    assert correlation_id(conn.next_event()) == 1
    conn.authenticated = True  # the SaslAuthenticate request succeeded
    conn.response_sent()
    assert correlation_id(conn.next_event()) == 2


@given(st.integers(1, 500))
def test_frames_are_bounded_by_the_pre_auth_size_until_authenticated(over: int) -> None:
    conn = connection(pre_auth_apis=SASL)
    conn.receive_data(struct.pack(">i", 1000 + over))
    event = conn.next_event()
    assert isinstance(event, Close)
    assert event.reason == "request frame too large before SASL authentication"
    assert event.details == {"size": 1000 + over, "limit": 1000}
    conn = connection(pre_auth_apis=SASL)
    conn.authenticated = True
    conn.receive_data(frame(1, 3, 12, b"\x00" * (1000 + over)))
    assert correlation_id(conn.next_event()) == 1


def test_paused_writing_holds_the_next_request() -> None:
    conn = connection()
    conn.receive_data(frame(1) + frame(2))
    assert correlation_id(conn.next_event()) == 1
    conn.pause_writing()
    conn.response_sent()
    assert conn.next_event() is PAUSED
    assert conn.wants_reading_paused  # frame 2 waits: a pipelining client is held back
    conn.resume_writing()
    assert correlation_id(conn.next_event()) == 2
    conn.receive_data(b"")
    conn.pause_writing()
    conn.response_sent()
    assert conn.next_event() is CONNECTION_CLOSED  # nothing left to hold back


@given(st.integers(1, 4), st.integers(0, 3))
def test_a_frame_the_pool_refuses_waits_until_memory_is_released(before: int, extra: int) -> None:
    frames = [frame(i) for i in range(before + 1 + extra)]
    size = len(frames[0]) - 4
    pool = Pool(before * size)
    conn = connection(pool=pool)
    conn.receive_data(b"".join(frames))
    assert conn.awaiting_memory and conn.wants_reading_paused
    for i in range(before):
        assert correlation_id(conn.next_event()) == i
        conn.response_sent()
    assert conn.next_event() is NEED_DATA
    assert conn.wants_reading_paused  # reading stays paused while the pool has no room
    conn.retry_frame()
    assert conn.awaiting_memory  # still no room
    pool.available = 1 << 20  # the handlers answered: memory released
    conn.retry_frame()
    assert not conn.awaiting_memory
    for i in range(before, len(frames)):
        assert correlation_id(conn.next_event()) == i
        conn.response_sent()
    assert not conn.wants_reading_paused


def test_a_refused_frame_then_an_oversized_one_closes_on_retry() -> None:
    pool = Pool(0)
    conn = connection(max_size=100, pool=pool)
    conn.receive_data(frame(1) + struct.pack(">i", 101))
    assert conn.awaiting_memory and conn.next_event() is NEED_DATA
    pool.available = 1000
    conn.retry_frame()
    assert correlation_id(conn.next_event()) == 1  # the complete frame is answered first
    conn.response_sent()
    event = conn.next_event()
    assert isinstance(event, Close) and event.reason == "request frame too large"
    assert conn.drop_unread() == 0
