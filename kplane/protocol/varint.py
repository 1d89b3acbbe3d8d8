"""Reading Kafka's base-128 varints, the one reader under every walk of a record's fields.

A varint is little-endian groups of 7 bits, the high bit of each byte set while more
follow; a record's signed fields zigzag the value (``(raw >> 1) ^ -(raw & 1)``).
:mod:`protocol.record_walk` (Produce validation) reads one-byte varints inline and calls
:func:`read_unsigned_varint` for longer ones; the walk under the decoder and the key walk
of :mod:`protocol.records` calls it for every varint.
"""

from __future__ import annotations

__all__ = ("VarintError", "read_unsigned_varint")


class VarintError(ValueError):
    """A varint longer than its type allows, or out of its range."""


def read_unsigned_varint(data: bytes | memoryview, pos: int, bits: int) -> tuple[int, int]:
    """The unsigned varint of at most ``bits`` bits (32 for an int32 field, 64 for an
    int64) at ``pos``: (raw value, next position). :class:`VarintError` when it is longer
    than such a varint or out of that range; IndexError when it runs off ``data``."""
    byte = data[pos]
    if byte < 0x80:
        return byte, pos + 1
    second = data[pos + 1]
    if second < 0x80:  # two bytes: a record's length, an offset delta from 64 on
        return byte & 0x7F | second << 7, pos + 2
    raw = byte & 0x7F | (second & 0x7F) << 7
    shift = 14
    pos += 2
    while shift < bits:
        byte = data[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            if raw >> bits:
                raise VarintError(f"varint out of int{bits} range")
            return raw, pos
        shift += 7
    raise VarintError(f"varint longer than {(bits + 6) // 7} bytes")
