"""The transaction APIs on the wire: FindCoordinator (transaction), DescribeTransactions,
ListTransactions, DescribeProducers, WriteTxnMarkers' ClusterAction check, and OffsetFetch's
require_stable against offsets pending in a transaction (KIP-447)."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.list_transactions.v1.request import ListTransactionsRequest
from kio.schema.offset_fetch.v7.request import OffsetFetchRequest, OffsetFetchRequestTopic

from kplane.protocol.errors import ErrorCode
from kplane.testing.plugin import RunningBroker


def _open_transaction(broker: RunningBroker, topic: str, tid: str, group: str) -> Producer:
    """A transaction left open with two records and offsets of ``group`` pending."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap(), "group.id": group})
    p = Producer({"bootstrap.servers": broker.bootstrap(), "transactional.id": tid})
    p.init_transactions(15)
    p.begin_transaction()
    p.produce(topic, b"a")
    p.produce(topic, b"b")
    p.flush(10)
    p.send_offsets_to_transaction(
        [TopicPartition(topic, 0, 1)], consumer.consumer_group_metadata(), 15
    )
    consumer.close()
    return p


def test_describe_list_and_producers(broker: RunningBroker) -> None:
    topic = "txn-apis"
    broker.create_topic(topic)
    p = _open_transaction(broker, topic, "described", "txn-apis-group")
    with broker.wire() as client:
        (coordinator,) = client.request(
            FindCoordinatorRequest(key_type=1, coordinator_keys=("described",))
        ).coordinators
        assert coordinator.error_code == ErrorCode.none
        assert coordinator.node_id == broker.broker_id

        (state,) = client.request(
            DescribeTransactionsRequest(transactional_ids=("described",))
        ).transaction_states
        assert state.error_code == ErrorCode.none
        assert state.transaction_state == "Ongoing"
        assert {t.topic for t in state.topics} == {topic, "__consumer_offsets"}

        (unknown,) = client.request(
            DescribeTransactionsRequest(transactional_ids=("nobody",))
        ).transaction_states
        assert unknown.error_code == ErrorCode.transactional_id_not_found

        listed = client.request(
            ListTransactionsRequest(
                state_filters=("Ongoing", "NoSuchState"), producer_id_filters=()
            )
        )
        assert [t.transactional_id for t in listed.transaction_states] == ["described"]
        assert listed.unknown_state_filters == ("NoSuchState",)

        (producers,) = client.request(
            DescribeProducersRequest(topics=(TopicRequest(name=topic, partition_indexes=(0,)),))
        ).topics
        (partition,) = producers.partitions
        (active,) = partition.active_producers
        assert active.producer_id == state.producer_id
        assert active.current_txn_start_offset == 0

        stable = client.request(
            OffsetFetchRequest(
                group_id="txn-apis-group",
                topics=(OffsetFetchRequestTopic(name=topic, partition_indexes=(0,)),),
                require_stable=True,
            )
        )
        assert stable.topics[0].partitions[0].error_code == ErrorCode.unstable_offset_commit
        loose = client.request(
            OffsetFetchRequest(
                group_id="txn-apis-group",
                topics=(OffsetFetchRequestTopic(name=topic, partition_indexes=(0,)),),
                require_stable=False,
            )
        )
        assert loose.topics[0].partitions[0].committed_offset == -1  # pending is not visible

    p.commit_transaction(15)
    with broker.wire() as client:
        committed = client.request(
            OffsetFetchRequest(
                group_id="txn-apis-group",
                topics=(OffsetFetchRequestTopic(name=topic, partition_indexes=(0,)),),
                require_stable=True,
            )
        )
        assert committed.topics[0].partitions[0].error_code == ErrorCode.none
        assert committed.topics[0].partitions[0].committed_offset == 1
