"""A produced batch's bytes on their way from the socket to the log: a frame split across
reads is joined once (no buffer grown while it arrives, no second copy when it ends), or,
large, read into its own bytes (no copy at all), and handed out as ``bytes`` that later
reads leave alone; a Produce request's records are a
view of that frame, and say where in it they start (validation walks them there); the
memory log keeps the view when it is most of its frame."""

from __future__ import annotations

import datetime
import struct
import tracemalloc

from kplane.broker.log.log import MemoryLog
from kplane.protocol import api
from kplane.protocol.framing import DIRECT_READ_MIN, FrameDecoder
from kplane.protocol.produce_codec import decode_produce_request
from kplane.protocol.records import Record, build_batch, number_batches, scan_batches

PRODUCE = 0
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


def test_a_frame_dribbled_in_tiny_reads_costs_its_bytes_not_an_object_a_read() -> None:
    frame = b"x" * 65536
    stream = _stream(frame)
    decoder = FrameDecoder(MIB)
    got: list[bytes] = []
    tracemalloc.start()
    try:
        for i in range(len(stream)):
            got += decoder.feed(stream[i : i + 1])
        _size, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got == [frame]
    assert peak < 4 * len(frame)  # a view kept for each read would be ~200 bytes a byte


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


def test_a_large_frame_is_read_into_its_own_bytes() -> None:
    frame = bytes(range(256)) * (MIB // 256)
    stream = _stream(frame, b"next")
    stage = memoryview(bytearray(65536))
    decoder = FrameDecoder(2 * MIB)
    got: list[bytes] = []
    tracemalloc.start()
    try:
        pos = 0
        while pos < len(stream):
            buffer = decoder.get_buffer(stage)
            if pos:  # once the size is known the rest of the frame goes straight in
                assert buffer is not stage and len(buffer) == len(frame) + 4 - pos
            size = min(len(buffer), len(stream) - pos, 65536)
            buffer[:size] = stream[pos : pos + size]
            decoder.buffer_updated(stage, size, got)
            pos += size
            if got:
                break
        _size, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got == [frame] and type(got[0]) is bytes
    assert peak < MIB + 2 * 65536  # the frame, and the first read's bytes before its size
    # a small frame goes through the lent buffer, whose later reads leave it alone
    assert decoder.get_buffer(stage) is stage
    stage[:8] = stream[pos : pos + 8]
    decoder.buffer_updated(stage, 8, got)
    stage[:8] = b"\xff" * 8
    assert got == [frame, b"next"]


def test_a_frame_with_little_left_to_come_is_not_read_in_place() -> None:
    stage = memoryview(bytearray(65536))
    decoder = FrameDecoder(2 * MIB)
    stage[:4] = struct.pack(">i", DIRECT_READ_MIN + 10)
    decoder.buffer_updated(stage, 4 + 11, [])  # the prefix and 11 bytes: DIRECT_READ_MIN - 1 left
    assert decoder.get_buffer(stage) is stage


def _produce_frame(*batches: bytes) -> bytes:
    module = api.request_module(PRODUCE, 9)
    partitions = tuple(
        api.make(module.PartitionProduceData, index=i, records=b) for i, b in enumerate(batches)
    )
    topic = api.make(module.TopicProduceData, name="t", partition_data=partitions)
    return api.encode(
        api.make(
            api.request_class(PRODUCE, 9),
            transactional_id=None,
            acks=1,
            timeout=datetime.timedelta(seconds=30),
            topic_data=(topic,),
        )
    )


def test_produce_records_are_a_view_of_the_frame() -> None:
    batches = (build_batch([Record(None, b"v" * 1000)]), build_batch([Record(b"k", b"w")]))
    frame = _produce_frame(*batches)
    [topic] = decode_produce_request(9, frame, 0).topic_data
    for partition, batch in zip(topic.partition_data, batches, strict=True):
        records = partition.records
        assert isinstance(records, memoryview) and records.obj is frame
        assert records == batch
        at = partition.records_at
        assert at is not None and frame[at : at + len(batch)] == batch  # where it is in frame
    # From a view, not the frame's bytes: where the records are in ``.obj`` is not known.
    [topic] = decode_produce_request(9, memoryview(frame), 0).topic_data  # type: ignore[arg-type]
    assert all(p.records_at is None for p in topic.partition_data)


def _stored(log: MemoryLog) -> list[memoryview]:
    return [p for p in log.read(0, MIB, True) if isinstance(p, memoryview)]


def test_the_memory_log_keeps_a_view_of_most_of_a_frame_and_copies_a_small_part() -> None:
    big, small = build_batch([Record(None, b"v" * 5000)]), build_batch([Record(None, b"s")])
    frame = _produce_frame(big, small)
    [topic] = decode_produce_request(9, frame, 0).topic_data
    logs = [MemoryLog(), MemoryLog()]
    for log, partition in zip(logs, topic.partition_data, strict=True):
        assert partition.records is not None
        batches = scan_batches(partition.records)
        number_batches(batches, 0, 0)
        log.append(partition.records, batches)
    [kept], [copied] = _stored(logs[0]), _stored(logs[1])
    assert kept.obj is frame and kept == big[16:]
    assert copied.obj is not frame and copied == small[16:]
