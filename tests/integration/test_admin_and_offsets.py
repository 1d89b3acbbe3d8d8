"""Topic administration, offsets lookups, Fetch's waiting and size limits, and the metrics page.

Admin calls go through confluent-kafka's AdminClient (librdkafka); what the broker answered is
checked both in the client's result and in a Metadata request on the wire. Fetch behaviour is
checked with raw Fetch v12 requests, whose answers are decoded into records.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kio.schema.list_offsets.v7.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.metadata.v12.request import MetadataRequest
from kio.static.primitive import i8, i32, i64
from prometheus_client.parser import text_string_to_metric_families

from kplane.protocol.errors import ErrorCode
from kplane.protocol.records import Record, build_batch, iter_all_records, read_partial_batches
from kplane.testing.plugin import RunningBroker
from kplane.testing.wire import WireClient
from tests.integration.helpers import fetch_partition, fetch_request, produce, recs

DEADLINE_S = 30.0


# helpers ------------------------------------------------------------------------------------
def _admin(broker: RunningBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap()})


def all_topics(broker: RunningBroker) -> set[str]:
    with broker.wire() as client:
        response = client.request(
            MetadataRequest(
                topics=None,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        )
    return {t.name for t in response.topics}


def wait_for_absence(broker: RunningBroker, topic: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while topic in all_topics(broker):
        assert time.monotonic() < deadline, f"{topic} still in metadata"
        time.sleep(0.05)


def admin_error(future: Any) -> int:
    """The Kafka error code a failed admin future carries."""
    with pytest.raises(KafkaException) as info:
        future.result(timeout=30)
    return info.value.args[0].code()


def produce_wire(client: WireClient, topic: str, records: list[Record], partition: int = 0) -> int:
    """Produce one batch of ``records`` (acks=1); returns its base offset."""
    part = produce(client, topic, build_batch(records), partition=partition, acks=1)
    assert part.error_code == ErrorCode.none, part
    return int(part.base_offset)


def list_offset(broker: RunningBroker, topic: str, timestamp: int, partition: int = 0) -> Any:
    with broker.wire() as client:
        response = client.request(
            ListOffsetsRequest(
                replica_id=i32(-1),
                isolation_level=i8(0),
                topics=(
                    ListOffsetsTopic(
                        name=topic,
                        partitions=(
                            ListOffsetsPartition(
                                partition_index=i32(partition), timestamp=i64(timestamp)
                            ),
                        ),
                    ),
                ),
            )
        )
    return response.topics[0].partitions[0]


# CreateTopics -------------------------------------------------------------------------------
def test_create_topics_explicit_defaults_and_replica_assignment(broker_factory) -> None:
    broker = broker_factory({"num.partitions": "5"})
    admin = _admin(broker)
    futures = admin.create_topics(
        [
            NewTopic("explicit", num_partitions=3, replication_factor=1),
            NewTopic("defaults"),  # -1 partitions and -1 replication factor: the broker's
            NewTopic("assigned", num_partitions=2, replica_assignment=[[0], [0]]),
        ],
        operation_timeout=10,
    )
    for topic, future in futures.items():
        assert future.result(timeout=30) is None, topic
    explicit = broker.wait_for_partitions("explicit", 3)
    defaults = broker.wait_for_partitions("defaults", 5)
    assigned = broker.wait_for_partitions("assigned", 2)
    for found in (explicit, defaults, assigned):
        assert [p.partition_index for p in found.partitions] == list(range(len(found.partitions)))
        assert all(list(p.replica_nodes) == [0] for p in found.partitions)
        assert all(list(p.isr_nodes) == [0] for p in found.partitions)
        assert found.topic_id is not None
    # Real clients can use what was created.
    listed = admin.list_topics(timeout=10).topics
    assert {t: len(listed[t].partitions) for t in ("explicit", "defaults", "assigned")} == {
        "explicit": 3,
        "defaults": 5,
        "assigned": 2,
    }


def test_create_topics_refusals(broker: RunningBroker) -> None:
    admin = _admin(broker)
    broker.create_topic("taken")
    futures = admin.create_topics(
        [
            NewTopic("bad name!", num_partitions=1, replication_factor=1),
            NewTopic("three-replicas", num_partitions=1, replication_factor=3),
            NewTopic("taken", num_partitions=1, replication_factor=1),
            NewTopic("zero-partitions", num_partitions=0, replication_factor=1),
        ],
        operation_timeout=10,
    )
    assert admin_error(futures["bad name!"]) == KafkaError.TOPIC_EXCEPTION
    assert admin_error(futures["three-replicas"]) == KafkaError.INVALID_REPLICATION_FACTOR
    assert admin_error(futures["taken"]) == KafkaError.TOPIC_ALREADY_EXISTS
    assert admin_error(futures["zero-partitions"]) == KafkaError.INVALID_PARTITIONS
    assert all_topics(broker) == {"taken"}
    # The existing topic kept its single partition.
    assert len(broker.wait_for_partitions("taken", 1).partitions) == 1


def test_create_topics_validate_only_creates_nothing(broker: RunningBroker) -> None:
    admin = _admin(broker)
    futures = admin.create_topics(
        [
            NewTopic("dry-run", num_partitions=4, replication_factor=1),
            NewTopic("dry run bad", num_partitions=1, replication_factor=1),
        ],
        operation_timeout=10,
        validate_only=True,
    )
    assert futures["dry-run"].result(timeout=30) is None
    assert admin_error(futures["dry run bad"]) == KafkaError.TOPIC_EXCEPTION
    assert "dry-run" not in all_topics(broker)
    assert broker.topic_metadata("dry-run").error_code == ErrorCode.unknown_topic_or_partition
    # And the name is still free for a real creation.
    broker.create_topic("dry-run", 4)


# DeleteTopics -------------------------------------------------------------------------------
def test_delete_topics(broker: RunningBroker) -> None:
    admin = _admin(broker)
    broker.create_topic("doomed", 2)
    with broker.wire() as client:
        produce_wire(client, "doomed", recs("d", 3))
    futures = admin.delete_topics(["doomed", "never-existed"], operation_timeout=10)
    assert futures["doomed"].result(timeout=30) is None
    assert admin_error(futures["never-existed"]) == KafkaError.UNKNOWN_TOPIC_OR_PART
    wait_for_absence(broker, "doomed")
    assert broker.topic_metadata("doomed").error_code == ErrorCode.unknown_topic_or_partition
    assert "doomed" not in admin.list_topics(timeout=10).topics
    # A topic created again under the same name starts empty, with a new id.
    broker.create_topic("doomed", 1)
    with broker.wire() as client:
        part = fetch_partition(client, fetch_request("doomed", 0))
    assert part.error_code == ErrorCode.none
    assert part.high_watermark == 0
    assert list(iter_all_records(part.records or b"")) == []


# CreatePartitions ---------------------------------------------------------------------------
def test_create_partitions_grow_and_shrink_refused(broker: RunningBroker) -> None:
    admin = _admin(broker)
    broker.create_topic("growing", 1)
    futures = admin.create_partitions([NewPartitions("growing", 4)], operation_timeout=10)
    assert futures["growing"].result(timeout=30) is None
    broker.wait_for_partitions("growing", 4)

    futures = admin.create_partitions([NewPartitions("growing", 2)], operation_timeout=10)
    assert admin_error(futures["growing"]) == KafkaError.INVALID_PARTITIONS
    futures = admin.create_partitions([NewPartitions("growing", 4)], operation_timeout=10)
    assert admin_error(futures["growing"]) == KafkaError.INVALID_PARTITIONS
    futures = admin.create_partitions([NewPartitions("no-such", 3)], operation_timeout=10)
    assert admin_error(futures["no-such"]) == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert len(broker.wait_for_partitions("growing", 4).partitions) == 4

    # The new partition takes records.
    with broker.wire() as client:
        assert produce_wire(client, "growing", recs("n", 2), partition=3) == 0
        part = fetch_partition(client, fetch_request("growing", 0, partition=3))
    assert [r.value for r in iter_all_records(part.records)] == [r.value for r in recs("n", 2)]


# Auto-creation through Metadata -------------------------------------------------------------
def test_metadata_auto_creates_topics_when_enabled(broker_factory) -> None:
    broker = broker_factory({"auto.create.topics.enable": "true", "num.partitions": "2"})
    first = broker.topic_metadata("auto-made", allow_auto=True)
    assert first.error_code in (ErrorCode.none, ErrorCode.leader_not_available), first
    broker.wait_for_partitions("auto-made", 2)
    # A client that does not allow creation does not create.
    assert broker.topic_metadata("not-asked").error_code == ErrorCode.unknown_topic_or_partition
    assert "not-asked" not in all_topics(broker)
    # An illegal name is refused, not created.
    assert broker.topic_metadata("bad name!", allow_auto=True).error_code == (
        ErrorCode.invalid_topic_exception
    )
    # librdkafka's producer asks for auto-creation and its record lands.
    producer = Producer({"bootstrap.servers": broker.bootstrap(), "allow.auto.create.topics": True})
    errors: list[Any] = []
    producer.produce("auto-by-producer", b"hello", on_delivery=lambda err, _m: errors.append(err))
    assert producer.flush(30) == 0
    assert errors == [None]
    broker.wait_for_partitions("auto-by-producer", 2)


def test_metadata_refuses_unknown_topics_when_auto_create_disabled(broker_factory) -> None:
    broker = broker_factory({"auto.create.topics.enable": "false"})
    found = broker.topic_metadata("wanted", allow_auto=True)
    assert found.error_code == ErrorCode.unknown_topic_or_partition
    assert found.partitions == ()
    assert "wanted" not in all_topics(broker)
    assert "wanted" not in broker.topics()


# ListOffsets --------------------------------------------------------------------------------
def test_list_offsets_earliest_latest_and_by_timestamp(broker: RunningBroker) -> None:
    topic = "timed"
    broker.create_topic(topic, 1)
    base = 1_700_000_000_000
    producer = Producer({"bootstrap.servers": broker.bootstrap(), "linger.ms": 50})
    for i in range(10):
        # One record per second of CreateTime: base, base+1000, ... base+9000.
        producer.produce(topic, value=f"t{i}".encode(), partition=0, timestamp=base + i * 1000)
    assert producer.flush(30) == 0

    consumer = Consumer({"bootstrap.servers": broker.bootstrap(), "group.id": "offsets-reader"})
    try:
        tp = CkTopicPartition(topic, 0)
        assert consumer.get_watermark_offsets(tp, timeout=10, cached=False) == (0, 10)
        asked = [
            CkTopicPartition(topic, 0, base - 5000),  # before everything: the first record
            CkTopicPartition(topic, 0, base),  # exact match
            CkTopicPartition(topic, 0, base + 3500),  # between records: the next one
            CkTopicPartition(topic, 0, base + 9000),  # the last record
            CkTopicPartition(topic, 0, base + 9001),  # after everything: none (-1)
        ]
        answers = [consumer.offsets_for_times([q], timeout=10)[0] for q in asked]
    finally:
        consumer.close()
    for answer in answers:
        assert answer.error is None, answer
    assert [a.offset for a in answers] == [0, 0, 4, 9, -1]

    # The same on the wire, with the timestamps found.
    earliest = list_offset(broker, topic, -2)
    latest = list_offset(broker, topic, -1)
    max_ts = list_offset(broker, topic, -3)
    by_time = list_offset(broker, topic, base + 3500)
    assert (earliest.error_code, earliest.offset) == (ErrorCode.none, 0)
    assert (latest.error_code, latest.offset) == (ErrorCode.none, 10)
    assert (max_ts.offset, max_ts.timestamp) == (9, base + 9000)
    assert (by_time.offset, by_time.timestamp) == (4, base + 4000)
    unknown = list_offset(broker, "no-such-topic", -1)
    assert unknown.error_code == ErrorCode.unknown_topic_or_partition


# Fetch --------------------------------------------------------------------------------------
def _long_poll_then_produce(broker: RunningBroker, topic: str, max_wait_ms: int) -> Any:
    """Park a Fetch (min_bytes 1) in the purgatory, produce one record, return the answer."""
    broker.create_topic(topic, 1)
    answers: list[Any] = []
    failures: list[BaseException] = []

    def long_poll() -> None:
        try:
            with broker.wire() as client:
                client.sock.settimeout(max_wait_ms / 1000 + 30)
                request = fetch_request(topic, 0, max_wait_ms=max_wait_ms, min_bytes=1)
                answers.append(fetch_partition(client, request))
        except BaseException as exc:
            failures.append(exc)

    poller = threading.Thread(target=long_poll, daemon=True)
    poller.start()
    # Wait until the fetch is parked in the purgatory, so the produce is what wakes it.
    deadline = time.monotonic() + DEADLINE_S
    while broker.purgatory_size("Fetch") < 1:
        assert not failures, failures
        assert not answers, f"fetch answered before any record was produced: {answers}"
        assert time.monotonic() < deadline, "the fetch never waited in the purgatory"
        time.sleep(0.01)
    assert not answers, "an empty partition answered a min_bytes=1 fetch at once"
    with broker.wire() as client:
        produce_wire(client, topic, [Record(key=b"k", value=b"wake up")])
    poller.join(timeout=60)
    assert not poller.is_alive(), "the parked fetch was not answered after the produce"
    assert not failures, failures
    (part,) = answers
    return part


def test_long_poll_fetch_is_answered_when_a_record_arrives(broker: RunningBroker) -> None:
    part = _long_poll_then_produce(broker, "long-poll", max_wait_ms=10_000)
    assert part.error_code == ErrorCode.none
    assert part.high_watermark == 1
    assert [(r.offset, r.key, r.value) for r in iter_all_records(part.records)] == [
        (0, b"k", b"wake up")
    ]


def test_long_poll_fetch_is_woken_by_the_produce_not_by_its_max_wait(broker: RunningBroker):
    """max_wait far beyond the 60 s bound on the answer: only the produce can complete it."""
    part = _long_poll_then_produce(broker, "long-poll-hour", max_wait_ms=3_600_000)
    assert part.error_code == ErrorCode.none
    assert [r.value for r in iter_all_records(part.records)] == [b"wake up"]


def test_fetch_with_max_wait_and_no_data_answers_empty(broker: RunningBroker) -> None:
    broker.create_topic("quiet", 1)
    with broker.wire() as client:
        part = fetch_partition(client, fetch_request("quiet", 0, max_wait_ms=200, min_bytes=1))
    assert part.error_code == ErrorCode.none
    assert part.high_watermark == 0
    assert not part.records


def test_fetch_max_bytes_returns_whole_batches_but_not_everything(broker: RunningBroker) -> None:
    topic = "sized"
    broker.create_topic(topic, 1)
    batches = 10
    with broker.wire() as client:
        for n in range(batches):
            produce_wire(client, topic, recs(f"b{n}-", 10, size=1000))  # ~10 KB a batch
        everything = fetch_partition(client, fetch_request(topic, 0)).records
        sizes = [h.size for h in read_partial_batches(everything)]
        assert len(sizes) == batches
        limit = sizes[0] + sizes[1] + sizes[2] // 2  # room for two and a half batches

        part = fetch_partition(client, fetch_request(topic, 0, max_bytes=limit))
        got = read_partial_batches(part.records)
        assert part.error_code == ErrorCode.none
        assert 1 <= len(got) < batches
        assert sum(h.size for h in got) == len(part.records) <= limit  # whole batches only
        records = list(iter_all_records(part.records))
        assert [r.offset for r in records] == list(range(len(got) * 10))

        # KIP-74: a limit below one batch still returns the first whole batch...
        part = fetch_partition(client, fetch_request(topic, 0, max_bytes=100))
        assert [h.size for h in read_partial_batches(part.records)] == sizes[:1]
        assert len(part.records) == sizes[0]
        # ...and so does a partition limit below one batch.
        part = fetch_partition(client, fetch_request(topic, 30, partition_max_bytes=100))
        got = read_partial_batches(part.records)
        assert [(h.base_offset, h.size) for h in got] == [(30, sizes[3])]


def test_fetch_past_the_end_answers_offset_out_of_range(broker: RunningBroker) -> None:
    broker.create_topic("short", 1)
    with broker.wire() as client:
        produce_wire(client, "short", recs("s", 3))
        at_end = fetch_partition(client, fetch_request("short", 3))
        past_end = fetch_partition(client, fetch_request("short", 100))
        negative = fetch_partition(client, fetch_request("short", -5))
        unknown = fetch_partition(client, fetch_request("no-such-topic", 0))
    assert (at_end.error_code, at_end.high_watermark) == (ErrorCode.none, 3)
    assert not at_end.records
    assert past_end.error_code == ErrorCode.offset_out_of_range
    assert past_end.high_watermark == 3
    assert not past_end.records
    assert negative.error_code == ErrorCode.offset_out_of_range
    assert unknown.error_code == ErrorCode.unknown_topic_or_partition


def test_consumer_with_out_of_range_offset_resets_to_earliest(broker: RunningBroker) -> None:
    """librdkafka reacts to OFFSET_OUT_OF_RANGE with auto.offset.reset."""
    broker.create_topic("reset", 1)
    with broker.wire() as client:
        produce_wire(client, "reset", recs("r", 4))
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap(),
            "group.id": "reset-reader",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    got: list[bytes] = []
    try:
        consumer.assign([CkTopicPartition("reset", 0, 1000)])
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < 4 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            got.append(msg.value())
    finally:
        consumer.close()
    assert got == [r.value for r in recs("r", 4)]


# Metrics ------------------------------------------------------------------------------------
def scrape(broker: RunningBroker) -> dict[str, Any]:
    url = broker.metrics_url()
    assert url is not None
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def test_prometheus_endpoint_serves_request_metrics(broker_factory) -> None:
    broker = broker_factory({"kplane.metrics.port": "0"})
    broker.create_topic("metered", 1)
    with broker.wire() as client:
        for n in range(3):
            produce_wire(client, "metered", recs(f"m{n}-", 5))
        for _ in range(2):
            fetch_partition(client, fetch_request("metered", 0))

    def produce_and_fetch_counts(families: dict[str, Any]) -> dict[str, float]:
        total = families.get("kafka_network_requestmetrics_totaltimems")
        counts: dict[str, float] = {}
        if total is None:
            return counts
        for sample in total.samples:
            if sample.name.endswith("_count") and sample.labels.get("plane") == "data":
                counts[sample.labels["request"]] = sample.value
        return counts

    # The metrics of the last request are recorded once its answer was written: wait for them.
    deadline = time.monotonic() + DEADLINE_S
    while True:
        families = scrape(broker)
        counts = produce_and_fetch_counts(families)
        if counts.get("Produce", 0) >= 3 and counts.get("Fetch", 0) >= 2:
            break
        assert time.monotonic() < deadline, counts
        time.sleep(0.05)

    total = families["kafka_network_requestmetrics_totaltimems"]
    assert total.type == "histogram"
    for request in ("Produce", "Fetch"):
        samples = [s for s in total.samples if s.labels.get("request") == request]
        buckets = [s for s in samples if s.name.endswith("_bucket")]
        assert buckets, request
        inf = next(s for s in buckets if s.labels["le"] == "+Inf")
        count = next(s for s in samples if s.name.endswith("_count"))
        assert inf.value == count.value >= 1
        total_sum = next(s for s in samples if s.name.endswith("_sum"))
        assert total_sum.value >= 0
    for name in (
        "kafka_network_requestmetrics_requestqueuetimems",
        "kafka_network_requestmetrics_localtimems",
        "kafka_network_requestmetrics_responsesendtimems",
    ):
        assert name in families, name

    queue = families["kafka_network_requestchannel_requestqueuesize"]
    assert queue.type == "gauge"
    (sample,) = queue.samples
    assert sample.value >= 0
