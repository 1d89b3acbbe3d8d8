"""OpenTelemetry's ``MetricsData`` (OTLP metrics v1, protobuf), decoded sans-IO: what a
KIP-714 PushTelemetry carries.

Only what the broker exposes is read: each ``ResourceMetrics``' resource attributes, and
each metric's name with its gauge, sum or histogram data points (attributes, value,
temporality, monotonicity); every other field, and exponential histograms and summaries, are
skipped by their wire type. Nothing is trusted beyond the bytes present: every length is
checked against the bytes left, varints are bounded by :func:`read_unsigned_varint`, group
wire types and fixed fields running off the end are refused, so bad input raises
:class:`OtlpError` and never reads out of bounds or recurses deeper than the schema.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, replace
from enum import Enum

from kplane.protocol.varint import VarintError, read_unsigned_varint

__all__ = (
    "HistogramPoint",
    "Metric",
    "MetricKind",
    "MetricsData",
    "NumberPoint",
    "OtlpError",
    "ResourceMetrics",
    "decode_metrics_data",
)

Attributes = tuple[tuple[str, str], ...]
"""Key-value attributes, values as text (a bool is ``true``/``false``)."""

_VARINT, _FIXED64, _LEN, _START_GROUP, _END_GROUP, _FIXED32 = 0, 1, 2, 3, 4, 5
_DOUBLE = struct.Struct("<d")
_U64 = struct.Struct("<Q")
_I64 = struct.Struct("<q")
_DELTA = 1  # AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA


class OtlpError(ValueError):
    """The bytes are not a ``MetricsData`` message."""


class MetricKind(Enum):
    GAUGE = "gauge"
    SUM = "sum"
    HISTOGRAM = "histogram"


@dataclass(frozen=True, slots=True)
class NumberPoint:
    """A gauge's or sum's data point."""

    attributes: Attributes
    value: float
    time_unix_nano: int


@dataclass(frozen=True, slots=True)
class HistogramPoint:
    """A histogram's data point: ``bucket_counts`` has one more entry than ``bounds``."""

    attributes: Attributes
    count: int
    sum: float | None
    bucket_counts: tuple[int, ...]
    bounds: tuple[float, ...]
    time_unix_nano: int


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    kind: MetricKind
    delta: bool
    """Delta temporality (a sum's or histogram's points count since the last push)."""
    monotonic: bool
    points: tuple[NumberPoint, ...] = ()
    histogram_points: tuple[HistogramPoint, ...] = ()


@dataclass(frozen=True, slots=True)
class ResourceMetrics:
    resource_attributes: Attributes
    metrics: tuple[Metric, ...]


@dataclass(frozen=True, slots=True)
class MetricsData:
    resource_metrics: tuple[ResourceMetrics, ...]

    def metrics(self) -> Iterator[Metric]:
        for resource in self.resource_metrics:
            yield from resource.metrics


def decode_metrics_data(data: bytes | memoryview) -> MetricsData:
    """The ``MetricsData`` in ``data``; :class:`OtlpError` when it is not one."""
    view = memoryview(data).cast("B")
    try:
        return MetricsData(
            tuple(_resource_metrics(v) for n, t, v in _fields(view) if n == 1 and t == _LEN)
        )
    except (VarintError, IndexError, UnicodeDecodeError) as exc:
        raise OtlpError(f"malformed OTLP metrics: {exc}") from None


def _fields(buf: memoryview) -> Iterator[tuple[int, int, memoryview | int]]:
    """(field number, wire type, value) of each field of one message: an int for varint
    and fixed fields, the bytes of a length-delimited one."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = read_unsigned_varint(buf, pos, 64)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise OtlpError("field number 0")
        if wire == _VARINT:
            value, pos = read_unsigned_varint(buf, pos, 64)
            yield number, wire, value
        elif wire == _LEN:
            size, pos = read_unsigned_varint(buf, pos, 64)
            if size > end - pos:
                raise OtlpError(f"field {number} declares {size} bytes, {end - pos} left")
            yield number, wire, buf[pos : pos + size]
            pos += size
        elif wire in (_FIXED64, _FIXED32):
            width = 8 if wire == _FIXED64 else 4
            if width > end - pos:
                raise OtlpError(f"field {number} runs off the end")
            yield number, wire, int.from_bytes(buf[pos : pos + width], "little")
            pos += width
        else:
            raise OtlpError(f"wire type {wire} of field {number}")


def _message(value: memoryview | int, wire: int) -> memoryview:
    if wire != _LEN or isinstance(value, int):
        raise OtlpError("a message field is not length-delimited")
    return value


def _text(value: memoryview | int, wire: int) -> str:
    return bytes(_message(value, wire)).decode("utf-8")


def _double(value: memoryview | int) -> float:
    return float(_DOUBLE.unpack(_U64.pack(int(value)))[0])


def _resource_metrics(buf: memoryview | int) -> ResourceMetrics:
    attributes: Attributes = ()
    metrics: list[Metric] = []
    for number, wire, value in _fields(_message(buf, _LEN)):
        if number == 1:  # Resource
            attributes = tuple(
                _key_value(v, t) for n, t, v in _fields(_message(value, wire)) if n == 1
            )
        elif number == 2:  # ScopeMetrics
            for n, t, v in _fields(_message(value, wire)):
                if n == 2:
                    metric = _metric(_message(v, t))
                    if metric is not None:
                        metrics.append(metric)
    return ResourceMetrics(attributes, tuple(metrics))


def _metric(buf: memoryview) -> Metric | None:
    name = ""
    found: Metric | None = None
    for number, wire, value in _fields(buf):
        if number == 1:
            name = _text(value, wire)
        elif number == 5:  # Gauge
            found = _numbers(MetricKind.GAUGE, _message(value, wire))
        elif number == 7:  # Sum
            found = _numbers(MetricKind.SUM, _message(value, wire))
        elif number == 9:  # Histogram
            found = _histogram(_message(value, wire))
    if found is None:
        return None  # no data of a kind the broker exposes
    return replace(found, name=name)


def _numbers(kind: MetricKind, buf: memoryview) -> Metric:
    points: list[NumberPoint] = []
    delta = monotonic = False
    for number, wire, value in _fields(buf):
        if number == 1:
            points.append(_number_point(_message(value, wire)))
        elif number == 2 and wire == _VARINT:
            delta = value == _DELTA
        elif number == 3 and wire == _VARINT:
            monotonic = bool(value)
    return Metric("", kind, delta, monotonic, tuple(points))


def _number_point(buf: memoryview) -> NumberPoint:
    attributes: list[tuple[str, str]] = []
    value = 0.0
    when = 0
    for number, wire, field in _fields(buf):
        if number == 7:
            attributes.append(_key_value(field, wire))
        elif number == 3 and wire == _FIXED64:
            when = int(field)
        elif number == 4 and wire == _FIXED64:  # as_double
            value = _double(field)
        elif number == 6 and wire == _FIXED64:  # as_int (sfixed64)
            value = float(_I64.unpack(_U64.pack(int(field)))[0])
    return NumberPoint(tuple(attributes), value, when)


def _histogram(buf: memoryview) -> Metric:
    points: list[HistogramPoint] = []
    delta = False
    for number, wire, value in _fields(buf):
        if number == 1:
            points.append(_histogram_point(_message(value, wire)))
        elif number == 2 and wire == _VARINT:
            delta = value == _DELTA
    return Metric("", MetricKind.HISTOGRAM, delta, True, (), tuple(points))


def _histogram_point(buf: memoryview) -> HistogramPoint:
    attributes: list[tuple[str, str]] = []
    count, total, when = 0, None, 0
    buckets: list[int] = []
    bounds: list[float] = []
    for number, wire, field in _fields(buf):
        if number == 9:
            attributes.append(_key_value(field, wire))
        elif number == 3 and wire == _FIXED64:
            when = int(field)
        elif number == 4 and wire == _FIXED64:
            count = int(field)
        elif number == 5 and wire == _FIXED64:
            total = _double(field)
        elif number == 6:
            buckets.extend(_packed_fixed64(field, wire))
        elif number == 7:
            bounds.extend(_double(v) for v in _packed_fixed64(field, wire))
    if buckets and len(buckets) != len(bounds) + 1:
        raise OtlpError(f"histogram has {len(buckets)} buckets for {len(bounds)} bounds")
    return HistogramPoint(tuple(attributes), count, total, tuple(buckets), tuple(bounds), when)


def _packed_fixed64(value: memoryview | int, wire: int) -> list[int]:
    """A repeated fixed64 field: packed (length-delimited) or one value."""
    if wire == _FIXED64:
        return [int(value)]
    raw = _message(value, wire)
    if len(raw) % 8:
        raise OtlpError("packed fixed64 field of a length not a multiple of 8")
    return [v for (v,) in _U64.iter_unpack(raw)]


def _key_value(buf: memoryview | int, wire: int) -> tuple[str, str]:
    key, text = "", ""
    for number, w, value in _fields(_message(buf, wire)):
        if number == 1:
            key = _text(value, w)
        elif number == 2:
            text = _any_value(_message(value, w))
    return key, text


def _any_value(buf: memoryview) -> str:
    """An ``AnyValue`` as text; arrays, lists and bytes as their kind's name."""
    text = ""
    for number, wire, value in _fields(buf):
        if number == 1:
            text = _text(value, wire)
        elif number == 2 and wire == _VARINT:
            text = "true" if value else "false"
        elif number == 3 and wire == _VARINT:
            text = str(_I64.unpack(_U64.pack(int(value)))[0])
        elif number == 4 and wire == _FIXED64:
            text = repr(_double(value))
        elif number in (5, 6, 7):
            text = ("array", "kvlist", "bytes")[number - 5]
    return text
