"""Kafka's record batch codecs (sans-IO): compress, and decompress within a size bound.

Decompression never produces more than the caller's ``limit``: gzip inflates with a
``max_length``; snappy (raw, or in Kafka's xerial framing) declares each block's size in a
preamble; LZ4 frames and zstd frames are walked block by block first, each block's
decompressed size being bounded by its header (LZ4: the frame's block maximum; zstd: 128 KiB
for a compressed block, the stated size for a raw or RLE one). A decompression bomb is
therefore refused from its headers, before any output is allocated.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from collections.abc import Callable

import cramjam

__all__ = (
    "COMPRESSION_GZIP",
    "COMPRESSION_LZ4",
    "COMPRESSION_NAMES",
    "COMPRESSION_NONE",
    "COMPRESSION_SNAPPY",
    "COMPRESSION_ZSTD",
    "MAX_DECOMPRESSED_BYTES",
    "DecompressedSizeExceeded",
    "DecompressionError",
    "compress",
    "decompress",
)

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4
COMPRESSION_NAMES = {
    COMPRESSION_NONE: "none",
    COMPRESSION_GZIP: "gzip",
    COMPRESSION_SNAPPY: "snappy",
    COMPRESSION_LZ4: "lz4",
    COMPRESSION_ZSTD: "zstd",
}
"""Codec id (the low three bits of a batch's attributes) -> Kafka's name."""

MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024
"""Default bound on the decompressed records of one batch (64 MiB)."""

_U32LE = struct.Struct("<I")
_I32BE = struct.Struct(">i")

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE = 16  # magic, then int32 version and int32 compatible version

_LZ4_MAGIC = 0x184D2204
_LZ4_BLOCK_MAX = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}

_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_SKIPPABLE_MASK, _ZSTD_SKIPPABLE = 0xFFFFFFF0, 0x184D2A50
_ZSTD_BLOCK_MAX = 128 << 10
_ZSTD_FCS_SIZES = (0, 2, 4, 8)
_ZSTD_DICT_ID_SIZES = (0, 1, 2, 4)


class DecompressionError(Exception):
    """The payload is not valid for its codec."""


class DecompressedSizeExceeded(DecompressionError):
    """The payload would decompress to more than the allowed bound."""


def compress(codec: int, data: bytes) -> bytes:
    """``data`` compressed with ``codec`` as Kafka's producers do (snappy: raw blocks)."""
    if codec == COMPRESSION_GZIP:
        return gzip.compress(data, mtime=0)
    if codec == COMPRESSION_SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == COMPRESSION_LZ4:
        compressor = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
        compressor.compress(data)
        return bytes(compressor.finish())
    if codec == COMPRESSION_ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"unknown compression codec id {codec}")


def decompress(codec: int, payload: bytes, limit: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """``payload`` decompressed with ``codec``.

    Raises :class:`DecompressedSizeExceeded` when the result would exceed ``limit`` bytes
    and :class:`DecompressionError` when ``payload`` is not a valid stream of the codec.
    """
    inflate = _DECOMPRESSORS.get(codec)
    if inflate is None:
        raise DecompressionError(f"unknown compression codec id {codec}")
    try:
        return inflate(payload, limit)
    except cramjam.DecompressionError as exc:
        raise DecompressionError(f"invalid {COMPRESSION_NAMES[codec]} data: {exc}") from exc


def _exceeded(size: int, limit: int) -> DecompressedSizeExceeded:
    return DecompressedSizeExceeded(
        f"records decompress to {size} bytes or more, above the bound of {limit}"
    )


def _gunzip(payload: bytes, limit: int) -> bytes:
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(payload, limit + 1)
    except zlib.error as exc:
        raise DecompressionError(f"invalid gzip data: {exc}") from exc
    if len(out) > limit:
        raise _exceeded(len(out), limit)
    if not inflater.eof:
        raise DecompressionError("truncated gzip data")
    if inflater.unused_data:
        raise DecompressionError(f"{len(inflater.unused_data)} bytes after the gzip stream")
    return out


def _raw_snappy_length(block: bytes) -> int:
    return int(cramjam.snappy.decompress_raw_len(block))


def _unsnappy(payload: bytes, limit: int) -> bytes:
    if not payload.startswith(_XERIAL_MAGIC):
        size = _raw_snappy_length(payload)
        if size > limit:
            raise _exceeded(size, limit)
        return bytes(cramjam.snappy.decompress_raw(payload))
    # Kafka's xerial framing: a 16-byte header, then blocks of int32 length + raw snappy.
    blocks: list[bytes] = []
    total = 0
    pos = _XERIAL_HEADER_SIZE
    end = len(payload)
    if end < pos:
        raise DecompressionError("truncated xerial snappy header")
    while pos < end:
        if pos + 4 > end:
            raise DecompressionError("truncated xerial snappy block length")
        (size,) = _I32BE.unpack_from(payload, pos)
        pos += 4
        if size < 0 or pos + size > end:
            raise DecompressionError(f"xerial snappy block of {size} bytes runs past the data")
        block = payload[pos : pos + size]
        pos += size
        total += _raw_snappy_length(block)
        if total > limit:
            raise _exceeded(total, limit)
        blocks.append(block)
    return b"".join(bytes(cramjam.snappy.decompress_raw(block)) for block in blocks)


def _lz4_bound(payload: bytes, limit: int) -> None:
    """Walk one LZ4 frame's blocks; raise when malformed or bounded above ``limit``."""
    end = len(payload)
    if end < 7 or _U32LE.unpack_from(payload, 0)[0] != _LZ4_MAGIC:
        raise DecompressionError("not an LZ4 frame")
    flags, block_descriptor = payload[4], payload[5]
    if flags >> 6 != 1:
        raise DecompressionError(f"unsupported LZ4 frame version {flags >> 6}")
    block_max = _LZ4_BLOCK_MAX.get((block_descriptor >> 4) & 7)
    if block_max is None:
        raise DecompressionError(f"invalid LZ4 block maximum size id {block_descriptor >> 4}")
    pos = 6 + (8 if flags & 0x08 else 0) + (4 if flags & 0x01 else 0) + 1
    block_checksum = 4 if flags & 0x10 else 0
    total = 0
    while True:
        if pos + 4 > end:
            raise DecompressionError("truncated LZ4 frame")
        (size,) = _U32LE.unpack_from(payload, pos)
        pos += 4
        if size == 0:
            break
        stored, size = size >> 31, size & 0x7FFFFFFF
        if size > block_max:
            raise DecompressionError(f"LZ4 block of {size} bytes above its maximum {block_max}")
        total += size if stored else block_max
        if total > limit:
            raise _exceeded(total, limit)
        pos += size + block_checksum
    if flags & 0x04:
        pos += 4
    if pos != end:
        raise DecompressionError("truncated LZ4 frame or bytes after it")


def _unlz4(payload: bytes, limit: int) -> bytes:
    _lz4_bound(payload, limit)
    return bytes(cramjam.lz4.decompress(payload))


def _zstd_bound(payload: bytes, limit: int) -> None:
    """Walk the zstd frames' blocks; raise when malformed or bounded above ``limit``."""
    end = len(payload)
    pos = 0
    total = 0
    while pos < end:
        if pos + 5 > end:
            raise DecompressionError("truncated zstd frame header")
        (magic,) = _U32LE.unpack_from(payload, pos)
        if magic & _ZSTD_SKIPPABLE_MASK == _ZSTD_SKIPPABLE:
            if pos + 8 > end:
                raise DecompressionError("truncated zstd skippable frame")
            pos += 8 + _U32LE.unpack_from(payload, pos + 4)[0]
            continue
        if magic != _ZSTD_MAGIC:
            raise DecompressionError("not a zstd frame")
        descriptor = payload[pos + 4]
        if descriptor & 0x08:
            raise DecompressionError("reserved bit set in a zstd frame header")
        single_segment = descriptor & 0x20
        fcs_size = _ZSTD_FCS_SIZES[descriptor >> 6] or (1 if single_segment else 0)
        pos += 5 + (0 if single_segment else 1) + _ZSTD_DICT_ID_SIZES[descriptor & 3] + fcs_size
        while True:
            if pos + 3 > end:
                raise DecompressionError("truncated zstd block")
            header = payload[pos] | payload[pos + 1] << 8 | payload[pos + 2] << 16
            pos += 3
            kind, size = (header >> 1) & 3, header >> 3
            if kind == 0:  # raw
                total += size
                pos += size
            elif kind == 1:  # RLE: one byte repeated size times
                total += size
                pos += 1
            elif kind == 2:  # compressed
                total += _ZSTD_BLOCK_MAX
                pos += size
            else:
                raise DecompressionError("reserved zstd block type")
            if total > limit:
                raise _exceeded(total, limit)
            if header & 1:
                break
        if descriptor & 0x04:
            pos += 4
    if pos != end:
        raise DecompressionError("truncated zstd frame")


def _unzstd(payload: bytes, limit: int) -> bytes:
    _zstd_bound(payload, limit)
    return bytes(cramjam.zstd.decompress(payload))


_DECOMPRESSORS: dict[int, Callable[[bytes, int], bytes]] = {
    COMPRESSION_GZIP: _gunzip,
    COMPRESSION_SNAPPY: _unsnappy,
    COMPRESSION_LZ4: _unlz4,
    COMPRESSION_ZSTD: _unzstd,
}
