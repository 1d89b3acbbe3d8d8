"""A compacted topic refuses records without a key (Kafka's LogValidator: INVALID_RECORD,
"Compacted topic cannot accept message without key"), whatever the codec; a delete topic
takes them."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, Producer

from kplane.protocol.errors import ErrorCode
from kplane.protocol.records import COMPRESSION_NAMES, Record, build_batch
from tests.integration.helpers import produce


def _send(bootstrap: str, topic: str, key: bytes | None) -> KafkaError | None:
    outcome: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, "retries": 0})
    producer.produce(topic, key=key, value=b"v", on_delivery=lambda err, _msg: outcome.append(err))
    assert producer.flush(30) == 0
    return outcome[0]


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
def test_a_keyless_record_on_a_compacted_topic_is_refused(broker, policy: str) -> None:
    broker.create_topic("kept", config={"cleanup.policy": policy})
    assert _send(broker.bootstrap(), "kept", b"a-key") is None
    err = _send(broker.bootstrap(), "kept", None)
    assert err is not None and err.code() == KafkaError.INVALID_RECORD
    broker.create_topic("plain")
    assert _send(broker.bootstrap(), "plain", None) is None


@pytest.mark.parametrize("codec", sorted(COMPRESSION_NAMES))
def test_the_refusal_names_the_keyless_record_in_every_codec(broker, codec: int) -> None:
    broker.create_topic("kc", config={"cleanup.policy": "compact"})
    records = [Record(key=b"k%d" % i, value=b"v") for i in range(40)]
    records[27] = Record(key=None, value=b"v")
    with broker.wire() as client:
        partition = produce(client, "kc", build_batch(records, compression=codec))
    assert partition.error_code == ErrorCode.invalid_record
    assert [e.batch_index for e in partition.record_errors] == [27]
    assert "Compacted topic cannot accept message without key" in partition.error_message


def test_every_keyless_record_is_named(broker) -> None:
    broker.create_topic("kc", config={"cleanup.policy": "compact"})
    keyless = set(range(5, 100, 10))
    records = [
        Record(key=None if i in keyless else b"k%d" % i, value=b"v%d" % i) for i in range(100)
    ]
    with broker.wire() as client:
        partition = produce(client, "kc", build_batch(records))
    assert partition.error_code == ErrorCode.invalid_record
    assert [e.batch_index for e in partition.record_errors] == sorted(keyless)
    assert {e.batch_index_error_message for e in partition.record_errors} == {
        "Compacted topic cannot accept message without key in topic partition kc-0."
    }
    assert partition.error_message.startswith(
        "One or more records have been rejected due to 10 record errors in total"
    )


def test_a_client_fails_each_keyless_record_as_invalid(broker) -> None:
    """librdkafka fails the records named in record_errors with INVALID_RECORD and the
    others of the batch with its "different record" error (KIP-467), which an application
    may send again."""
    broker.create_topic("kc", config={"cleanup.policy": "compact"})
    outcomes: dict[int, KafkaError] = {}
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap(), "linger.ms": 200, "batch.num.messages": 1000}
    )
    for i in range(100):
        producer.produce(
            "kc",
            key=None if i % 10 == 5 else b"k%d" % i,
            value=b"v",
            on_delivery=lambda err, _msg, i=i: outcomes.__setitem__(i, err),
        )
    assert producer.flush(30) == 0
    codes = {i: err.code() for i, err in outcomes.items()}
    invalid = sorted(i for i, code in codes.items() if code == KafkaError.INVALID_RECORD)
    assert invalid == list(range(5, 100, 10))
    others = {code for i, code in codes.items() if i not in invalid}
    assert others == {KafkaError._INVALID_DIFFERENT_RECORD}
