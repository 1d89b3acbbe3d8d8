"""protocol.varint: the one varint reader of the record walkers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kplane.protocol.records import _write_unsigned_varint
from kplane.protocol.varint import VarintError, read_unsigned_varint


@pytest.mark.parametrize("bits", [32, 64])
@given(data=st.data())
def test_what_is_written_reads_back(bits: int, data: st.DataObject) -> None:
    value = data.draw(st.integers(min_value=0, max_value=(1 << bits) - 1))
    out = bytearray(b"\x07")  # a byte before: reading starts at 1
    _write_unsigned_varint(out, value)
    out += b"\x99"  # and one after
    assert read_unsigned_varint(bytes(out), 1, bits) == (value, len(out) - 1)
    assert read_unsigned_varint(memoryview(out), 1, bits) == (value, len(out) - 1)


@pytest.mark.parametrize(
    ("data", "bits", "reason"),
    [
        (b"\xff" * 5 + b"\x01", 32, "varint longer than 5 bytes"),
        (b"\xff" * 4 + b"\x1f", 32, "varint out of int32 range"),
        (b"\xff" * 10 + b"\x01", 64, "varint longer than 10 bytes"),
        (b"\xff" * 9 + b"\x02", 64, "varint out of int64 range"),
    ],
)
def test_too_long_or_out_of_range(data: bytes, bits: int, reason: str) -> None:
    with pytest.raises(VarintError, match=reason):
        read_unsigned_varint(data, 0, bits)


@pytest.mark.parametrize("data", [b"", b"\x80", b"\xff\xff", b"\x80\x80\x80"])
def test_running_off_the_data_is_an_index_error(data: bytes) -> None:
    with pytest.raises(IndexError):
        read_unsigned_varint(data, 0, 32)
