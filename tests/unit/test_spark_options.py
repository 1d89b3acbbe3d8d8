"""The kplane Spark data source's pure parts: options as Spark's Kafka source reads them,
offset JSON, range splitting, the per-trigger limit, the sink's column rules."""

from __future__ import annotations

import pytest
from pyspark.sql.types import ArrayType, IntegerType, StringType, StructField, StructType

from kplane.spark.options import OptionError, ReadOptions, read_options, write_options
from kplane.spark.planning import OffsetRange, from_json, rate_limit, split_ranges, to_json
from kplane.spark.schema import check_write_schema, read_schema

BOOTSTRAP = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def batch(**options: str) -> ReadOptions:
    return read_options({**BOOTSTRAP, **options}, streaming=False)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "t", "minOffsetsPerTrigger": "5"}, "minOffsetsPerTrigger is not served"),
        ({"subscribe": "t", "maxTriggerDelay": "5s"}, "maxTriggerDelay is not served"),
        ({"subscribe": "t", "groupIdPrefix": "g"}, "groupIdPrefix is not served"),
        ({"subscribe": "t", "kafka.group.id": "g"}, "kafka.group.id is not served"),
        ({"subscribe": "t", "kafka.auto.offset.reset": "latest"}, "auto.offset.reset"),
        ({"subscribe": "t", "kafka.value.deserializer": "x"}, "value.deserializer"),
        ({}, "One of the following options must be specified"),
        ({"subscribe": "t", "assign": '{"t":[0]}'}, "Only one of the following options"),
        ({"subscribe": " , "}, "No topics to subscribe to"),
        ({"assign": "t-0"}, "No topicpartitions to assign"),
        ({"subscribePattern": "("}, "subscribePattern"),
        ({"subscribe": "t", "startingOffsets": "latest"}, "can't be latest"),
        ({"subscribe": "t", "endingOffsets": "earliest"}, "can't be earliest"),
        (
            {"subscribe": "t", "startingOffsets": '{"t":{"0":-1}}', "endingOffsets": "latest"},
            "can't be latest",
        ),
        (
            {
                "subscribe": "t",
                "startingOffsets": '{"t":{"0":5}}',
                "endingOffsets": '{"t":{"1":9}}',
            },
            "different partitions",
        ),
        (
            {
                "subscribe": "t",
                "startingOffsets": '{"t":{"0":9}}',
                "endingOffsets": '{"t":{"0":5}}',
            },
            "after the end",
        ),
        ({"subscribe": "t", "startingOffsets": "{oops"}, "expected e.g."),
        ({"subscribe": "t", "minPartitions": "0"}, "minPartitions must be positive"),
        ({"subscribe": "t", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
        ({"subscribe": "t", "kafka.security.protocol": "CARRIER_PIGEON"}, "security.protocol"),
    ],
)
def test_batch_options_refused(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        batch(**options)


def test_bootstrap_servers_required() -> None:
    with pytest.raises(OptionError, match=r"kafka\.bootstrap\.servers"):
        read_options({"subscribe": "t"}, streaming=False)


def test_streaming_refuses_ending_offsets_and_starts_at_latest() -> None:
    with pytest.raises(OptionError, match="not valid in streaming"):
        read_options({**BOOTSTRAP, "subscribe": "t", "endingOffsets": "latest"}, streaming=True)
    options = read_options({**BOOTSTRAP, "subscribe": "t"}, streaming=True)
    assert options.starting.kind == "latest"


def test_read_options_as_spark_reads_them() -> None:
    options = read_options(
        {
            **BOOTSTRAP,
            "subscribe": "a, b",
            "startingoffsets": '{"a":{"0":23,"1":-2},"b":{"0":-2}}',
            "startingTimestamp": "1700000000000",
            "kafka.isolation.level": "read_committed",
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.username": "u",
            "kafka.sasl.password": "p",
            "maxOffsetsPerTrigger": "100",
            "includeHeaders": "true",
            "failOnDataLoss": "false",
        },
        streaming=True,
    )
    assert options.topics == ("a", "b")
    # startingTimestamp wins over startingOffsets, as in Spark
    assert (options.starting.kind, options.starting.timestamp) == ("timestamp", 1_700_000_000_000)
    assert options.isolation_level == 1
    assert options.client["security.protocol"] == "SASL_SSL"
    assert (options.max_offsets_per_trigger, options.include_headers) == (100, True)
    assert options.fail_on_data_loss is False
    json_start = batch(subscribe="a", startingOffsets='{"a":{"0":23,"1":-2}}').starting
    assert json_start.offsets == {("a", 0): 23, ("a", 1): -2}
    assigned = batch(assign='{"b":[2,0],"a":[1]}')
    assert assigned.assigned == (("a", 1), ("b", 0), ("b", 2))


def test_write_options_idempotent_by_default() -> None:
    assert write_options({**BOOTSTRAP, "topic": " t "}).topic == "t"
    assert write_options(BOOTSTRAP).client["enable.idempotence"] == "true"
    plain = write_options({**BOOTSTRAP, "kafka.enable.idempotence": "false"})
    assert plain.client["enable.idempotence"] == "false"
    with pytest.raises(OptionError, match=r"value\.serializer"):
        write_options({**BOOTSTRAP, "kafka.value.serializer": "x"})


def test_offset_json_round_trip() -> None:
    offsets = {("t", 0): 5, ("t", 10): 7, ("u", 1): 0}
    assert to_json(offsets) == {"t": {"0": 5, "10": 7}, "u": {"1": 0}}
    assert from_json(to_json(offsets)) == offsets


def test_split_ranges() -> None:
    ranges = [OffsetRange("t", 0, 0, 100), OffsetRange("t", 1, 0, 300), OffsetRange("t", 2, 5, 5)]
    assert split_ranges(ranges) == ranges[:2]
    pieces = split_ranges(ranges, min_partitions=8)
    assert [(p.partition, p.start, p.end) for p in pieces] == [
        (0, 0, 50),
        (0, 50, 100),
        (1, 0, 50),
        (1, 50, 100),
        (1, 100, 150),
        (1, 150, 200),
        (1, 200, 250),
        (1, 250, 300),
    ]
    capped = split_ranges(ranges, max_records=120)
    assert [p.size for p in capped] == [100, 100, 100, 100]
    assert split_ranges([OffsetRange("t", 0, 0, 2)], min_partitions=5) == [
        OffsetRange("t", 0, 0, 1),
        OffsetRange("t", 0, 1, 2),
    ]


def test_rate_limit_shares_in_proportion() -> None:
    start = {("t", 0): 0, ("t", 1): 10}
    latest = {("t", 0): 300, ("t", 1): 110, ("t", 2): 1}
    ends = rate_limit({**start, ("t", 2): 0}, latest, 40)
    assert ends == {("t", 0): 29, ("t", 1): 19, ("t", 2): 1}
    assert rate_limit(start, {("t", 0): 5, ("t", 1): 12}, 40) == {("t", 0): 5, ("t", 1): 12}


def test_write_schema_rules() -> None:
    def schema(*fields: tuple[str, object]) -> StructType:
        return StructType([StructField(n, t) for n, t in fields])  # type: ignore[arg-type]

    check_write_schema(schema(("value", StringType())), "t")
    check_write_schema(schema(("value", StringType()), ("topic", StringType())), None)
    with pytest.raises(OptionError, match="Required attribute 'value'"):
        check_write_schema(schema(("key", StringType())), "t")
    with pytest.raises(OptionError, match="topic option required"):
        check_write_schema(schema(("value", StringType())), None)
    with pytest.raises(OptionError, match="partition attribute type"):
        check_write_schema(schema(("value", StringType()), ("partition", StringType())), "t")
    with pytest.raises(OptionError, match="headers attribute type"):
        check_write_schema(
            schema(("value", StringType()), ("headers", ArrayType(IntegerType()))), "t"
        )
    assert read_schema(True).fieldNames()[-1] == "headers"


def test_arrow_schema_is_the_one_spark_expects() -> None:
    from pyspark.sql.pandas.types import to_arrow_schema

    from kplane.spark.schema import arrow_schema

    for headers in (False, True):
        assert arrow_schema(headers).equals(to_arrow_schema(read_schema(headers), timezone="UTC"))
