"""DeleteRecords (API 21) from confluent-kafka's and kafka-python's admin clients: the log
start offset moves, ListOffsets earliest and consumers follow it, Fetch below it is
OFFSET_OUT_OF_RANGE, and with the file log whole segments below it go and the start
survives a restart."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient

from kplane.protocol.errors import ErrorCode
from tests.integration.helpers import fetch_partition, fetch_request

STORAGES = ["memory", "file"]


def _fill(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1}
    )
    for i in range(count):
        producer.produce(topic, value=b"d%03d" % i + b"." * 80)
        producer.poll(0)
    assert producer.flush(30) == 0


def _first_offset(bootstrap: str, topic: str) -> int:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "dr", "auto.offset.reset": "earliest"}
    )
    consumer.assign([CkTopicPartition(topic, 0, -2)])  # OFFSET_BEGINNING
    try:
        for _ in range(30):
            for msg in consumer.consume(num_messages=1, timeout=1.0):
                if msg.error() is None:
                    return msg.offset()
    finally:
        consumer.close()
    raise AssertionError("nothing consumed")


def _start(broker_factory, storage: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    return broker_factory(
        {"kplane.log.storage": storage, "log.dirs": str(tmp_path / "data")}
    )


@pytest.mark.parametrize("storage", STORAGES)
def test_confluent_kafka_delete_records_moves_the_low_watermark(
    broker_factory, tmp_path: Path, storage: str  # type: ignore[no-untyped-def]
) -> None:
    broker = _start(broker_factory, storage, tmp_path)
    broker.create_topic("trim", config={"segment.bytes": "1000"})
    bootstrap = broker.bootstrap()
    _fill(bootstrap, "trim", 100)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.delete_records([CkTopicPartition("trim", 0, 40)]).values()
    assert future.result(timeout=30).low_watermark == 40
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "w"})
    assert consumer.get_watermark_offsets(CkTopicPartition("trim", 0), timeout=10) == (40, 100)
    consumer.close()
    assert _first_offset(bootstrap, "trim") == 40
    with broker.wire() as client:
        below = fetch_partition(client, fetch_request("trim", 10))
        at = fetch_partition(client, fetch_request("trim", 40))
    assert below.error_code == ErrorCode.offset_out_of_range
    assert below.log_start_offset == 40
    assert at.error_code == ErrorCode.none
    # -1 is the high watermark; beyond it is OFFSET_OUT_OF_RANGE.
    (future,) = admin.delete_records([CkTopicPartition("trim", 0, -1)]).values()
    assert future.result(timeout=30).low_watermark == 100
    (future,) = admin.delete_records([CkTopicPartition("trim", 0, 500)]).values()
    with pytest.raises(KafkaException) as failure:
        future.result(timeout=30)
    assert failure.value.args[0].code() == ErrorCode.offset_out_of_range
    if storage == "file":
        segments = sorted((tmp_path / "data" / "trim-0").glob("*.log"))
        assert int(segments[0].stem) <= 100 and len(segments) <= 2


def test_kafka_python_delete_records_and_an_unknown_topic(broker) -> None:  # type: ignore[no-untyped-def]
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.errors import UnknownTopicOrPartitionError

    broker.create_topic("kp")
    _fill(broker.bootstrap(), "kp", 20)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap())
    try:
        result = admin.delete_records({TopicPartition("kp", 0): 15})
        assert result[TopicPartition("kp", 0)]["low_watermark"] == 15
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.delete_records({TopicPartition("nope", 0): 1}, partition_leader_id=0)
    finally:
        admin.close()
    assert _first_offset(broker.bootstrap(), "kp") == 15


def test_the_log_start_survives_a_restart(broker_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    first = _start(broker_factory, "file", tmp_path)
    first.create_topic("kept")
    _fill(first.bootstrap(), "kept", 30)
    admin = AdminClient({"bootstrap.servers": first.bootstrap()})
    (future,) = admin.delete_records([CkTopicPartition("kept", 0, 12)]).values()
    assert future.result(timeout=30).low_watermark == 12
    first.stop()
    second = _start(broker_factory, "file", tmp_path)
    consumer = Consumer({"bootstrap.servers": second.bootstrap(), "group.id": "w"})
    assert consumer.get_watermark_offsets(CkTopicPartition("kept", 0), timeout=10) == (12, 30)
    consumer.close()
