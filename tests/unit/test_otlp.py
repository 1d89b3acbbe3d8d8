"""The OTLP MetricsData decoder: real messages built field by field, then truncated and
garbage input, which must raise OtlpError and nothing else."""

from __future__ import annotations

import contextlib
import random
import struct

import pytest

from kplane.protocol.otlp import MetricKind, OtlpError, decode_metrics_data


def varint(value: int) -> bytes:
    out = bytearray()
    value &= (1 << 64) - 1
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def fixed64(number: int, value: int) -> bytes:
    return varint(number << 3 | 1) + struct.pack("<Q", value & (1 << 64) - 1)


def double(number: int, value: float) -> bytes:
    return varint(number << 3 | 1) + struct.pack("<d", value)


def vint(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value)


def key_value(key: str, value: str | int | bool) -> bytes:
    if isinstance(value, bool):
        any_value = vint(2, int(value))
    elif isinstance(value, int):
        any_value = vint(3, value)
    else:
        any_value = field(1, value.encode())
    return field(1, key.encode()) + field(2, any_value)


def number_point(value: float | int, attrs: dict[str, str], attr_field: int = 7) -> bytes:
    body = b"".join(field(attr_field, key_value(k, v)) for k, v in attrs.items())
    body += fixed64(3, 1_700_000_000_000_000_000)
    body += double(4, value) if isinstance(value, float) else fixed64(6, value)
    return body


def metrics_data(*metrics: bytes, resource: dict[str, str | int | bool] | None = None) -> bytes:
    res = field(1, b"".join(field(1, key_value(k, v)) for k, v in (resource or {}).items()))
    scope = field(1, field(1, b"librdkafka")) + b"".join(field(2, m) for m in metrics)
    return field(1, res + field(2, scope))


def gauge(name: str, *points: bytes) -> bytes:
    return field(1, name.encode()) + field(5, b"".join(field(1, p) for p in points))


def total(name: str, *points: bytes, delta: bool = True, monotonic: bool = True) -> bytes:
    body = b"".join(field(1, p) for p in points) + vint(2, 1 if delta else 2)
    return field(1, name.encode()) + field(7, body + vint(3, int(monotonic)))


def histogram(name: str, delta: bool = False) -> bytes:
    point = field(9, key_value("node_id", "1"))
    point += fixed64(4, 6) + double(5, 42.5)
    point += field(6, struct.pack("<3Q", 1, 2, 3)) + field(7, struct.pack("<2d", 1.0, 10.0))
    return field(1, name.encode()) + field(9, field(1, point) + vint(2, 1 if delta else 2))


SAMPLE = metrics_data(
    gauge(
        "org.apache.kafka.producer.node.request.latency.avg", number_point(3.5, {"node_id": "0"})
    ),
    total("org.apache.kafka.producer.connection.creation.total", number_point(2, {})),
    histogram("org.apache.kafka.producer.request.latency"),
    field(1, b"org.apache.kafka.summary") + field(11, b""),  # a kind not exposed: skipped
    resource={"client_rack": "r1", "enabled": True, "count": -3},
)


def test_decodes_resource_attributes_and_each_kind() -> None:
    data = decode_metrics_data(SAMPLE)
    (resource,) = data.resource_metrics
    assert resource.resource_attributes == (
        ("client_rack", "r1"),
        ("enabled", "true"),
        ("count", "-3"),
    )
    by_name = {m.name: m for m in data.metrics()}
    assert set(by_name) == {
        "org.apache.kafka.producer.node.request.latency.avg",
        "org.apache.kafka.producer.connection.creation.total",
        "org.apache.kafka.producer.request.latency",
    }
    latency = by_name["org.apache.kafka.producer.node.request.latency.avg"]
    assert latency.kind is MetricKind.GAUGE
    assert [(p.attributes, p.value) for p in latency.points] == [((("node_id", "0"),), 3.5)]
    created = by_name["org.apache.kafka.producer.connection.creation.total"]
    assert (created.kind, created.delta, created.monotonic) == (MetricKind.SUM, True, True)
    assert created.points[0].value == 2.0
    hist = by_name["org.apache.kafka.producer.request.latency"]
    assert hist.kind is MetricKind.HISTOGRAM and not hist.delta
    (point,) = hist.histogram_points
    assert (point.count, point.sum, point.bucket_counts, point.bounds) == (
        6,
        42.5,
        (1, 2, 3),
        (1.0, 10.0),
    )
    assert point.attributes == (("node_id", "1"),)


def test_negative_int_point_and_empty_message() -> None:
    data = decode_metrics_data(metrics_data(gauge("g", number_point(-5, {}))))
    assert next(data.metrics()).points[0].value == -5.0
    assert decode_metrics_data(b"").resource_metrics == ()


@pytest.mark.parametrize("cut", range(1, len(SAMPLE)))
def test_every_truncation_is_refused_or_decoded_within_bounds(cut: int) -> None:
    with contextlib.suppress(OtlpError):
        decode_metrics_data(SAMPLE[:cut])


@pytest.mark.parametrize(
    "payload",
    [
        b"\x0a\xff\xff\xff\xff\x0f",  # a length far past the end
        b"\x0b\x0c",  # a group wire type
        b"\x09\x01\x02",  # a fixed64 running off the end
        b"\x08" + b"\xff" * 11,  # a varint longer than 64 bits
        b"\x00\x01",  # field number 0
        field(1, field(2, field(2, field(1, b"\xff\xfe")))),  # a name not UTF-8
        field(1, field(2, field(2, field(9, field(1, field(6, b"\x01\x02")))))),  # packed 2 bytes
    ],
)
def test_malformed_input_raises_otlp_error(payload: bytes) -> None:
    with pytest.raises(OtlpError):
        decode_metrics_data(payload)


def test_random_garbage_never_raises_anything_but_otlp_error() -> None:
    rng = random.Random(714)
    for _ in range(3000):
        blob = bytearray(SAMPLE)
        for _ in range(rng.randint(1, 6)):
            blob[rng.randrange(len(blob))] = rng.randrange(256)
        for payload in (bytes(blob), rng.randbytes(rng.randint(0, 64))):
            with contextlib.suppress(OtlpError):
                decode_metrics_data(payload)
