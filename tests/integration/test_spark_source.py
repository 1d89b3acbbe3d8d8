"""The ``kplane`` Spark data source on local Spark against real brokers: batch and streaming
reads, batch and streaming writes read back by confluent-kafka, SASL_SSL by ``kafka.*``
options. One SparkSession for the module (its start-up is most of the cost)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka import TopicPartition

from kplane.client.admin import Admin, NewTopic
from kplane.client.kafka_client import KafkaClient
from kplane.common.certs import PkiFiles
from kplane.common.network.config import ClientConfig
from kplane.spark import register
from kplane.testing.plugin import RunningBroker
from kplane.tools.loadtest.controller import ControlResult
from kplane.tools.loadtest.metrics import Sample
from kplane.tools.loadtest.publish import publish_results
from kplane.tools.loadtest.results import ScenarioRun
from kplane.tools.report import pipeline as report
from kplane.tools.report.from_topic import build_report_from_topic

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark")]

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret";'
)


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """One local Spark for the module, the kplane data source registered."""
    with report.spark_session("local[2]") as session:
        register(session)
        yield session


def produce(bootstrap: str, topic: str, records: list[tuple[int, bytes]], **conf: str) -> None:
    """(partition, value) records, key b"k<value>", one header each; all acknowledged."""
    producer = ConfluentProducer({"bootstrap.servers": bootstrap, "acks": "all", **conf})
    for partition, value in records:
        producer.produce(
            topic, value, key=b"k" + value, partition=partition, headers=[("h", value[-2:])]
        )
    assert producer.flush(30) == 0


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int) -> list[Any]:
    """Every record of ``topic`` read by confluent-kafka from the start."""
    consumer = ConfluentConsumer(
        {"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    found: list[Any] = []
    try:
        for _ in range(120):
            found += [m for m in consumer.consume(500, timeout=0.5) if m.error() is None]
            if len(found) >= expected:
                break
        found += [m for m in consumer.consume(500, timeout=0.5) if m.error() is None]
    finally:
        consumer.close()
    return found


def source(spark: Any, broker: RunningBroker, **options: str) -> Any:
    reader = spark.read.format("kplane").option("kafka.bootstrap.servers", broker.bootstrap())
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_batch_read_gives_every_record_once(spark: Any, broker: RunningBroker) -> None:
    broker.create_topic("three", partitions=3)
    sent = [(i % 3, f"value-{i:04d}".encode()) for i in range(300)]
    produce(broker.bootstrap(), "three", sent)
    frame = source(spark, broker, subscribe="three", includeHeaders="true")
    assert frame.dtypes == [
        ("key", "binary"),
        ("value", "binary"),
        ("topic", "string"),
        ("partition", "int"),
        ("offset", "bigint"),
        ("timestamp", "timestamp"),
        ("timestampType", "int"),
        ("headers", "array<struct<key:string,value:binary>>"),
    ]
    rows = frame.collect()
    assert len(rows) == 300
    assert sorted((r.partition, bytes(r.value)) for r in rows) == sorted(sent)
    assert {(r.partition, r.offset) for r in rows} == {(p, o) for p in range(3) for o in range(100)}
    for row in rows:
        assert (row.topic, bytes(row.key), row.timestampType) == (
            "three",
            b"k" + bytes(row.value),
            0,
        )
        assert [(h.key, bytes(h.value)) for h in row.headers] == [("h", bytes(row.value)[-2:])]
        assert row.timestamp.year >= 2025
    split = source(spark, broker, subscribe="three", minPartitions="6")
    assert split.rdd.getNumPartitions() == 6
    assert split.count() == 300


def test_starting_and_ending_offsets_by_json(spark: Any, broker: RunningBroker) -> None:
    broker.create_topic("ranged", partitions=3)
    produce(broker.bootstrap(), "ranged", [(i % 3, b"r%04d" % i) for i in range(90)])
    frame = source(
        spark,
        broker,
        subscribe="ranged",
        startingOffsets=json.dumps({"ranged": {"0": 5, "1": -2, "2": 28}}),
        endingOffsets=json.dumps({"ranged": {"0": 12, "1": 3, "2": -1}}),
    )
    got = sorted((r.partition, r.offset) for r in frame.select("partition", "offset").collect())
    want = [(0, o) for o in range(5, 12)] + [(1, o) for o in range(3)] + [(2, 28), (2, 29)]
    assert got == want
    assigned = source(spark, broker, assign=json.dumps({"ranged": [1]}))
    assert {r.partition for r in assigned.select("partition").collect()} == {1}
    assert assigned.count() == 30
    broker.create_topic("timed", partitions=1)
    producer = ConfluentProducer({"bootstrap.servers": broker.bootstrap()})
    for i in range(10):
        producer.produce("timed", b"t%d" % i, partition=0, timestamp=1_700_000_000_000 + 1000 * i)
    assert producer.flush(30) == 0
    between = source(
        spark,
        broker,
        subscribe="timed",
        startingTimestamp=str(1_700_000_004_500),
        endingOffsetsByTimestamp=json.dumps({"timed": {"0": 1_700_000_008_000}}),
    )
    assert sorted(r.offset for r in between.select("offset").collect()) == [5, 6, 7]


def test_refused_option_is_an_error(spark: Any, broker: RunningBroker) -> None:
    with pytest.raises(Exception, match="minOffsetsPerTrigger is not served"):
        source(spark, broker, subscribe="x", minOffsetsPerTrigger="10").collect()
    with pytest.raises(Exception, match="startingOffsets can't be latest"):
        source(spark, broker, subscribe="x", startingOffsets="latest").collect()


def test_fail_on_data_loss(spark: Any, broker: RunningBroker) -> None:
    broker.create_topic("lossy", partitions=1)
    produce(broker.bootstrap(), "lossy", [(0, b"l%03d" % i) for i in range(50)])

    async def delete() -> None:
        client = KafkaClient(
            ClientConfig.from_properties({"bootstrap.servers": broker.bootstrap()})
        )
        await client.start()
        try:
            await Admin(client).delete_records({("lossy", 0): 20})
        finally:
            await client.close()

    asyncio.run(delete())
    from_zero = {"startingOffsets": json.dumps({"lossy": {"0": 0}})}
    with pytest.raises(Exception, match="were deleted"):
        source(spark, broker, subscribe="lossy", **from_zero).collect()
    rows = source(spark, broker, subscribe="lossy", failOnDataLoss="false", **from_zero)
    assert sorted(r.offset for r in rows.select("offset").collect()) == list(range(20, 50))


def test_streaming_restart_reads_exactly_the_new_records(
    spark: Any, broker: RunningBroker, tmp_path: Path
) -> None:
    broker.create_topic("stream", partitions=2)
    produce(broker.bootstrap(), "stream", [(i % 2, b"s%04d" % i) for i in range(100)])
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run(**options: str) -> Any:
        reader = (
            spark.readStream.format("kplane")
            .option("kafka.bootstrap.servers", broker.bootstrap())
            .option("subscribe", "stream")
            .option("startingOffsets", "earliest")
        )
        for key, value in options.items():
            reader = reader.option(key, value)
        query = (
            reader.load()
            .selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(240)
        assert query.exception() is None
        return query

    run()
    assert spark.read.parquet(str(out)).count() == 100
    produce(broker.bootstrap(), "stream", [(i % 2, b"s%04d" % i) for i in range(100, 160)])
    query = run(maxOffsetsPerTrigger="20")
    rows = spark.read.parquet(str(out)).collect()
    assert sorted(r.value for r in rows) == [f"s{i:04d}" for i in range(160)]
    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(batches) == 60 and max(batches) <= 20


def test_batch_write_read_back_by_confluent(spark: Any, broker: RunningBroker) -> None:
    broker.create_topic("written", partitions=2)
    rows = [(f"key-{i}", f"value-{i}", i % 2, [("h", b"%d" % i)]) for i in range(40)]
    frame = spark.createDataFrame(
        rows,
        "key string, value string, partition int, headers array<struct<key:string,value:binary>>",
    )
    frame.write.format("kplane").option("kafka.bootstrap.servers", broker.bootstrap()).option(
        "topic", "written"
    ).mode("append").save()
    found = consume_all(broker.bootstrap(), "written", 2, 40)
    got = sorted((m.key().decode(), m.value().decode(), m.partition(), m.headers()) for m in found)
    assert got == sorted((k, v, p, [("h", h[0][1])]) for k, v, p, h in rows)


def test_streaming_write_read_back_by_confluent(
    spark: Any, broker: RunningBroker, tmp_path: Path
) -> None:
    broker.create_topic("in", partitions=2)
    broker.create_topic("out", partitions=1)
    produce(broker.bootstrap(), "in", [(i % 2, b"m%03d" % i) for i in range(50)])
    query = (
        spark.readStream.format("kplane")
        .option("kafka.bootstrap.servers", broker.bootstrap())
        .option("subscribe", "in")
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("key", "upper(CAST(value AS STRING)) AS value", "'out' AS topic")
        .writeStream.format("kplane")
        .option("kafka.bootstrap.servers", broker.bootstrap())
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(240)
    assert query.exception() is None
    found = consume_all(broker.bootstrap(), "out", 1, 50)
    assert sorted(m.value() for m in found) == [b"M%03d" % i for i in range(50)]
    assert {m.key() for m in found} == {b"km%03d" % i for i in range(50)}


def test_sasl_ssl_through_kafka_options(
    spark: Any, broker_factory: Callable[..., RunningBroker], pki: PkiFiles
) -> None:
    secure = broker_factory(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(pki.broker_p12),
            "ssl.keystore.password": pki.password,
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.jaas.config": JAAS,
        }
    )
    secure.create_topic("secret", partitions=1)
    client = {
        "kafka.bootstrap.servers": secure.bootstrap("SASL_SSL"),
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": JAAS.replace(' user_admin="admin-secret"', ""),
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(pki.truststore_pem),
    }
    frame = spark.createDataFrame([(f"v{i}",) for i in range(10)], "value string")
    frame.write.format("kplane").options(**client).option("topic", "secret").mode("append").save()
    read = spark.read.format("kplane").options(**client).option("subscribe", "secret").load()
    assert sorted(bytes(r.value) for r in read.collect()) == [b"v%d" % i for i in range(10)]


def test_loadtest_results_through_a_topic_into_the_report(
    spark: Any, broker: RunningBroker, tmp_path: Path
) -> None:
    """kplane loadtest --to-topic publishes what kplane report --from-topic analyses."""
    start = 1_700_000_000.0
    runs = [
        ScenarioRun(
            name,
            None,  # type: ignore[arg-type]  # the results never read the target
            {},
            10.0,
            control=[
                ControlResult("UpdateMetadata", start + i * 0.05, scale * (1 + i % 17), None)
                for i in range(200)
            ],
            samples=[Sample(start + i, "RequestQueueSize", scale * i) for i in range(10)],
        )
        for name, scale in (("shared", 40.0), ("separated", 2.0))
    ]
    broker.create_topic("results", partitions=2)
    published = publish_results(broker.bootstrap(), "results", runs, {"duration_s": 10})
    assert published == 2 * 200 + 2 * 10 + 1
    out = tmp_path / "report"
    result = build_report_from_topic(broker.bootstrap(), "results", out, "local[2]")
    for name, scale in (("shared", 40.0), ("separated", 2.0)):
        latencies = [scale * (1 + i % 17) for i in range(200)]
        assert result.control_p99[name] == pytest.approx(float(np.percentile(latencies, 99)))
    assert json.loads((out / "summary.json").read_text()) == {"duration_s": 10}
    assert "| shared | control | UpdateMetadata | 200 |" in (out / "report.md").read_text()


def test_against_a_replicated_cluster(spark: Any, kafka_cluster: Callable[..., Any]) -> None:
    """Replication factor 3 on three brokers: a write, then reads before and after the
    leaders move."""
    cluster = kafka_cluster(brokers=3)

    async def create() -> None:
        config = ClientConfig.from_properties({"bootstrap.servers": cluster.bootstrap_servers})
        client = KafkaClient(config)
        await client.start()
        try:
            errors = await Admin(client).create_topics([NewTopic("replicated", 2, 3)])
            assert errors == {"replicated": None}
        finally:
            await client.close()

    asyncio.run(create())
    cluster.broker(0).wait_for_partitions("replicated", 2)
    options = {"kafka.bootstrap.servers": cluster.bootstrap_servers}
    frame = spark.createDataFrame(
        [(f"r{i}", i % 2) for i in range(60)], "value string, partition int"
    )
    frame.write.format("kplane").options(**options).option("topic", "replicated").mode(
        "append"
    ).save()
    read = spark.read.format("kplane").options(**options).option("subscribe", "replicated").load()
    assert sorted(bytes(r.value) for r in read.collect()) == sorted(b"r%d" % i for i in range(60))
    for partition in (0, 1):
        leader = cluster.broker(0).topic_metadata("replicated").partitions[partition].leader_id
        cluster.move_leader("replicated", partition, (leader + 1) % 3)
    assert read.count() == 60


def test_aborted_transactions_as_sparks_source_reads_them(
    spark: Any, broker: RunningBroker
) -> None:
    """read_uncommitted (Spark's default) gives an aborted transaction's records too;
    kafka.isolation.level=read_committed leaves them out."""
    broker.create_topic("txn", partitions=1)
    producer = ConfluentProducer(
        {"bootstrap.servers": broker.bootstrap(), "transactional.id": "spark-txn"}
    )
    producer.init_transactions(30)
    for outcome in ("commit", "abort", "commit"):
        producer.begin_transaction()
        for i in range(5):
            producer.produce("txn", f"{outcome}-{i}".encode(), partition=0)
        producer.flush(30)
        if outcome == "commit":
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    everything = source(spark, broker, subscribe="txn")
    assert everything.count() == 15
    committed = source(
        spark, broker, subscribe="txn", **{"kafka.isolation.level": "read_committed"}
    )
    values = sorted(bytes(r.value) for r in committed.select("value").collect())
    assert values == sorted([b"commit-%d" % i for i in range(5)] * 2)
