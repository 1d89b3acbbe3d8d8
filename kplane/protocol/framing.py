"""Size-prefixed Kafka frames, request headers v0-v2 and response headers v0-v1 (sans-IO)."""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable, MutableSequence
from dataclasses import dataclass

from kio.serial.errors import BufferUnderflow
from kio.serial.readers import read_unsigned_varint

from kplane.protocol import api

_SIZE = struct.Struct(">i")
_HEADER_FIXED = struct.Struct(">hhi")
_HEADER_V1 = struct.Struct(">hhih")  # ... and the client id's length
_SMALL_READ = 4096
"""Reads shorter than this are gathered into one buffer while a frame is assembled."""
_RESP_V0 = struct.Struct(">ii")
DIRECT_READ_MIN = 64 << 10
"""A frame with at least this many bytes still to come is read straight into its own bytes."""

# CPython's PyBytes_FromStringAndSize(NULL, n) makes a bytes object whose contents may be
# written until it is shared; PyMemoryView_FromMemory gives a writable view of them.
_new_bytes = ctypes.pythonapi.PyBytes_FromStringAndSize
_new_bytes.restype = ctypes.py_object
_new_bytes.argtypes = (ctypes.c_char_p, ctypes.c_ssize_t)
_bytes_address = ctypes.pythonapi.PyBytes_AsString
_bytes_address.restype = ctypes.c_void_p
_bytes_address.argtypes = (ctypes.py_object,)
_memory_view = ctypes.pythonapi.PyMemoryView_FromMemory
_memory_view.restype = ctypes.py_object
_memory_view.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int)
_PYBUF_WRITE = 0x200


def _unwritten_bytes(size: int) -> tuple[bytes, memoryview]:
    """A new ``bytes`` of ``size`` bytes, its contents not yet written, and a writable
    view of them. (``bytearray(size)`` zero-fills, which costs about what receiving in
    place saves.) The view must not outlive the bytes nor be used once they are shared."""
    data: bytes = _new_bytes(None, size)
    return data, _memory_view(_bytes_address(data), size, _PYBUF_WRITE)


class FrameTooLarge(Exception):
    """A frame announced a size above ``socket.request.max.bytes`` (or below zero)."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class InvalidRequestHeader(Exception):
    """A request header that cannot be parsed."""


class FrameDecoder:
    """Turns a byte stream into frames; the size is checked before the body is buffered.

    Bytes come in one of two ways. ``feed`` takes a read's bytes: a frame split across
    reads is kept as views of the reads it arrived in and joined once, when complete (one
    copy of its bytes, none while it arrives); the frames of one read are cut out of it.
    ``get_buffer`` and ``buffer_updated`` let the caller read the socket into the decoder:
    into a buffer the caller lends (its bytes then go on as ``feed``'s), or, for a frame
    with ``DIRECT_READ_MIN`` or more still to come, straight into the frame's own bytes,
    with no copy at all. Frames are ``bytes``: nothing changes them once handed out.

    ``max_size`` may change between feeds (a smaller bound before SASL authentication).
    With ``allocate``, a frame's bytes are asked of a memory pool as they arrive (its size
    prefix alone asks for none, but is refused when the pool has no room): a refusal leaves
    the decoder ``blocked`` (the caller stops reading) until ``resume``, the refused bytes
    kept but not counted. ``frame_complete`` is called when the frame being received ends
    (complete, or abandoned by ``abandon``).
    """

    __slots__ = (
        "_allocate",
        "_buffered",
        "_filled",
        "_frame_complete",
        "_need",
        "_parts",
        "_target",
        "_target_view",
        "blocked",
        "frames",
        "max_size",
        "reserved",
    )

    def __init__(
        self,
        max_size: int,
        allocate: Callable[[int], bool] | None = None,
        frame_complete: Callable[[], None] | None = None,
    ) -> None:
        # Received, not yet in a frame: views of the reads (small ones gathered in bytearrays).
        self._parts: list[memoryview | bytearray] = []
        self._buffered = 0  # their bytes
        self.max_size = max_size
        self._allocate = allocate
        self._frame_complete = frame_complete
        self._need = -1
        self.blocked = False
        self.reserved = 0  # bytes of the frame being received that the pool gave
        self.frames = 0  # frames complete so far
        # The frame being read in place (``get_buffer``), its view, and its bytes so far.
        self._target: bytes | None = None
        self._target_view: memoryview | None = None
        self._filled = 0

    def feed(self, data: bytes) -> list[bytes]:
        """Add received bytes; return every frame now complete (without its size prefix)."""
        frames: list[bytes] = []
        self.feed_into(data, frames)
        return frames

    def resume(self) -> list[bytes]:
        """Try the bytes the pool refused again; return the frames now complete."""
        frames: list[bytes] = []
        self.resume_into(frames)
        return frames

    def feed_into(self, data: bytes, out: MutableSequence[bytes]) -> None:
        """``feed``, appending the frames to ``out`` (those complete before a
        ``FrameTooLarge`` are there too). ``data`` is kept, not copied, until its bytes
        are in frames: it must not change. Not while a frame is read in place."""
        assert self._target is None, "a frame read in place takes bytes from buffer_updated"
        if self._parts:
            self._add_part(data)
            self._buffered += len(data)
            if not self.blocked:
                self._drain(out)
        else:  # nothing buffered: cut the frames out of ``data``, keep only its tail
            self._keep(data, self._frames(data, out))

    def resume_into(self, out: MutableSequence[bytes]) -> None:
        """``resume``, appending the frames to ``out``."""
        self.blocked = False
        if self._target is not None:
            self._take_target(out)
        elif self._parts:
            self._drain(out)

    def get_buffer(self, stage: memoryview) -> memoryview:
        """Where the next read should go: the rest of the frame being received when
        ``DIRECT_READ_MIN`` or more of it is still to come (received in place: no copy),
        else ``stage``, a buffer the caller lends until ``buffer_updated``."""
        if self._target_view is None:
            need = self._need
            if need < 0 or self.blocked or need - self._buffered < DIRECT_READ_MIN:
                return stage
            try:
                self._target, view = _unwritten_bytes(need)
            except MemoryError:  # no room for the whole frame at once: read it piecewise
                return stage
            self._target_view = view
            filled = 0
            for part in self._parts:  # what arrived of the frame before: it is all its own
                view[filled : filled + len(part)] = part
                filled += len(part)
            self._parts.clear()
            self._buffered = 0
            self._filled = filled
        return self._target_view[self._filled :]

    def buffer_updated(self, stage: memoryview, size: int, out: MutableSequence[bytes]) -> None:
        """``size`` bytes were read into the buffer ``get_buffer`` gave; append every frame
        now complete to ``out``."""
        if self._target is None:
            self.feed_into(stage[:size].tobytes(), out)
        else:
            self._filled += size
            self._take_target(out)

    def _take_target(self, out: MutableSequence[bytes]) -> None:
        """Count what arrived of the frame read in place; hand it out once complete."""
        filled = self._filled
        if filled > self.reserved and not self._hold(filled - self.reserved):
            return
        if filled < self._need:
            return
        self._hand_out(self._drop_target(), out)

    def _drop_target(self) -> bytes:
        frame = self._target
        assert frame is not None and self._target_view is not None
        self._target_view.release()
        self._target = self._target_view = None
        self._filled = 0
        return frame

    def _add_part(self, data: bytes | bytearray | memoryview) -> None:
        """Buffer a read (or its tail): a view of it, or, when small, its bytes appended to
        the last part if that is a small reads' buffer too, so a frame dribbled in tiny
        reads costs its bytes, not an object each."""
        parts = self._parts
        if len(data) >= _SMALL_READ:
            parts.append(memoryview(data))
            return
        last = parts[-1] if parts else None
        if type(last) is bytearray and len(last) < _SMALL_READ:
            last += data
        else:
            parts.append(bytearray(data))

    def _keep(self, data: bytes | bytearray | memoryview, pos: int) -> None:
        """Buffer ``data`` from ``pos`` on (nothing, when it was used up)."""
        size = len(data) - pos
        if size > 0:
            self._add_part(memoryview(data)[pos:])
            self._buffered += size

    def _drain(self, out: MutableSequence[bytes]) -> None:
        """Append the frames completed by the buffered parts to ``out``: across parts a
        size prefix or a frame at a time, then the rest of the last part in one pass."""
        parts = self._parts
        while len(parts) > 1:
            if self._need < 0:
                if self._buffered < 4:
                    return
                (size,) = _SIZE.unpack(b"".join(part[:4] for part in parts[:4])[:4])
                if size < 0 or size > self.max_size:
                    raise FrameTooLarge(size, self.max_size)
                if not self._hold(min(self._buffered - 4, size)):
                    return
                self._need = size
                self._take(4)
            else:
                arrived = min(self._buffered, self._need)
                if arrived > self.reserved and not self._hold(arrived - self.reserved):
                    return
            if self._buffered < self._need:
                return
            self._hand_out(self._take(self._need), out)
        if parts:
            rest = parts.pop()
            self._buffered = 0
            self._keep(rest, self._frames(rest, out))

    def _take(self, size: int) -> bytes:
        """The first ``size`` buffered bytes, joined (their one copy), no longer buffered."""
        parts = self._parts
        whole = 0  # parts wholly taken
        left = size
        while left and len(parts[whole]) <= left:
            left -= len(parts[whole])
            whole += 1
        taken = parts[:whole]
        if left:
            taken.append(parts[whole][:left])
            parts[whole] = parts[whole][left:]
        del parts[:whole]
        self._buffered -= size
        return b"".join(taken)

    def _frames(self, data: bytes | bytearray | memoryview, out: MutableSequence[bytes]) -> int:
        """Append the complete frames of one read, ``data``, to ``out``; return the bytes
        used. The frame being received, if any, starts at ``data[0]``."""
        pos = 0
        end = len(data)
        with memoryview(data) as view:  # one copy per frame: a frame is bytes
            while True:
                if self._need < 0:
                    if end - pos < 4:
                        break
                    (size,) = _SIZE.unpack_from(view, pos)
                    if size < 0 or size > self.max_size:
                        raise FrameTooLarge(size, self.max_size)
                    if not self._hold(min(end - pos - 4, size)):
                        break
                    self._need = size
                    pos += 4
                else:
                    arrived = min(end - pos, self._need)
                    if arrived > self.reserved and not self._hold(arrived - self.reserved):
                        break
                if end - pos < self._need:
                    break
                size = self._need
                self._hand_out(view[pos : pos + size].tobytes(), out)
                pos += size
        return pos

    def _hold(self, size: int) -> bool:
        """Count ``size`` more bytes of the frame against the pool; False when refused."""
        if self._allocate is None:
            return True
        if not self._allocate(size):
            self.blocked = True
            return False
        self.reserved += size
        return True

    def _hand_out(self, frame: bytes, out: MutableSequence[bytes]) -> None:
        """Hand out a complete frame."""
        out.append(frame)
        self._end_frame()
        self.frames += 1

    def _end_frame(self) -> None:
        self._need = -1
        self.reserved = 0
        if self._frame_complete is not None:
            self._frame_complete()

    def abandon(self) -> int:
        """Drop what is buffered (the connection is closing); return the bytes the pool
        had given the frame being received."""
        reserved = self.reserved
        if self._target is not None:
            self._drop_target()
        if self._need >= 0:
            self._end_frame()
        self._parts.clear()
        self._buffered = 0
        self.blocked = False
        return reserved

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a complete frame."""
        return self._buffered + self._filled

    @property
    def receiving(self) -> bool:
        """Part of a frame (or of its size prefix) has arrived, not all of it."""
        return self._need >= 0 or bool(self._parts)

    @property
    def frame_size(self) -> int | None:
        """The size of the frame being received, once its prefix has arrived."""
        return self._need if self._need >= 0 else None


@dataclass(slots=True)
class RequestHeader:
    """A parsed request header and where the body starts in the frame. (Not frozen, yet
    never changed: a frozen dataclass costs four times as much to make, once a request.)"""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int


def parse_request_header(frame: bytes) -> RequestHeader:
    """Parse the request header (v0, v1 or v2 as the API and version demand)."""
    if len(frame) < 10:
        if len(frame) < 8:
            raise InvalidRequestHeader("frame shorter than a request header")
        api_key, api_version, correlation_id = _HEADER_FIXED.unpack_from(frame, 0)
        length = None  # v1 and v2 headers are cut short below
    else:
        api_key, api_version, correlation_id, length = _HEADER_V1.unpack_from(frame, 0)
    pos = 8
    client_id: str | None = None
    header_version = api.request_header_version(api_key, api_version)
    if header_version >= 1:
        if length is None:
            raise InvalidRequestHeader("truncated client id")
        pos = 10
        if length >= 0:
            if len(frame) < pos + length:
                raise InvalidRequestHeader("truncated client id")
            client_id = str(frame[pos : pos + length], "utf-8", "replace")
            pos += length
    if header_version >= 2:
        if pos < len(frame) and frame[pos] == 0:  # no tagged fields, as nearly always
            pos += 1
        else:
            count, pos = read_uvarint(frame, pos)
            for _ in range(count):
                _tag, pos = read_uvarint(frame, pos)
                size, pos = read_uvarint(frame, pos)
                pos += size
            if pos > len(frame):
                raise InvalidRequestHeader("truncated tagged fields")
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


def read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    """Read an unsigned varint with kio's reader; return (value, next position)."""
    try:
        value, size = read_unsigned_varint(data, pos)
    except (BufferUnderflow, ValueError) as exc:
        raise InvalidRequestHeader("malformed unsigned varint") from exc
    return int(value), pos + size


def response_body_offset(api_key: int, api_version: int) -> int:
    """Where a response's body starts in its frame (after the size prefix): behind the
    correlation id, and for header v1 its tagged fields (none, as brokers send them)."""
    return 4 if api.response_header_version(api_key, api_version) == 0 else 5


def response_frame_prefix(
    api_key: int, api_version: int, correlation_id: int, body_size: int
) -> bytes:
    """Size prefix plus response header for a body of ``body_size`` bytes."""
    if api.response_header_version(api_key, api_version) == 0:
        return _RESP_V0.pack(body_size + 4, correlation_id)
    return _RESP_V0.pack(body_size + 5, correlation_id) + b"\x00"


def encode_request_frame(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, body: bytes
) -> bytes:
    """Size prefix, request header and body: what a client sends."""
    header = _HEADER_FIXED.pack(api_key, api_version, correlation_id)
    header_version = api.request_header_version(api_key, api_version)
    if header_version >= 1:
        if client_id is None:
            header += b"\xff\xff"
        else:
            raw = client_id.encode()
            header += struct.pack(">h", len(raw)) + raw
    if header_version >= 2:
        header += b"\x00"
    return _SIZE.pack(len(header) + len(body)) + header + body
