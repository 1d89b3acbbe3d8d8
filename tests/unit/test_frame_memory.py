"""Frames in the memory pool as their bytes arrive: unfinished frames hold at most half of
it (a small frame and the oldest frame excepted), and a bad size after complete frames
closes only once they are answered."""

from __future__ import annotations

import struct

from kplane.broker.network.memory_pool import FRAME_ALLOWANCE, FrameMemory, MemoryPool
from kplane.protocol.connection import Close, RequestReady, ServerConnection
from kplane.protocol.framing import DIRECT_READ_MIN, FrameDecoder, encode_request_frame


def _decoder(pool: MemoryPool) -> FrameDecoder:
    memory = FrameMemory(pool)
    return FrameDecoder(1 << 30, memory.allocate, memory.frame_complete)


def _prefix(size: int) -> bytes:
    return struct.pack(">i", size)


def test_a_frame_holds_only_the_bytes_that_arrived() -> None:
    pool = MemoryPool(1000)
    decoder = _decoder(pool)
    assert decoder.feed(_prefix(800) + b"x" * 100) == []
    assert (decoder.reserved, pool.available, pool.unfinished) == (100, 900, 100)
    assert decoder.feed(b"x" * 700) == [b"x" * 800]
    assert (pool.available, pool.unfinished) == (200, 0)  # held until it is answered
    pool.release(800)
    assert pool.available == 1000


def test_unfinished_frames_hold_at_most_half_the_pool() -> None:
    size = 8 * FRAME_ALLOWANCE
    pool = MemoryPool(4 * size)
    oldest, second, third = _decoder(pool), _decoder(pool), _decoder(pool)
    chunk = b"x" * FRAME_ALLOWANCE
    for decoder in (oldest, second, third):
        decoder.feed(_prefix(size) + chunk)
    for _ in range(7):  # every frame sends the rest of itself, a chunk at a time
        for decoder in (oldest, second, third):
            decoder.feed(chunk)
    # the others stopped once half the pool was unfinished; the oldest went on, completed
    assert not oldest.blocked and second.blocked and third.blocked
    assert second.reserved == third.reserved == 5 * FRAME_ALLOWANCE
    assert pool.unfinished == 10 * FRAME_ALLOWANCE
    assert pool.available == 4 * size - size - 10 * FRAME_ALLOWANCE  # room for others
    small = _decoder(pool)
    assert small.feed(_prefix(100) + b"x" * 50) == []  # a small frame arriving in pieces
    assert small.feed(b"x" * 50) == [b"x" * 100]


def test_the_oldest_unfinished_frame_goes_on_alone_past_the_pool() -> None:
    pool = MemoryPool(100)
    big, other = _decoder(pool), _decoder(pool)
    assert big.feed(_prefix(300) + b"x" * 90) == []
    other.feed(_prefix(50) + b"y" * 20)
    assert big.feed(b"x" * 110) == [] and not big.blocked  # the oldest: on past the pool
    assert other.feed(b"y" * 30) == [] and other.blocked  # the pool has no room
    assert big.feed(b"x" * 100) == [b"x" * 300]
    woken: list[int] = []
    FrameMemory(pool).wait(lambda: woken.append(1))
    assert woken == []
    pool.release(300)
    assert woken == [1]
    assert other.resume() == [b"y" * 50]


def test_a_waiting_frame_is_woken_when_another_completes() -> None:
    pool = MemoryPool(4 * FRAME_ALLOWANCE)
    first, second = FrameMemory(pool), FrameMemory(pool)
    decoders = [FrameDecoder(1 << 30, m.allocate, m.frame_complete) for m in (first, second)]
    decoders[0].feed(_prefix(3 * FRAME_ALLOWANCE) + b"x" * FRAME_ALLOWANCE)
    decoders[1].feed(_prefix(3 * FRAME_ALLOWANCE) + b"x" * FRAME_ALLOWANCE)
    decoders[1].feed(b"x" * FRAME_ALLOWANCE)
    assert decoders[1].blocked  # half the pool is unfinished; the first frame is older
    woken: list[int] = []
    second.wait(lambda: woken.append(1))
    assert woken == []
    decoders[0].feed(b"x" * 2 * FRAME_ALLOWANCE)  # the first completes: the share frees
    assert woken == [1]


def test_abandoning_a_frame_gives_its_share_back() -> None:
    pool = MemoryPool(1000)
    decoder = _decoder(pool)
    decoder.feed(_prefix(800) + b"x" * 300)
    assert pool.unfinished == 300
    pool.release(decoder.abandon())
    assert (pool.unfinished, pool.available) == (0, 1000)
    assert decoder.abandon() == 0  # once only


def test_requests_before_a_bad_size_come_first_then_the_close() -> None:
    frames = [encode_request_frame(18, 3, i, "t", b"") for i in range(2)]
    conn = ServerConnection(1000, lambda key: True)
    conn.receive_data(b"".join(frames) + b"\xff\xff\xff\xff" + frames[0])
    assert conn.wants_reading_paused and not conn.idle
    for expected in range(2):
        event = conn.next_event()
        assert isinstance(event, RequestReady) and event.header.correlation_id == expected
        conn.response_sent()
    event = conn.next_event()
    assert isinstance(event, Close) and event.details == {"size": -1, "limit": 1000}
    assert conn.next_event() is event


def test_the_unfinished_frame_and_its_progress() -> None:
    conn = ServerConnection(1000, lambda key: True)
    assert conn.unfinished_frame is None
    conn.receive_data(b"\x00\x00")
    assert conn.unfinished_frame == 0 and conn.frame_progress == (2, None)
    frame = encode_request_frame(18, 3, 1, "t", b"")
    conn.receive_data(frame[2:] + _prefix(500) + b"z" * 10)
    assert conn.unfinished_frame == 1 and conn.frame_progress == (10, 500)


def test_a_frame_read_in_place_counts_its_bytes_as_they_arrive_and_waits_for_room() -> None:
    size = 2 * DIRECT_READ_MIN
    pool = MemoryPool(size)
    stage = memoryview(bytearray(DIRECT_READ_MIN))
    other, decoder = _decoder(pool), _decoder(pool)
    assert other.feed(_prefix(size) + b"o" * size) == [b"o" * size]  # held until answered
    stage[:14] = _prefix(size) + b"x" * 10
    decoder.buffer_updated(stage, 14, [])
    assert decoder.blocked  # the pool is empty: reading stops
    pool.release(size)
    assert decoder.resume() == [] and decoder.reserved == 10
    into = decoder.get_buffer(stage)
    assert into is not stage and len(into) == size - 10
    into[:1000] = b"x" * 1000
    decoder.buffer_updated(stage, 1000, [])
    assert decoder.reserved == 1010 and pool.unfinished == 1010
    out: list[bytes] = []
    into = decoder.get_buffer(stage)
    into[:] = b"x" * len(into)
    decoder.buffer_updated(stage, len(into), out)
    assert out == [b"x" * size] and pool.unfinished == 0 and pool.available == 0


def test_abandoning_a_frame_read_in_place_gives_its_share_back() -> None:
    pool = MemoryPool(1 << 20)
    decoder = _decoder(pool)
    stage = memoryview(bytearray(1024))
    stage[:4] = _prefix(4 * DIRECT_READ_MIN)
    decoder.buffer_updated(stage, 4, [])
    into = decoder.get_buffer(stage)
    into[:500] = b"x" * 500
    decoder.buffer_updated(stage, 500, [])
    assert pool.unfinished == 500
    pool.release(decoder.abandon())
    assert (pool.unfinished, pool.available) == (0, 1 << 20)
    assert decoder.get_buffer(stage) is stage and not decoder.receiving
