"""Tests for broker.log.offset_map: Kafka's SkimpyOffsetMap, key -> latest offset."""

from __future__ import annotations

import pytest

from kplane.broker.log.offset_map import BYTES_PER_SLOT, OffsetMap
from kplane.protocol.record_filter import filter_batch
from kplane.protocol.records import Record, build_batch, iter_records


def _keys(n: int) -> list[bytes]:
    return [f"key-{i}".encode() for i in range(n)]


def test_slots_follow_memory_and_load_factor() -> None:
    assert BYTES_PER_SLOT == 24
    assert OffsetMap(24 * 100, load_factor=1.0).slots == 100
    assert OffsetMap(24 * 100).slots == 90
    assert OffsetMap(1000, load_factor=0.9).slots == 900 // 24
    assert OffsetMap(24 * 100 + 23, load_factor=1.0).slots == 100


@pytest.mark.parametrize(
    ("memory", "load_factor"),
    [(0, 0.9), (-24, 0.9), (2400, 0.0), (2400, 1.5), (23, 1.0), (26, 0.9)],
)
def test_bad_sizes_are_refused(memory: int, load_factor: float) -> None:
    with pytest.raises(ValueError):
        OffsetMap(memory, load_factor)


def test_an_empty_map() -> None:
    offsets = OffsetMap(24 * 10)
    assert (offsets.size, offsets.latest_offset, offsets.is_full) == (0, -1, False)
    assert offsets.get(b"absent") == -1
    assert offsets.utilization == 0.0


def test_put_and_get() -> None:
    offsets = OffsetMap(24 * 10)
    offsets.put(b"a", 3)
    offsets.put(b"b", 4)
    offsets.put(b"", 5)  # an empty key is a key
    assert (offsets.get(b"a"), offsets.get(b"b"), offsets.get(b""), offsets.get(b"c")) == (
        3,
        4,
        5,
        -1,
    )
    assert offsets.size == 3
    assert offsets.latest_offset == 5


def test_a_key_put_again_keeps_its_latest_offset_and_one_slot() -> None:
    offsets = OffsetMap(24 * 10)
    offsets.put(b"a", 3)
    offsets.put(b"a", 9)
    assert offsets.get(b"a") == 9
    assert offsets.size == 1
    assert offsets.latest_offset == 9


def test_latest_offset_is_the_last_put_or_update() -> None:
    offsets = OffsetMap(24 * 10)
    offsets.put(b"a", 7)
    offsets.update_latest_offset(20)
    assert offsets.latest_offset == 20
    offsets.put(b"b", 21)
    assert offsets.latest_offset == 21


def test_any_bytes_like_key_has_the_same_digest() -> None:
    offsets = OffsetMap(24 * 10)
    offsets.put(bytearray(b"key"), 1)
    assert offsets.get(b"key") == 1
    assert offsets.get(memoryview(b"key")) == 1


def test_a_negative_offset_is_refused() -> None:
    with pytest.raises(ValueError):
        OffsetMap(240).put(b"a", -1)


def test_the_map_fills_at_its_slots_and_never_exceeds_them() -> None:
    offsets = OffsetMap(24 * 10, load_factor=0.5)
    assert offsets.slots == 5
    keys = _keys(6)
    for offset, key in enumerate(keys[:5]):
        assert not offsets.is_full
        offsets.put(key, offset)
    assert offsets.is_full
    assert offsets.utilization == 1.0
    with pytest.raises(OverflowError):
        offsets.put(keys[5], 5)
    assert offsets.size == 5
    assert offsets.get(keys[5]) == -1
    offsets.put(keys[0], 6)  # a key already held still moves on
    assert (offsets.size, offsets.get(keys[0]), offsets.latest_offset) == (5, 6, 6)


def test_clear_empties_the_map_for_the_next_round() -> None:
    offsets = OffsetMap(24 * 3, load_factor=1.0)
    for offset, key in enumerate(_keys(3)):
        offsets.put(key, offset)
    assert offsets.is_full
    offsets.clear()
    assert (offsets.size, offsets.latest_offset, offsets.is_full) == (0, -1, False)
    assert offsets.get(b"key-0") == -1
    for offset, key in enumerate(_keys(3)):
        offsets.put(key, 100 + offset)
    assert offsets.get(b"key-2") == 102


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_compaction_with_the_map_keeps_each_keys_latest_record(codec: int) -> None:
    """The cleaner's two passes: build the map over the batches, then filter them."""
    batches = [
        build_batch(
            [
                Record(f"k{(b * 4 + i) % 5}".encode(), f"v{b}.{i}".encode(), timestamp=1000 + i)
                for i in range(4)
            ],
            base_offset=b * 4,
            compression=codec,
        )
        for b in range(3)
    ]
    offsets = OffsetMap(24 * 100)
    for batch in batches:
        for record in iter_records(batch):
            assert record.key is not None
            offsets.put(record.key, record.offset)
    assert offsets.latest_offset == 11

    def keep(record: Record) -> bool:
        assert record.key is not None
        return record.offset >= offsets.get(record.key)

    survivors: list[tuple[bytes | None, bytes | None, int]] = []
    for batch in batches:
        output = filter_batch(batch, keep).output
        if output is not None:
            survivors += [(r.key, r.value, r.offset) for r in iter_records(output)]
    assert survivors == [
        (b"k2", b"v1.3", 7),
        (b"k3", b"v2.0", 8),
        (b"k4", b"v2.1", 9),
        (b"k0", b"v2.2", 10),
        (b"k1", b"v2.3", 11),
    ]
