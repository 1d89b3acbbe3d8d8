"""Idempotent produce (KIP-98 sequences) and Produce's error answers, over real sockets.

The wire tests speak Produce v9 / InitProducerId v4 / Fetch v12 with kplane's raw WireClient:
a retry is the same Produce request sent twice on the wire, exactly what a producer does when
it did not hear the first answer. The client-library test drives librdkafka's idempotent
producer.
"""

from __future__ import annotations

import datetime
import socket
from collections.abc import Sequence

from confluent_kafka import Producer
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest

from kplane.protocol import api
from kplane.protocol.errors import ErrorCode
from kplane.protocol.framing import encode_request_frame
from kplane.protocol.records import Record, build_batch, iter_all_records
from kplane.testing.plugin import RunningBroker
from kplane.testing.wire import WireClient
from tests.integration.helpers import (
    fetch_partition,
    fetch_request,
    produce,
    produce_all,
    produce_request,
    read_from_beginning,
    recs,
)


# helpers ------------------------------------------------------------------------------------
def init_producer_id(client: WireClient) -> tuple[int, int]:
    response = client.request(
        InitProducerIdRequest(
            transactional_id=None, transaction_timeout=datetime.timedelta(milliseconds=60_000)
        )
    )
    assert response.error_code == ErrorCode.none, response
    assert response.producer_id >= 0
    assert response.producer_epoch >= 0
    return int(response.producer_id), int(response.producer_epoch)


def fetch_all(client: WireClient, topic: str, partition: int = 0) -> list[Record]:
    """Every record of the partition, read with Fetch from offset 0 until the high watermark."""
    records: list[Record] = []
    offset = 0
    while True:
        part = fetch_partition(client, fetch_request(topic, offset, partition=partition))
        assert part.error_code == ErrorCode.none, part
        got = [r for r in iter_all_records(part.records or b"") if r.offset >= offset]
        records += got
        if got:
            offset = got[-1].offset + 1
        if offset >= part.high_watermark or not got:
            assert offset == part.high_watermark, (offset, part.high_watermark)
            return records


def values(records: Sequence[Record]) -> list[bytes | None]:
    return [r.value for r in records]


# (a) idempotent sequences on the wire ---------------------------------------------------------
def test_retried_produce_is_stored_once_and_answers_the_same_offset(broker: RunningBroker) -> None:
    topic = "idem-retry"
    broker.create_topic(topic)
    with broker.wire() as client:
        pid, epoch = init_producer_id(client)
        first = build_batch(recs("a", 5), producer_id=pid, producer_epoch=epoch, base_sequence=0)
        answer = produce(client, topic, first)
        retry = produce(client, topic, first)  # the same request again: a retry
        assert answer.error_code == ErrorCode.none, answer
        assert retry.error_code == ErrorCode.none, retry
        assert answer.base_offset == retry.base_offset == 0
        assert values(fetch_all(client, topic)) == values(recs("a", 5))

        # The next batch continues the sequence (last was 4): appended after the first.
        second = build_batch(recs("b", 3), producer_id=pid, producer_epoch=epoch, base_sequence=5)
        answer = produce(client, topic, second)
        assert answer.error_code == ErrorCode.none, answer
        assert answer.base_offset == 5
        # Its retry, this time on another connection, is still recognised.
    with broker.wire() as other:
        retry = produce(other, topic, second)
        assert retry.error_code == ErrorCode.none, retry
        assert retry.base_offset == 5
        stored = fetch_all(other, topic)
    assert values(stored) == values(recs("a", 5) + recs("b", 3))
    assert [r.offset for r in stored] == list(range(8))


def test_pipelined_retry_is_answered_with_the_same_offset(broker: RunningBroker) -> None:
    """Both copies in flight at once on one connection, as when a producer retries early."""
    topic = "idem-pipelined"
    broker.create_topic(topic)
    with broker.wire() as client:
        pid, epoch = init_producer_id(client)
        batch = build_batch(recs("p", 10), producer_id=pid, producer_epoch=epoch, base_sequence=0)
        request = produce_request(topic, batch)
        ids = [client.send(request), client.send(request)]
        answers = []
        for expected in ids:
            correlation_id, response = client.receive(0, 9)
            assert correlation_id == expected
            answers.append(response.responses[0].partition_responses[0])
        assert [a.error_code for a in answers] == [ErrorCode.none, ErrorCode.none]
        assert [a.base_offset for a in answers] == [0, 0]
        assert values(fetch_all(client, topic)) == values(recs("p", 10))


def test_retry_of_an_earlier_batch_in_flight_window_is_recognised(broker: RunningBroker) -> None:
    """With five requests in flight, a retry may repeat any of the last five batches."""
    topic = "idem-window"
    broker.create_topic(topic)
    with broker.wire() as client:
        pid, epoch = init_producer_id(client)
        batches = [
            build_batch(
                recs(f"w{n}", 2), producer_id=pid, producer_epoch=epoch, base_sequence=2 * n
            )
            for n in range(5)
        ]
        for n, batch in enumerate(batches):
            answer = produce(client, topic, batch)
            assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 2 * n)
        for n in (1, 3, 0):
            retry = produce(client, topic, batches[n])
            assert (retry.error_code, retry.base_offset) == (ErrorCode.none, 2 * n), (n, retry)
        stored = fetch_all(client, topic)
    assert values(stored) == [v for n in range(5) for v in values(recs(f"w{n}", 2))]


def test_sequence_gap_answers_out_of_order_sequence_number(broker: RunningBroker) -> None:
    topic = "idem-gap"
    broker.create_topic(topic)
    with broker.wire() as client:
        pid, epoch = init_producer_id(client)
        ok = produce(
            client,
            topic,
            build_batch(recs("a", 5), producer_id=pid, producer_epoch=epoch, base_sequence=0),
        )
        assert ok.error_code == ErrorCode.none, ok
        # Sequences 5 and 6 never arrived: 7 is out of order.
        gap = produce(
            client,
            topic,
            build_batch(recs("gap", 2), producer_id=pid, producer_epoch=epoch, base_sequence=7),
        )
        assert gap.error_code == ErrorCode.out_of_order_sequence_number, gap
        assert values(fetch_all(client, topic)) == values(recs("a", 5))
        # The refused batch left the producer's state alone: 5 still follows.
        ok = produce(
            client,
            topic,
            build_batch(recs("b", 2), producer_id=pid, producer_epoch=epoch, base_sequence=5),
        )
        assert ok.error_code == ErrorCode.none, ok
        assert ok.base_offset == 5
        assert values(fetch_all(client, topic)) == values(recs("a", 5) + recs("b", 2))


def test_older_producer_epoch_answers_invalid_producer_epoch(broker: RunningBroker) -> None:
    """An idempotent producer bumps its epoch itself (KIP-360) and restarts at sequence 0;
    a batch of the older epoch is then refused."""
    topic = "idem-epoch"
    broker.create_topic(topic)
    with broker.wire() as client:
        pid, epoch = init_producer_id(client)
        ok = produce(
            client,
            topic,
            build_batch(recs("e0", 3), producer_id=pid, producer_epoch=epoch, base_sequence=0),
        )
        assert ok.error_code == ErrorCode.none, ok
        bumped = produce(
            client,
            topic,
            build_batch(recs("e1", 2), producer_id=pid, producer_epoch=epoch + 1, base_sequence=0),
        )
        assert bumped.error_code == ErrorCode.none, bumped
        assert bumped.base_offset == 3
        stale = produce(
            client,
            topic,
            build_batch(recs("old", 1), producer_id=pid, producer_epoch=epoch, base_sequence=3),
        )
        assert stale.error_code == ErrorCode.invalid_producer_epoch, stale
        assert values(fetch_all(client, topic)) == values(recs("e0", 3) + recs("e1", 2))


def test_each_init_producer_id_hands_out_a_new_producer_id(broker: RunningBroker) -> None:
    with broker.wire() as a, broker.wire() as b:
        ids = {init_producer_id(a)[0], init_producer_id(a)[0], init_producer_id(b)[0]}
    assert len(ids) == 3


# (b) librdkafka's idempotent producer ---------------------------------------------------------
def test_confluent_idempotent_producer_20000_records_exactly_once(broker: RunningBroker) -> None:
    topic = "idem-confluent"
    partitions = 3
    count = 20_000
    broker.create_topic(topic, partitions)
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap(),
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "batch.num.messages": 1000,
            "max.in.flight.requests.per.connection": 5,
        }
    )
    messages = [
        {"value": f"{i % partitions}:{i}".encode(), "partition": i % partitions}
        for i in range(count)
    ]
    expected = {p: [m["value"] for m in messages if m["partition"] == p] for p in range(partitions)}
    delivered = produce_all(producer, topic, messages, partitions)
    for p in range(partitions):
        assert sorted(delivered[p]) == list(range(len(expected[p]))), f"delivery offsets of {p}"

    read = read_from_beginning(
        broker.bootstrap(),
        "idem-confluent-reader",
        topic,
        {p: len(expected[p]) for p in range(partitions)},
        batch=5000,
        timeout=60,
    )
    got = {p: [m.value() for m in msgs] for p, msgs in read.items()}
    offsets = {p: [m.offset() for m in msgs] for p, msgs in read.items()}
    for p in range(partitions):
        assert got[p] == expected[p], f"partition {p}: records differ (dupes, gaps or order)"
        assert offsets[p] == list(range(len(expected[p])))


# (c) Produce errors -------------------------------------------------------------------------
def test_corrupted_crc_answers_corrupt_message_and_is_not_stored(broker: RunningBroker) -> None:
    topic = "bad-crc"
    broker.create_topic(topic)
    batch = bytearray(build_batch(recs("c", 4)))
    batch[-1] ^= 0xFF  # a flipped bit in the last record: the CRC no longer matches
    with broker.wire() as client:
        answer = produce(client, topic, bytes(batch))
        assert answer.error_code == ErrorCode.corrupt_message, answer
        assert answer.base_offset == -1
        assert fetch_all(client, topic) == []
        # The connection is still usable and a good batch lands at offset 0.
        good = produce(client, topic, build_batch(recs("g", 2)))
        assert good.error_code == ErrorCode.none, good
        assert good.base_offset == 0
        assert values(fetch_all(client, topic)) == values(recs("g", 2))


def test_invalid_acks_answers_invalid_required_acks(broker: RunningBroker) -> None:
    topic = "bad-acks"
    broker.create_topic(topic)
    with broker.wire() as client:
        for acks in (2, -2, 5):
            answer = produce(client, topic, build_batch(recs("x", 1)), acks=acks)
            assert answer.error_code == ErrorCode.invalid_required_acks, (acks, answer)
        assert fetch_all(client, topic) == []


def test_produce_to_unknown_topic_or_partition(broker: RunningBroker) -> None:
    broker.create_topic("known-topic")
    with broker.wire() as client:
        answer = produce(client, "no-such-topic", build_batch(recs("u", 1)))
        assert answer.error_code == ErrorCode.unknown_topic_or_partition, answer
        answer = produce(client, "known-topic", build_batch(recs("u", 1)), partition=7)
        assert answer.error_code == ErrorCode.unknown_topic_or_partition, answer
        assert fetch_all(client, "known-topic") == []


def test_acks_0_success_gets_no_answer_and_keeps_the_connection(broker: RunningBroker) -> None:
    topic = "acks0-ok"
    broker.create_topic(topic)
    with broker.wire() as client:
        client.send(produce_request(topic, build_batch(recs("z", 3)), acks=0))
        # The next answer on this connection belongs to the next request: none for acks=0.
        expected = client.send(
            ApiVersionsRequest(client_software_name="t", client_software_version="1")
        )
        correlation_id, response = client.receive(18, 3)
        assert correlation_id == expected
        assert response.error_code == ErrorCode.none
        assert values(fetch_all(client, topic)) == values(recs("z", 3))


def test_acks_0_with_an_error_closes_the_connection(broker: RunningBroker) -> None:
    with broker.wire() as client:
        client.send(produce_request("acks0-unknown", build_batch(recs("z", 1)), acks=0))
        assert client.is_closed_by_peer()
    broker.create_topic("acks0-crc")
    batch = bytearray(build_batch(recs("z", 2)))
    batch[-1] ^= 0x01
    with broker.wire() as client:
        client.send(produce_request("acks0-crc", bytes(batch), acks=0))
        assert client.is_closed_by_peer()
    with broker.wire() as client:  # the broker still serves, and stored nothing
        assert fetch_all(client, "acks0-crc") == []


def test_acks0_requests_sent_before_the_client_closes_are_all_stored(
    broker: RunningBroker,
) -> None:
    """Pipelined acks=0 Produce requests followed at once by a close: every one is
    processed (Kafka handles what it already received), none is dropped."""
    broker.create_topic("acks0-close")
    count = 300
    frames = []
    for i in range(count):
        batch = build_batch([Record(key=None, value=b"v%d" % i)])
        request = produce_request("acks0-close", batch, acks=0)
        frames.append(
            encode_request_frame(0, int(request.__version__), i + 1, "t", api.encode(request))
        )
    with WireClient(*broker.address()) as client:
        for frame in frames:  # one write each: later ones arrive while one is in flight
            client.sock.sendall(frame)
        client.sock.shutdown(socket.SHUT_WR)
        assert client.is_closed_by_peer(timeout=10)
    replica = broker.replica("acks0-close", 0)
    assert replica is not None and replica.log_end_offset == count
