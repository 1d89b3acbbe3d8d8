"""RegionWriter: bytes and file regions written to a real socket with writev and sendfile."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest
import uvloop

from kplane.broker.network.region_writer import RegionWriter
from kplane.broker.utils.file_region import (
    FileRegion,
    OpenFile,
    RegionTruncatedError,
    Transferable,
    materialize,
)


def _open(path: Path, data: bytes) -> OpenFile:
    path.write_bytes(data)
    return OpenFile(os.open(path, os.O_RDONLY))


def _write(pieces: list[Transferable], *, sndbuf: int = 0) -> tuple[bytes, OSError | None]:
    """Write ``pieces`` with a RegionWriter on one end of a socket pair, read the other end
    in a thread; what arrived, and the error ``done`` got."""
    ours, theirs = socket.socketpair()
    if sndbuf:
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    ours.setblocking(False)
    received = bytearray()

    def read() -> None:
        while chunk := theirs.recv(1 << 16):
            received.extend(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    loop = uvloop.new_event_loop()
    result: list[OSError | None] = []

    def done(exc: OSError | None) -> None:
        result.append(exc)
        loop.stop()

    writer = RegionWriter(loop, ours.fileno(), pieces, done)
    loop.call_soon(writer.start)
    loop.run_forever()
    loop.close()
    ours.close()
    reader.join(10)
    theirs.close()
    return bytes(received), result[0]


def test_bytes_and_regions_arrive_in_order(tmp_path: Path) -> None:
    data = os.urandom(3 << 20)
    file = _open(tmp_path / "segment.log", data)
    pieces: list[Transferable] = [
        b"head",
        b"",
        FileRegion(file, 10, 1 << 20),
        memoryview(b"middle"),
        FileRegion(file, 2 << 20, (1 << 20) - 5),
        b"tail",
    ]
    received, error = _write(pieces, sndbuf=4096)  # a small buffer: many waits to drain
    assert error is None
    assert received == b"".join(materialize(pieces))
    assert received[4 : 4 + (1 << 20)] == data[10 : 10 + (1 << 20)]


def test_many_small_pieces_go_in_iov_max_groups() -> None:
    pieces: list[Transferable] = [bytes([i % 256]) * 3 for i in range(2500)]
    received, error = _write(pieces)
    assert error is None
    assert received == b"".join(materialize(pieces))


def test_a_region_past_the_end_of_its_file_is_an_error(tmp_path: Path) -> None:
    file = _open(tmp_path / "segment.log", b"x" * 1000)
    received, error = _write([b"head", FileRegion(file, 0, 2000)])
    assert isinstance(error, RegionTruncatedError)
    assert received == b"head" + b"x" * 1000
    with pytest.raises(RegionTruncatedError):
        materialize([FileRegion(file, 500, 1000)])


def test_a_region_keeps_its_file_open_after_the_holder_lets_go(tmp_path: Path) -> None:
    file = _open(tmp_path / "segment.log", b"abcdef")
    region = FileRegion(file, 2, 3)
    fd = file.fd
    del file
    (tmp_path / "segment.log").unlink()  # deleted as retention does: still readable
    assert materialize([region]) == [b"cde"]
    del region
    with pytest.raises(OSError):
        os.fstat(fd)  # the last holder gone: the descriptor is closed
