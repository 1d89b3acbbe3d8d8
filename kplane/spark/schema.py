"""The columns of Spark's Kafka source, and the columns its sink takes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kplane.spark.options import OptionError

if TYPE_CHECKING:
    import pyarrow as pa

HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)


def read_schema(include_headers: bool) -> StructType:
    """key, value, topic, partition, offset, timestamp, timestampType (and headers)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


def arrow_schema(include_headers: bool) -> pa.Schema:
    """:func:`read_schema` in Arrow, as Spark expects a data source's record batches
    (timestamps in microseconds, UTC)."""
    import pyarrow as pa

    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        header = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
        fields.append(pa.field("headers", pa.list_(header)))
    return pa.schema(fields)


WRITE_COLUMNS: dict[str, tuple[type[DataType], ...]] = {
    "topic": (StringType,),
    "key": (StringType, BinaryType),
    "value": (StringType, BinaryType),
    "partition": (IntegerType,),
}


def check_write_schema(schema: StructType, topic_option: str | None) -> None:
    """Spark's Kafka sink rules: ``value`` (string or binary) is required; ``key`` (string or
    binary), ``topic`` (string), ``partition`` (int) and ``headers`` (array of struct<key
    string, value binary>) are optional, other columns ignored; without a ``topic`` column
    the ``topic`` option is required."""
    types = {f.name: f.dataType for f in schema.fields}
    if "value" not in types:
        raise OptionError("Required attribute 'value' not found")
    if "topic" not in types and not topic_option:
        raise OptionError(
            "topic option required when no 'topic' attribute is present. Use the topic "
            "option for setting a topic."
        )
    for name, allowed in WRITE_COLUMNS.items():
        if name in types and not isinstance(types[name], allowed):
            kinds = " or ".join(t.typeName() for t in allowed)
            raise OptionError(f"{name} attribute type must be a {kinds}, not {types[name]}")
    headers = types.get("headers")
    if headers is not None and not _headers_type(headers):
        raise OptionError(
            f"headers attribute type must be array<struct<key:string,value:binary>>, not "
            f"{headers.simpleString()}"
        )


def _headers_type(kind: DataType) -> bool:
    if not isinstance(kind, ArrayType) or not isinstance(kind.elementType, StructType):
        return False
    fields = {f.name: f.dataType for f in kind.elementType.fields}
    return (
        len(fields) == 2
        and isinstance(fields.get("key"), StringType)
        and isinstance(fields.get("value"), BinaryType)
    )
