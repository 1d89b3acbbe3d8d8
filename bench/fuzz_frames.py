"""Frames to throw at a broker: random bytes, schema-generated bodies (mostly mutated) and
targeted shapes, each with a valid size prefix.

Every frame comes from a ``random.Random`` the caller seeds, so a seed and a connection
number give the same bytes on every run.
"""

from __future__ import annotations

import datetime
import random
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fuzz_schema import BodyWriter, Twist
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.static.primitive import i16, i32

from kplane.protocol import api
from kplane.protocol.body_scan import write_uvarint
from kplane.protocol.records import Record, build_batch

PROBE_CORRELATION = 0x7FFFFFF0
LARGE_TOPIC = "fuzz-large"  # not in fuzz_schema.NAMES: no fuzzed request creates it
PRODUCE, METADATA, API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 0, 3, 18, 17, 36
EXTREME_32 = (0x7FFFFFFF, 0xFFFFFFFE, 0x80000000, 0xFFFFFFFF, 0x00000000, 0x7FFFFFFE)
EXTREME_16 = (0x7FFF, 0xFFFF, 0x8000, 0xFFFE)
CLIENT_IDS: tuple[str | None, ...] = (None, "", "fuzz", "ünï😀", "c" * 300)
# kind -> weight; "schema" frames are mutated 70% of the time (kind "mutated").
KIND_WEIGHTS = {"random": 0.07, "random_body": 0.08, "schema": 0.65, "targeted": 0.20}


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame as sent (size prefix included) and what it was meant to be."""

    kind: str
    api_key: int
    api_version: int
    data: bytes

    @property
    def sent_api_key(self) -> int | None:
        """The api key as the bytes carry it (a mutation may have changed it), or None for
        a too-short frame."""
        if len(self.data) < 6:
            return None
        return int(struct.unpack_from(">h", self.data, 4)[0])

    @property
    def correlation_id(self) -> int | None:
        """The correlation id as the bytes carry it, or None for a too-short frame."""
        if len(self.data) < 12:
            return None
        return int(struct.unpack_from(">i", self.data, 8)[0])


def sized(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def header(rng: random.Random, key: int, version: int, tags: bytes = b"\x00") -> bytes:
    """A request header for a served (key, version): v1, or v2 with ``tags``."""
    correlation = rng.randrange(0, PROBE_CORRELATION)
    out = struct.pack(">hhi", key, version, correlation)
    if api.request_header_version(key, version) == 0:
        return out
    client_id = rng.choice(CLIENT_IDS)
    if client_id is None:
        out += b"\xff\xff"
    else:
        raw = client_id.encode()
        out += struct.pack(">h", len(raw)) + raw
    if api.request_header_version(key, version) == 2:
        out += tags
    return out


PROBE = sized(struct.pack(">hhi", API_VERSIONS, 0, PROBE_CORRELATION) + b"\x00\x05probe")


class FrameSource:
    """Frames for the (api key, versions) a broker advertised."""

    def __init__(self, served: Mapping[int, Sequence[int]]) -> None:
        self.pairs = [(k, v) for k, versions in sorted(served.items()) for v in versions]
        self.served = served

    def frame(self, rng: random.Random) -> Frame:
        kind = rng.choices(list(KIND_WEIGHTS), weights=list(KIND_WEIGHTS.values()))[0]
        if kind == "random":
            return self._random(rng)
        if kind == "random_body":
            key, version = rng.choice(self.pairs)
            return self._framed("random_body", key, version,
                                header(rng, key, version) + _random_bytes(rng))
        if kind == "targeted":
            return self._targeted(rng)
        key, version = rng.choice(self.pairs)
        body = BodyWriter(rng).body(api.request_class(key, version))
        payload = header(rng, key, version) + body
        if rng.random() < 0.7:
            return self._framed("mutated", key, version, mutate(rng, payload))
        return self._framed("schema", key, version, payload)

    def valid(self, rng: random.Random, key: int, version: int) -> Frame:
        """An unmutated schema-generated frame of ``key``/``version``."""
        body = BodyWriter(rng).body(api.request_class(key, version))
        return self._framed("schema", key, version, header(rng, key, version) + body)

    def sasl_prelude(self, rng: random.Random) -> list[Frame]:
        """A SaslHandshake, sometimes followed by a SaslAuthenticate with a PLAIN token
        (right or wrong): the way into a SASL listener's later states."""
        mechanism = rng.choice(("PLAIN", "PLAIN", "SCRAM-SHA-256", "GSSAPI", "")).encode()
        version = rng.choice(self.served.get(SASL_HANDSHAKE, (1,)))
        body = struct.pack(">h", len(mechanism)) + mechanism
        frames = [self._framed("sasl", SASL_HANDSHAKE, version,
                               header(rng, SASL_HANDSHAKE, version) + body)]
        versions = self.served.get(SASL_AUTHENTICATE)
        if version >= 1 and versions and rng.random() < 0.7:
            version = rng.choice(versions)
            token = rng.choice((b"\x00admin\x00admin-secret", b"\x00admin\x00wrong",
                                b"\x00\x00", rng.randbytes(20)))
            if api.is_flexible(SASL_AUTHENTICATE, version):
                body = write_uvarint(len(token) + 1) + token + b"\x00"
            else:
                body = struct.pack(">i", len(token)) + token
            frames.append(self._framed("sasl", SASL_AUTHENTICATE, version,
                                       header(rng, SASL_AUTHENTICATE, version) + body))
        return frames

    def _random(self, rng: random.Random) -> Frame:
        data = _random_bytes(rng)
        key, version = struct.unpack(">hh", data[:4]) if len(data) >= 4 else (-1, -1)
        return Frame("random", key, version, sized(_avoid_probe_id(data)))

    def _framed(self, kind: str, key: int, version: int, payload: bytes) -> Frame:
        return Frame(kind, key, version, sized(_avoid_probe_id(payload)))

    def _targeted(self, rng: random.Random) -> Frame:
        shape = rng.choice(_SHAPES)
        if shape == "oversize_prefix":  # beyond socket.request.max.bytes, or negative
            claimed = rng.choice((0x7FFFFFFF, 0x10000000, -1, -0x80000000))
            key, version = rng.choice(self.pairs)
            data = struct.pack(">i", claimed) + header(rng, key, version)
            return Frame(shape, key, version, data)
        if shape in Twist.__members__:
            key, version = rng.choice(self.pairs)
            writer = BodyWriter(rng, Twist[shape])
            body = writer.body(api.request_class(key, version))
            return self._framed(shape.lower(), key, version, header(rng, key, version) + body)
        key, version, payload = _SHAPE_MAKERS[shape](self, rng)
        return self._framed(shape, key, version, payload)


def _random_bytes(rng: random.Random) -> bytes:
    roll = rng.random()
    size = rng.randint(0, 16) if roll < 0.3 else (
        rng.randint(0, 200) if roll < 0.8 else rng.randint(200, 4000))
    return rng.randbytes(size)


def _avoid_probe_id(payload: bytes) -> bytes:
    """The probe's correlation id is reserved: a frame that carries it gets another."""
    if len(payload) >= 8 and struct.unpack_from(">i", payload, 4)[0] == PROBE_CORRELATION:
        return payload[:4] + struct.pack(">i", 1) + payload[8:]
    return payload


def mutate(rng: random.Random, payload: bytes) -> bytes:
    """One to three byte-level mutations: bit flips, inserts, deletes, extreme 2- and
    4-byte integers, truncation."""
    data = bytearray(payload)
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(6)
        pos = rng.randrange(len(data) + 1) if data else 0
        if op == 0 and data:
            pos = min(pos, len(data) - 1)
            data[pos] ^= 1 << rng.randrange(8)
        elif op == 1:
            data[pos:pos] = rng.randbytes(rng.randint(1, 8))
        elif op == 2 and data:
            del data[pos:pos + rng.randint(1, 8)]
        elif op == 3 and len(data) >= 4:
            pos = min(pos, len(data) - 4)
            data[pos:pos + 4] = struct.pack(">I", rng.choice(EXTREME_32))
        elif op == 4 and len(data) >= 2:
            pos = min(pos, len(data) - 2)
            data[pos:pos + 2] = struct.pack(">H", rng.choice(EXTREME_16))
        elif op == 5:
            del data[pos:]
    return bytes(data)


def _api_versions_unknown_tag(src: FrameSource, rng: random.Random) -> tuple[int, int, bytes]:
    tag = write_uvarint(rng.choice((0, 5, 99, 2**31 - 1)))
    value = rng.randbytes(rng.choice((0, 2, 9)))
    names = b"\x02t\x021"  # client_software_name "t", version "1" (compact strings)
    body = names + b"\x01" + tag + write_uvarint(len(value)) + value
    return API_VERSIONS, 3, header(rng, API_VERSIONS, 3) + body


def _metadata_id_null_name(src: FrameSource, rng: random.Random) -> tuple[int, int, bytes]:
    version = rng.choice([v for v in src.served.get(METADATA, ()) if v >= 10] or [10])
    topics = rng.randint(1, 3)
    body = write_uvarint(topics + 1)
    for _ in range(topics):
        body += rng.randbytes(16) + b"\x00" + b"\x00"  # topic id, null name, no tags
    body += b"\x00"  # allow_auto_topic_creation
    if version <= 10:
        body += b"\x00"  # include_cluster_authorized_operations
    body += b"\x00" + b"\x00"  # include_topic_authorized_operations, tags
    return METADATA, version, header(rng, METADATA, version) + body


def _header_tags(src: FrameSource, rng: random.Random) -> tuple[int, int, bytes]:
    """A flexible request whose header v2 carries unknown or overlong tagged fields."""
    flexible = [(k, v) for k, v in src.pairs if api.request_header_version(k, v) == 2]
    key, version = rng.choice(flexible)
    tags = rng.choice((b"\x01\x09\x02hi", b"\x02\x01\x00\x01\x00",
                       write_uvarint(2**31 - 1), b"\x01\x00" + write_uvarint(2**31 - 1)))
    body = BodyWriter(rng).body(api.request_class(key, version))
    return key, version, header(rng, key, version, tags) + body


def _bad_version(src: FrameSource, rng: random.Random) -> tuple[int, int, bytes]:
    key = rng.choice([*src.served, -1, 80, 1000, 0x7FFF])
    versions = src.served.get(key, (0,))
    version = rng.choice((max(versions) + 1, -1, 0x7FFF, min(versions) - 1))
    return key, version, struct.pack(">hhi", key, version, 1) + b"\x00\x01c" + _random_bytes(rng)


def _bad_client_id(src: FrameSource, rng: random.Random) -> tuple[int, int, bytes]:
    key, version = rng.choice(src.pairs)
    length = rng.choice((0x7FFF, -2, -0x8000, 200))
    return key, version, struct.pack(">hhih", key, version, 1, length) + rng.randbytes(8)


def _short(src: FrameSource, rng: random.Random) -> tuple[int, int, bytes]:
    key, version = rng.choice(src.pairs)
    full = header(rng, key, version)
    return key, version, full[: rng.randint(0, min(len(full), 11))]


def _large(src: FrameSource, rng: random.Random) -> tuple[int, int, bytes]:
    """64 KiB to 2 MiB: a Produce v9 of one big record to a topic that never exists (the
    log keeps records in memory: RSS would grow by design), or random bytes behind a
    header."""
    size = rng.randint(1 << 16, 1 << 21)
    if rng.random() < 0.5 or 9 not in src.served.get(PRODUCE, ()):
        key, version = rng.choice(src.pairs)
        return key, version, header(rng, key, version) + rng.randbytes(size)
    batch = build_batch([Record(key=None, value=rng.randbytes(size), timestamp=0)])
    request = ProduceRequest(
        transactional_id=None, acks=i16(rng.choice((0, 1, -1))),
        timeout=datetime.timedelta(seconds=5),
        topic_data=(TopicProduceData(name=LARGE_TOPIC, partition_data=(
            PartitionProduceData(index=i32(0), records=batch),)),),
    )
    body = api.encode(request)
    return PRODUCE, 9, header(rng, PRODUCE, 9) + body


_SHAPE_MAKERS = {
    "large": _large,
    "api_versions_unknown_tag": _api_versions_unknown_tag,
    "metadata_id_null_name": _metadata_id_null_name,
    "header_tags": _header_tags,
    "bad_version": _bad_version,
    "bad_client_id": _bad_client_id,
    "short_header": _short,
}
_SHAPES = (*Twist.__members__, *_SHAPE_MAKERS, "oversize_prefix")
