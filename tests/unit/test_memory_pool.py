"""queued.max.request.bytes: the pool, and a frame decoder that asks it for each frame."""

from __future__ import annotations

import struct

from kplane.broker.network.memory_pool import MemoryPool
from kplane.protocol.framing import FrameDecoder


def _frame(size: int) -> bytes:
    return struct.pack(">i", size) + b"x" * size


def test_allocation_succeeds_while_any_room_is_left() -> None:
    pool = MemoryPool(100)
    assert pool.try_allocate(150)  # one oversized frame still gets in, alone
    assert pool.available == -50
    assert not pool.try_allocate(1)
    pool.release(150)
    assert pool.available == 100


def test_waiters_are_woken_once_on_release() -> None:
    pool = MemoryPool(10)
    assert pool.try_allocate(10)
    woken: list[int] = []
    pool.wait(lambda: woken.append(1))
    assert woken == []
    pool.release(10)
    pool.release(0)
    assert woken == [1]
    pool.wait(lambda: woken.append(2))  # room already: at once
    assert woken == [1, 2]


def test_decoder_blocks_on_a_refused_frame_and_resumes() -> None:
    pool = MemoryPool(10)
    decoder = FrameDecoder(1000, pool.try_allocate)
    assert decoder.feed(_frame(8) + _frame(8) + _frame(3)[:5]) == [b"x" * 8, b"x" * 8]
    assert decoder.blocked and decoder.reserved == 0  # the third frame found no room
    assert decoder.feed(_frame(3)[5:]) == []
    pool.release(16)
    assert decoder.resume() == [b"xxx"]
    assert not decoder.blocked and pool.available == 7


def test_decoder_reserves_a_partial_frame_as_its_bytes_arrive() -> None:
    """A frame counts against the pool by what has arrived, not by what its size prefix
    announces: a slow sender holds only the bytes it sent."""
    pool = MemoryPool(100)
    decoder = FrameDecoder(1000, pool.try_allocate)
    assert decoder.feed(_frame(40)[:10]) == []
    assert decoder.reserved == 6 and pool.available == 94
