"""The Produce hot path without sockets: request bytes through KafkaApis' reading, ProduceApis'
validate, ReplicaManager's append against real in-memory logs, the metadata store's topic
configs and the produce purgatory, and the response bytes decoded with kio."""

from __future__ import annotations

from typing import Any

import pytest

from kplane.broker.config.kafka_config import KafkaConfig
from kplane.broker.log.partition import ReplicaAssignment, TopicPartition
from kplane.broker.network.request_channel import Response
from kplane.broker.server.replica_manager import ReplicaState
from kplane.protocol import api
from kplane.protocol.errors import ErrorCode
from kplane.protocol.records import scan_batches
from tests.unit.leader import PRODUCE, TOPIC, Answers, Broker, batch, body_of


def partitions_of(response: Response, version: int = 9) -> dict[int, Any]:
    decoded = api.decode_response(PRODUCE, version, body_of(response))
    return {p.index: p for t in decoded.responses for p in t.partition_responses}


@pytest.fixture
def broker() -> Any:
    b = Broker()
    yield b
    b.close()


@pytest.mark.parametrize("version", [3, 8, 9, 13])
def test_an_append_answers_its_base_offset_and_lands_in_the_log(broker, version) -> None:
    first = partitions_of(broker.produce({0: batch(b"a", b"b")}, version=version), version)
    second = partitions_of(
        broker.produce({0: batch(b"c"), 1: batch(b"d")}, version=version), version
    )
    assert (first[0].error_code, first[0].base_offset) == (ErrorCode.none, 0)
    assert [(p.error_code, p.base_offset) for p in second.values()] == [
        (ErrorCode.none, 2),
        (ErrorCode.none, 0),
    ]
    log = broker.logs.get(TopicPartition(TOPIC, 0)).log
    assert log.log_end_offset == 3


def test_refusals_before_the_append_name_every_partition(broker) -> None:
    bad_acks = partitions_of(broker.produce({0: batch(b"a"), 1: batch(b"b")}, acks=2))
    assert {p.error_code for p in bad_acks.values()} == {ErrorCode.invalid_required_acks}
    unknown = partitions_of(broker.produce({0: batch(b"a")}, topic="nope"))
    assert unknown[0].error_code == ErrorCode.unknown_topic_or_partition
    no_records = partitions_of(broker.produce({0: None}))
    assert no_records[0].error_code == ErrorCode.corrupt_message
    assert broker.logs.get(TopicPartition(TOPIC, 0)).log.log_end_offset == 0


def test_topic_settings_are_read_typed_and_follow_a_config_change(broker) -> None:
    assert broker.log_configs.log_settings(TOPIC).min_insync_replicas == 1
    broker.set_topic_config("min.insync.replicas", "2")
    settings = broker.log_configs.log_settings(TOPIC)
    assert settings.min_insync_replicas == 2
    assert broker.log_configs.log_settings(TOPIC) is settings  # parsed once, cached
    refused = partitions_of(broker.produce({0: batch(b"a")}, acks=-1))
    assert refused[0].error_code == ErrorCode.not_enough_replicas
    assert partitions_of(broker.produce({0: batch(b"a")}, acks=1))[0].error_code == 0

    broker.set_topic_config("max.message.bytes", "100")
    too_large = partitions_of(broker.produce({1: batch(b"x" * 200)}))
    assert too_large[1].error_code == ErrorCode.message_too_large


def test_a_broker_default_reaches_topics_without_an_override() -> None:
    broker = Broker(**{"message.max.bytes": "100"})
    try:
        assert broker.log_configs.log_settings(TOPIC).max_message_bytes == 100
        refused = partitions_of(broker.produce({0: batch(b"x" * 200)}))
        assert refused[0].error_code == ErrorCode.message_too_large
        broker.config = KafkaConfig.from_properties({"broker.id": "0"})  # a dynamic change
        assert partitions_of(broker.produce({0: batch(b"x" * 200)}))[0].error_code == 0
    finally:
        broker.close()


def test_record_errors_reach_v8_and_later_responses(broker) -> None:
    broker.set_topic_config("cleanup.policy", "compact")
    keyless = batch(b"a", b"b", key=None)
    (batch_header,) = scan_batches(keyless)
    assert batch_header.record_count == 2
    v8 = partitions_of(broker.produce({0: keyless}, version=8), 8)[0]
    assert v8.error_code == ErrorCode.invalid_record
    assert [e.batch_index for e in v8.record_errors] == [0, 1]
    v7 = partitions_of(broker.produce({0: keyless}, version=7), 7)[0]
    assert v7.error_code == ErrorCode.invalid_record
    assert not hasattr(v7, "record_errors")


def test_acks_all_is_answered_once_the_isr_has_the_records(broker) -> None:
    answered = partitions_of(broker.produce({0: batch(b"a")}, acks=-1))
    assert (answered[0].error_code, answered[0].base_offset) == (ErrorCode.none, 0)
    tp = TopicPartition(TOPIC, 0)
    with_follower = ReplicaAssignment(0, 1, 1, (0, 1), (0, 1))
    broker.replicas.become_leader_or_follower(1, [ReplicaState(tp, with_follower)])
    parked = Answers()
    broker.produce({0: batch(b"b", b"c")}, acks=-1, answers=parked)  # offsets 1, 2
    broker.replicas.update_follower_fetch(tp, 1, 2)  # the follower has offset 1 only
    assert parked.responses == []
    broker.replicas.update_follower_fetch(tp, 1, 3)
    (response,) = parked.responses
    assert partitions_of(response)[0].base_offset == 1


def test_a_failed_acks0_produce_closes_the_connection(broker) -> None:
    ok = broker.produce({0: batch(b"a")}, acks=0)
    assert (ok.pieces, ok.close_connection) == (None, False)
    failed = broker.produce({0: batch(b"a")}, acks=0, topic="nope")
    assert (failed.pieces, failed.close_connection) == (None, True)
