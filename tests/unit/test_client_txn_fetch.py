"""What kplane's consumer keeps of a fetched partition: never control batches, and with
read_committed not the batches of aborted transactions, decided as Kafka's Fetcher does
(per producer id, from the ``first_offset`` the Fetch response lists until that producer's
ABORT marker)."""

from __future__ import annotations

import struct
from types import SimpleNamespace as NS

import pytest

from kplane.client.consumer import READ_COMMITTED, READ_UNCOMMITTED, Consumer
from kplane.protocol.records import Record, build_batch, build_control_batch

TP = ("t", 0)
A, B = 1, 2  # producer ids


def data(base: int, producer_id: int, values: list[bytes], transactional: bool = True) -> bytes:
    return build_batch(
        [Record(None, v, (), 1_700_000_000_000) for v in values],
        base_offset=base,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=base if producer_id >= 0 else -1,
        is_transactional=transactional,
    )


def marker(base: int, producer_id: int, commit: bool) -> bytes:
    # the base offset lies outside the CRC: the stored batch gets its offset as the log does
    batch = bytearray(build_control_batch(producer_id, 0, commit, 0, 1_700_000_000_000))
    struct.pack_into(">q", batch, 0, base)
    return bytes(batch)


def aborted(*pairs: tuple[int, int]) -> list[NS]:
    return [NS(producer_id=p, first_offset=o) for p, o in pairs]


def kept(
    level: int, chunks: list[bytes], aborted_txns: list[NS] | None, position: int = 0
) -> tuple[list[tuple[int, bytes | None]], int]:
    consumer = Consumer(NS(), isolation_level=level)  # type: ignore[arg-type]
    consumer._positions[TP] = position
    consumer._keep(TP, position, b"".join(chunks), aborted_txns)
    fetched = consumer._fetched.get(TP)
    if fetched is None:
        return [], int(consumer._positions[TP] or 0)
    return [(r.offset, r.value) for r in fetched.records], fetched.next_offset


# offsets: A 0-1 | B 2 | plain 3 | A ABORT 4 | B COMMIT 5 | A 6 | A COMMIT 7
LOG = [
    data(0, A, [b"a0", b"a1"]),
    data(2, B, [b"b2"]),
    data(3, -1, [b"plain3"], transactional=False),
    marker(4, A, commit=False),
    marker(5, B, commit=True),
    data(6, A, [b"a6"]),
    marker(7, A, commit=True),
]


def test_read_uncommitted_returns_every_data_record_and_no_marker() -> None:
    records, next_offset = kept(READ_UNCOMMITTED, LOG, None)
    assert records == [(0, b"a0"), (1, b"a1"), (2, b"b2"), (3, b"plain3"), (6, b"a6")]
    assert next_offset == 8


def test_read_committed_drops_the_aborted_transaction_up_to_its_marker() -> None:
    records, next_offset = kept(READ_COMMITTED, LOG, aborted((A, 0)))
    assert records == [(2, b"b2"), (3, b"plain3"), (6, b"a6")]
    assert next_offset == 8


def test_a_producer_aborting_again_later_is_dropped_again() -> None:
    log = [*LOG[:-1], marker(7, A, commit=False)]
    records, _ = kept(READ_COMMITTED, log, aborted((A, 6), (A, 0)))
    assert records == [(2, b"b2"), (3, b"plain3")]


def test_the_listed_first_offset_bounds_the_abort() -> None:
    """B's transaction is listed as aborted from offset 5 on: its batch at 2 is committed
    data of an earlier transaction, read as such."""
    log = [
        data(0, B, [b"b0"]),
        marker(1, B, commit=True),
        data(2, B, [b"b2"]),
        marker(3, B, commit=False),
    ]
    records, next_offset = kept(READ_COMMITTED, log, aborted((B, 2)))
    assert records == [(0, b"b0")]
    assert next_offset == 4


@pytest.mark.parametrize("level", [READ_COMMITTED, READ_UNCOMMITTED])
def test_a_position_inside_the_fetched_range(level: int) -> None:
    records, next_offset = kept(level, LOG, aborted((A, 0)), position=1)
    expected = [(2, b"b2"), (3, b"plain3"), (6, b"a6")]
    if level == READ_UNCOMMITTED:
        expected = [(1, b"a1"), *expected]
    assert records == expected
    assert next_offset == 8


def test_only_aborted_batches_and_markers_move_the_position_past_them() -> None:
    log = [data(0, A, [b"a0"]), marker(1, A, commit=False), marker(2, B, commit=True)]
    records, position = kept(READ_COMMITTED, log, aborted((A, 0)))
    assert records == []
    assert position == 3
