"""A produced batch's bytes on their way from the socket to the log: a frame split across
reads is joined once (no buffer grown while it arrives, no second copy when it ends), and
handed out as ``bytes`` that later reads leave alone."""

from __future__ import annotations

import struct
import tracemalloc

from kplane.protocol.framing import FrameDecoder

MIB = 1 << 20


def _stream(*frames: bytes) -> bytes:
    return b"".join(struct.pack(">i", len(f)) + f for f in frames)


def test_a_frame_split_across_reads_is_copied_once() -> None:
    frame = bytes(range(256)) * (MIB // 256)
    stream = _stream(frame)
    reads = [stream[i : i + 65536] for i in range(0, len(stream), 65536)]
    decoder = FrameDecoder(2 * MIB)
    got: list[bytes] = []
    tracemalloc.start()
    try:
        for data in reads:
            got += decoder.feed(data)
        _size, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got == [frame]
    assert peak < 1.1 * MIB  # the frame itself; a buffer grown and then copied is twice that


def test_a_frame_handed_out_does_not_change_when_more_bytes_arrive() -> None:
    first, second, third = b"a" * 3000, b"b" * 2000, b"c" * 50
    stream = _stream(first, second, third)
    decoder = FrameDecoder(10_000)
    # the first frame across two reads, the second within one read, the third cut short
    out = decoder.feed(stream[:1000]) + decoder.feed(stream[1000:5020])
    assert out == [first, second]
    assert all(type(frame) is bytes for frame in out)
    assert decoder.feed(stream[5020:]) == [third]
    assert decoder.feed(_stream(b"z" * 3000, b"y" * 2000)) == [b"z" * 3000, b"y" * 2000]
    assert out == [first, second]
