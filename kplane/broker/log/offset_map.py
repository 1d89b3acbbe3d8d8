"""Log compaction's offset map (Kafka's SkimpyOffsetMap): each key's latest offset.

The log cleaner reads the dirty part of a log once, putting every key with the offset it
was last seen at, then copies the log keeping only the records at those offsets. The map
is bounded by memory as Kafka bounds it (``log.cleaner.dedupe.buffer.size``): a key is held
as its 16-byte MD5 digest beside an 8-byte offset, 24 bytes a slot, and the map takes at
most ``memory_bytes * load_factor / 24`` keys. When it is full (:attr:`OffsetMap.is_full`)
the cleaner stops reading for this round and cleans up to :attr:`OffsetMap.latest_offset`;
the rest waits for the next round.

Two keys with the same digest share one entry, as in Kafka: the older key's latest record
would then be removed. With MD5 over one partition's keys this is accepted as never
happening.
"""

from __future__ import annotations

import hashlib

__all__ = ("BYTES_PER_SLOT", "DIGEST_SIZE", "OffsetMap")

DIGEST_SIZE = 16
"""Bytes of a key's MD5 digest."""
BYTES_PER_SLOT = DIGEST_SIZE + 8
"""A digest and an int64 offset: what one key costs, as Kafka counts it."""


class OffsetMap:
    """Key digest -> the latest offset put for it, at most :attr:`slots` keys.

    ``memory_bytes`` is the memory the map may use and ``load_factor`` (0 < f <= 1) the
    part of it filled before the map counts as full (Kafka's
    ``log.cleaner.io.buffer.load.factor``).
    """

    __slots__ = ("_latest_offset", "_offsets", "_slots")

    def __init__(self, memory_bytes: int, load_factor: float = 0.9) -> None:
        if memory_bytes <= 0:
            raise ValueError(f"offset map memory must be > 0 bytes, got {memory_bytes}")
        if not 0.0 < load_factor <= 1.0:
            raise ValueError(f"offset map load factor must be in (0, 1], got {load_factor}")
        slots = int(memory_bytes * load_factor) // BYTES_PER_SLOT
        if slots < 1:
            raise ValueError(
                f"an offset map of {memory_bytes} bytes at load factor {load_factor} cannot "
                f"hold one key ({BYTES_PER_SLOT} bytes), so cleaning would never progress"
            )
        self._slots = slots
        self._offsets: dict[bytes, int] = {}
        self._latest_offset = -1

    @property
    def slots(self) -> int:
        """How many keys the map may hold."""
        return self._slots

    @property
    def size(self) -> int:
        """How many keys it holds."""
        return len(self._offsets)

    @property
    def is_full(self) -> bool:
        """True when no new key fits: the cleaner stops building the map for this round."""
        return len(self._offsets) >= self._slots

    @property
    def utilization(self) -> float:
        """Fraction of the slots in use."""
        return len(self._offsets) / self._slots

    @property
    def latest_offset(self) -> int:
        """The offset last put (or given to :meth:`update_latest_offset`); -1 when none."""
        return self._latest_offset

    def put(self, key: bytes | bytearray | memoryview, offset: int) -> None:
        """Record ``offset`` (>= 0) as the latest for ``key``.

        A key already present is updated even when the map is full; a new key in a full
        map raises :class:`OverflowError` (check :attr:`is_full` first).
        """
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        digest = _digest(key)
        if digest not in self._offsets and len(self._offsets) >= self._slots:
            raise OverflowError(f"offset map is full: {self._slots} keys")
        self._offsets[digest] = offset
        self._latest_offset = offset

    def get(self, key: bytes | bytearray | memoryview) -> int:
        """The latest offset put for ``key``, or -1 when it was never put."""
        return self._offsets.get(_digest(key), -1)

    def update_latest_offset(self, offset: int) -> None:
        """Set :attr:`latest_offset`, e.g. to a batch's last offset once it has been read
        (as Kafka's cleaner does, so batches without keys count as read too)."""
        self._latest_offset = offset

    def clear(self) -> None:
        """Empty the map for the next round."""
        self._offsets.clear()
        self._latest_offset = -1


def _digest(key: bytes | bytearray | memoryview) -> bytes:
    return hashlib.md5(key, usedforsecurity=False).digest()
