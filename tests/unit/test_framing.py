"""Frames and headers: hypothesis round-trips through the sans-IO codecs."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kplane.protocol import api
from kplane.protocol.framing import (
    DIRECT_READ_MIN,
    FrameDecoder,
    FrameTooLarge,
    InvalidRequestHeader,
    encode_request_frame,
    parse_request_header,
    response_body_offset,
    response_frame_prefix,
)

SERVED = [key for key in api.API_NAMES if len(api.kio_versions(key))]
api_and_version = st.sampled_from(SERVED).flatmap(
    lambda key: st.tuples(st.just(key), st.sampled_from(list(api.kio_versions(key))))
)


@given(
    api_and_version,
    st.integers(min_value=-(2**31), max_value=2**31 - 1),
    st.one_of(st.none(), st.text(max_size=40)),
    st.binary(max_size=200),
)
def test_request_header_round_trip(
    key_version: tuple[int, int], correlation_id: int, client_id: str | None, body: bytes
) -> None:
    key, version = key_version
    frame = encode_request_frame(key, version, correlation_id, client_id, body)
    [payload] = FrameDecoder(len(frame)).feed(frame)
    header = parse_request_header(payload)
    assert (header.api_key, header.api_version, header.correlation_id) == (
        key,
        version,
        correlation_id,
    )
    if api.request_header_version(key, version) >= 1:
        assert header.client_id == client_id
    assert payload[header.body_offset :] == body


@given(st.lists(st.binary(max_size=300), max_size=8), st.integers(min_value=1, max_value=64))
def test_decoder_reassembles_frames_split_anywhere(payloads: list[bytes], chunk: int) -> None:
    stream = b"".join(struct.pack(">i", len(p)) + p for p in payloads)
    decoder = FrameDecoder(1000)
    got: list[bytes] = []
    for i in range(0, len(stream), chunk):
        got += decoder.feed(stream[i : i + chunk])
    assert got == payloads
    assert decoder.buffered == 0


def read_all(decoder: FrameDecoder, stream: bytes, sizes: list[int]) -> list[bytes]:
    """Read ``stream`` into the decoder as a socket would (``get_buffer``, then
    ``buffer_updated``), each read at most the next of ``sizes`` (cycled) bytes."""
    stage = memoryview(bytearray(1 << 16))
    got: list[bytes] = []
    pos = 0
    reads = 0
    while pos < len(stream):
        buffer = decoder.get_buffer(stage)
        size = min(len(buffer), sizes[reads % len(sizes)], len(stream) - pos)
        buffer[:size] = stream[pos : pos + size]
        decoder.buffer_updated(stage, size, got)
        pos += size
        reads += 1
    return got


big_or_small = st.one_of(
    st.binary(max_size=300),
    st.integers(min_value=DIRECT_READ_MIN, max_value=3 * DIRECT_READ_MIN).map(
        lambda n: bytes(range(256)) * (n // 256) + b"t" * (n % 256)
    ),
)


@given(
    st.lists(big_or_small, max_size=6),
    st.lists(st.integers(min_value=1, max_value=70_000), min_size=1, max_size=5),
)
def test_decoder_reads_frames_in_place_split_anywhere(
    payloads: list[bytes], sizes: list[int]
) -> None:
    stream = b"".join(struct.pack(">i", len(p)) + p for p in payloads)
    decoder = FrameDecoder(1 << 20)
    got = read_all(decoder, stream, sizes)
    assert got == payloads
    assert all(type(frame) is bytes for frame in got)
    assert decoder.buffered == 0 and not decoder.receiving


def test_decoder_refuses_frames_over_the_limit_before_the_body_arrives() -> None:
    decoder = FrameDecoder(100)
    with pytest.raises(FrameTooLarge) as info:
        decoder.feed(struct.pack(">i", 101))
    assert (info.value.size, info.value.limit) == (101, 100)
    with pytest.raises(FrameTooLarge):
        FrameDecoder(100).feed(struct.pack(">i", -1))


@given(api_and_version, st.integers(min_value=0, max_value=2**31 - 1), st.integers(0, 10_000))
def test_response_prefix_sizes(
    key_version: tuple[int, int], correlation_id: int, size: int
) -> None:
    key, version = key_version
    prefix = response_frame_prefix(key, version, correlation_id, size)
    (frame_size, got_id) = struct.unpack_from(">ii", prefix)
    assert got_id == correlation_id
    assert frame_size == len(prefix) - 4 + size
    flexible_header = api.response_header_version(key, version) == 1
    assert len(prefix) == (9 if flexible_header else 8)


def test_api_versions_response_header_is_always_v0() -> None:
    assert api.response_header_version(18, 3) == 0
    assert api.request_header_version(18, 3) == 2


@pytest.mark.parametrize("frame", [b"", b"\x00\x03", b"\x00\x03\x00\x0c\x00\x00\x00\x01\x00\x09ab"])
def test_truncated_headers_raise(frame: bytes) -> None:
    with pytest.raises(InvalidRequestHeader):
        parse_request_header(frame)


@given(api_and_version)
def test_every_served_version_has_request_and_response_classes(kv: tuple[int, int]) -> None:
    key, version = kv
    request = api.request_class(key, version)
    response = api.response_class(key, version)
    assert int(request.__api_key__) == key == int(response.__api_key__)
    assert int(request.__version__) == version


def test_the_response_body_follows_its_header() -> None:
    for key, version in ((18, 3), (0, 9), (3, 12)):
        prefix = response_frame_prefix(key, version, 7, 0)
        assert response_body_offset(key, version) == len(prefix) - 4  # minus the size
