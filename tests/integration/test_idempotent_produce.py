"""Idempotent produce (KIP-98 sequences) and Produce's error answers, over real sockets.

The wire tests speak Produce v9 / InitProducerId v4 / Fetch v12 with kplane's raw WireClient:
a retry is the same Produce request sent twice on the wire, exactly what a producer does when
it did not hear the first answer. The client-library test drives librdkafka's idempotent
producer.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Sequence

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.static.primitive import i16, i32, i64

from broker.testing.plugin import RunningBroker
from broker.testing.wire import WireClient
from protocol.errors import ErrorCode
from protocol.records import Record, build_batch, iter_all_records

DEADLINE_S = 30.0


# helpers ------------------------------------------------------------------------------------
def _wire(broker: RunningBroker) -> WireClient:
    return WireClient(*broker.address())


def create_topic(broker: RunningBroker, topic: str, partitions: int = 1) -> None:
    """Create ``topic`` with AdminClient and wait until Metadata shows a leader everywhere."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap()})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)], operation_timeout=10
    )
    futures[topic].result(timeout=30)
    deadline = time.monotonic() + DEADLINE_S
    with _wire(broker) as client:
        while True:
            response = client.request(
                MetadataRequest(
                    topics=(MetadataRequestTopic(name=topic, topic_id=None),),
                    allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False,
                )
            )
            (found,) = response.topics
            if (
                found.error_code == ErrorCode.none
                and len(found.partitions) == partitions
                and all(p.leader_id >= 0 for p in found.partitions)
            ):
                return
            assert time.monotonic() < deadline, f"topic {topic} has no leaders: {found}"
            time.sleep(0.05)


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


def produce_request(
    topic: str, records: bytes, *, partition: int = 0, acks: int = -1
) -> ProduceRequest:
    return ProduceRequest(
        transactional_id=None,
        acks=i16(acks),
        timeout=datetime.timedelta(milliseconds=10_000),
        topic_data=(
            TopicProduceData(
                name=topic,
                partition_data=(PartitionProduceData(index=i32(partition), records=records),),
            ),
        ),
    )


def produce(client: WireClient, topic: str, records: bytes, **kwargs: int):
    """Send one Produce; returns the PartitionProduceResponse."""
    response = client.request(produce_request(topic, records, **kwargs))
    (topic_response,) = response.responses
    assert topic_response.name == topic
    (partition_response,) = topic_response.partition_responses
    return partition_response


def fetch_all(client: WireClient, topic: str, partition: int = 0) -> list[Record]:
    """Every record of the partition, read with Fetch from offset 0 until the high watermark."""
    records: list[Record] = []
    offset = 0
    while True:
        response = client.request(
            FetchRequest(
                max_wait=datetime.timedelta(0),
                min_bytes=i32(0),
                topics=(
                    FetchTopic(
                        topic=topic,
                        partitions=(
                            FetchPartition(
                                partition=i32(partition),
                                fetch_offset=i64(offset),
                                partition_max_bytes=i32(1 << 20),
                            ),
                        ),
                    ),
                ),
                forgotten_topics_data=(),
            )
        )
        (part,) = response.responses[0].partitions
        assert part.error_code == ErrorCode.none, part
        got = [r for r in iter_all_records(part.records or b"") if r.offset >= offset]
        records += got
        if got:
            offset = got[-1].offset + 1
        if offset >= part.high_watermark or not got:
            assert offset == part.high_watermark, (offset, part.high_watermark)
            return records


def recs(prefix: str, count: int) -> list[Record]:
    return [
        Record(key=f"{prefix}-k{i}".encode(), value=f"{prefix}-v{i}".encode()) for i in range(count)
    ]


def values(records: Sequence[Record]) -> list[bytes | None]:
    return [r.value for r in records]


# (a) idempotent sequences on the wire ---------------------------------------------------------
def test_retried_produce_is_stored_once_and_answers_the_same_offset(broker: RunningBroker) -> None:
    topic = "idem-retry"
    create_topic(broker, topic)
    with _wire(broker) as client:
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
    with _wire(broker) as other:
        retry = produce(other, topic, second)
        assert retry.error_code == ErrorCode.none, retry
        assert retry.base_offset == 5
        stored = fetch_all(other, topic)
    assert values(stored) == values(recs("a", 5) + recs("b", 3))
    assert [r.offset for r in stored] == list(range(8))


def test_pipelined_retry_is_answered_with_the_same_offset(broker: RunningBroker) -> None:
    """Both copies in flight at once on one connection, as when a producer retries early."""
    topic = "idem-pipelined"
    create_topic(broker, topic)
    with _wire(broker) as client:
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
    create_topic(broker, topic)
    with _wire(broker) as client:
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
    create_topic(broker, topic)
    with _wire(broker) as client:
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
    create_topic(broker, topic)
    with _wire(broker) as client:
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
    with _wire(broker) as a, _wire(broker) as b:
        ids = {init_producer_id(a)[0], init_producer_id(a)[0], init_producer_id(b)[0]}
    assert len(ids) == 3


# (b) librdkafka's idempotent producer ---------------------------------------------------------
def test_confluent_idempotent_producer_20000_records_exactly_once(broker: RunningBroker) -> None:
    topic = "idem-confluent"
    partitions = 3
    count = 20_000
    create_topic(broker, topic, partitions)
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
    errors: list[str] = []
    delivered: dict[int, list[int]] = {p: [] for p in range(partitions)}

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            delivered[msg.partition()].append(msg.offset())

    expected: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    for i in range(count):
        p = i % partitions
        value = f"{p}:{i}".encode()
        expected[p].append(value)
        while True:
            try:
                producer.produce(topic, value=value, partition=p, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(60) == 0, "records still undelivered after flush"
    assert errors == []
    for p in range(partitions):
        assert sorted(delivered[p]) == list(range(len(expected[p]))), f"delivery offsets of {p}"

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap(),
            "group.id": "idem-confluent-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([CkTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    offsets: dict[int, list[int]] = {p: [] for p in range(partitions)}
    done: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while len(done) < partitions and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=5000, timeout=1.0):
                err = msg.error()
                p = msg.partition()
                if err is not None:
                    assert err.code() == KafkaError._PARTITION_EOF, str(err)
                    if len(got[p]) >= len(expected[p]):
                        done.add(p)
                    continue
                got[p].append(msg.value())
                offsets[p].append(msg.offset())
    finally:
        consumer.close()
    for p in range(partitions):
        assert got[p] == expected[p], f"partition {p}: records differ (dupes, gaps or order)"
        assert offsets[p] == list(range(len(expected[p])))


# (c) Produce errors -------------------------------------------------------------------------
def test_corrupted_crc_answers_corrupt_message_and_is_not_stored(broker: RunningBroker) -> None:
    topic = "bad-crc"
    create_topic(broker, topic)
    batch = bytearray(build_batch(recs("c", 4)))
    batch[-1] ^= 0xFF  # a flipped bit in the last record: the CRC no longer matches
    with _wire(broker) as client:
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
    create_topic(broker, topic)
    with _wire(broker) as client:
        for acks in (2, -2, 5):
            answer = produce(client, topic, build_batch(recs("x", 1)), acks=acks)
            assert answer.error_code == ErrorCode.invalid_required_acks, (acks, answer)
        assert fetch_all(client, topic) == []


def test_produce_to_unknown_topic_or_partition(broker: RunningBroker) -> None:
    create_topic(broker, "known-topic")
    with _wire(broker) as client:
        answer = produce(client, "no-such-topic", build_batch(recs("u", 1)))
        assert answer.error_code == ErrorCode.unknown_topic_or_partition, answer
        answer = produce(client, "known-topic", build_batch(recs("u", 1)), partition=7)
        assert answer.error_code == ErrorCode.unknown_topic_or_partition, answer
        assert fetch_all(client, "known-topic") == []


def test_acks_0_success_gets_no_answer_and_keeps_the_connection(broker: RunningBroker) -> None:
    topic = "acks0-ok"
    create_topic(broker, topic)
    with _wire(broker) as client:
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
    with _wire(broker) as client:
        client.send(produce_request("acks0-unknown", build_batch(recs("z", 1)), acks=0))
        assert client.is_closed_by_peer()
    create_topic(broker, "acks0-crc")
    batch = bytearray(build_batch(recs("z", 2)))
    batch[-1] ^= 0x01
    with _wire(broker) as client:
        client.send(produce_request("acks0-crc", bytes(batch), acks=0))
        assert client.is_closed_by_peer()
    with _wire(broker) as client:  # the broker still serves, and stored nothing
        assert fetch_all(client, "acks0-crc") == []
