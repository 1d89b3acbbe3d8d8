"""Fetch responses written around stored batches, so record bytes are never copied.

kio encodes every field; only the variable parts are spliced: each level is encoded with
an empty child array (or empty records), and its children are written where that empty
marker stood. The result is a list of pieces for ``transport.writelines``.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence, Sized
from typing import Any, TypeVar

from kplane.protocol import api

Piece = bytes | memoryview
P = TypeVar("P", bound=Sized)
"""A stored slice of batches: bytes, or whatever the broker sends in their place."""

_INT32 = struct.Struct(">i")
_FLEX_EMPTY_TAIL = b"\x01\x00"  # empty compact array/bytes, then no tagged fields
_LEGACY_EMPTY_TAIL = b"\x00\x00\x00\x00"  # empty legacy array/bytes, always last


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _length(count: int, flexible: bool) -> bytes:
    return _uvarint(count + 1) if flexible else _INT32.pack(count)


def _open(entity: Any, flexible: bool) -> tuple[bytes, bytes]:
    """Encode ``entity`` (its last field empty) and split it at that empty field."""
    encoded = api.encode(entity)
    tail = _FLEX_EMPTY_TAIL if flexible else _LEGACY_EMPTY_TAIL
    if not encoded.endswith(tail):
        raise ValueError(f"{type(entity).__name__} does not end with an empty last field")
    return encoded[: -len(tail)], tail[1:] if flexible else b""


def encode_fetch_response(
    response: Any, topics: Sequence[tuple[Any, Sequence[tuple[Any, Sequence[P]]]]]
) -> list[bytes | P]:
    """Pieces of a Fetch response body.

    ``response`` is the FetchResponse with ``responses=()``; each topic entity has
    ``partitions=()`` and each partition entity ``records=b""``, paired with the stored
    batch slices that become its records.
    """
    flexible = bool(response.__flexible__)
    head, tail = _open(response, flexible)
    pieces: list[bytes | P] = [head, _length(len(topics), flexible)]
    for topic, partitions in topics:
        topic_head, topic_tail = _open(topic, flexible)
        pieces += [topic_head, _length(len(partitions), flexible)]
        for partition, batches in partitions:
            part_head, part_tail = _open(partition, flexible)
            pieces += [part_head, _length(sum(len(b) for b in batches), flexible), *batches]
            if part_tail:
                pieces.append(part_tail)
        if topic_tail:
            pieces.append(topic_tail)
    if tail:
        pieces.append(tail)
    return pieces
