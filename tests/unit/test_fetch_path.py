"""The Fetch hot path without sockets: FetchApis over a real ReplicaManager and in-memory
logs, its answers decoded with kio: records and watermarks, Kafka's per-partition errors,
a long poll parked in the fetch purgatory until a Produce completes it, a follower's fetch
moving the high watermark."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic

from kplane.broker.log.partition import ReplicaAssignment, TopicPartition
from kplane.broker.network.request_channel import Response
from kplane.broker.server.replica_manager import ReplicaState
from kplane.protocol import api
from kplane.protocol.errors import ErrorCode
from kplane.protocol.records import iter_all_records
from tests.unit.leader import TOPIC, Answers, Broker, batch, body_of

FETCH, VERSION = 1, 12


def request(
    offset: int,
    topic: str = TOPIC,
    max_wait_ms: int = 0,
    min_bytes: int = 0,
    replica_id: int = -1,
) -> FetchRequest:
    partition = api.make(
        FetchPartition, partition=0, fetch_offset=offset, partition_max_bytes=1 << 20
    )
    return api.make(
        FetchRequest,
        replica_id=replica_id,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=min_bytes,
        max_bytes=1 << 20,
        topics=(api.make(FetchTopic, topic=topic, partitions=(partition,)),),
    )


def partition_of(response: Response) -> Any:
    decoded = api.decode_response(FETCH, VERSION, body_of(response))
    assert decoded.error_code == ErrorCode.none
    ((part,),) = (t.partitions for t in decoded.responses)
    return part


def values(part: Any) -> list[bytes | None]:
    return [r.value for r in iter_all_records(part.records or b"")]


@pytest.fixture
def broker() -> Any:
    b = Broker()
    yield b
    b.close()


def fetch(broker: Broker, body: FetchRequest, answers: Answers | None = None) -> Response:
    return broker.handle(broker.fetch_apis.handle_fetch, FETCH, VERSION, body, answers)


def test_records_and_watermarks(broker) -> None:
    broker.produce({0: batch(b"a", b"b")})
    broker.produce({0: batch(b"c")})
    part = partition_of(fetch(broker, request(0)))
    assert (part.error_code, part.high_watermark, part.log_start_offset) == (0, 3, 0)
    assert values(part) == [b"a", b"b", b"c"]
    assert values(partition_of(fetch(broker, request(2)))) == [b"c"]
    assert values(partition_of(fetch(broker, request(3)))) == []


def test_kafkas_errors_per_partition(broker) -> None:
    broker.produce({0: batch(b"a")})
    assert partition_of(fetch(broker, request(5))).error_code == ErrorCode.offset_out_of_range
    unknown = partition_of(fetch(broker, request(0, topic="nope")))
    assert unknown.error_code == ErrorCode.unknown_topic_or_partition


def test_a_long_poll_waits_for_the_next_produce(broker) -> None:
    parked = Answers()
    fetch(broker, request(0, max_wait_ms=30_000, min_bytes=1), parked)
    assert parked.responses == []
    broker.produce({0: batch(b"late")})
    (response,) = parked.responses
    assert values(partition_of(response)) == [b"late"]


def test_a_followers_fetch_moves_the_high_watermark(broker) -> None:
    tp = TopicPartition(TOPIC, 0)
    with_follower = ReplicaAssignment(0, 1, 1, (0, 1), (0, 1))
    broker.replicas.become_leader_or_follower(1, [ReplicaState(tp, with_follower)])
    broker.produce({0: batch(b"a", b"b")})
    before = partition_of(fetch(broker, request(0, replica_id=1)))
    assert values(before) == [b"a", b"b"]  # a follower reads past the high watermark
    assert partition_of(fetch(broker, request(0))).high_watermark == 0
    fetch(broker, request(2, replica_id=1))  # it has both records now
    assert partition_of(fetch(broker, request(0))).high_watermark == 2
