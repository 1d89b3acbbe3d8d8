"""An empty transactional id is refused as Kafka's transaction coordinator refuses it
(INVALID_REQUEST), and is never looked up in the transaction state store (the store's
``/transactions`` node itself: kplane logged "stored transaction state ignored" on every
such request)."""

from __future__ import annotations

import datetime

from kio.schema.add_partitions_to_txn.v3.request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.end_txn.v3.request import EndTxnRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.types import ProducerId, TopicName, TransactionalId
from kio.static.primitive import i16, i32
from structlog.testing import capture_logs

from kplane.protocol.errors import ErrorCode
from kplane.testing.plugin import RunningBroker

EMPTY = TransactionalId("")


def test_every_transaction_api_refuses_an_empty_id(broker: RunningBroker) -> None:
    broker.create_topic("t")
    with capture_logs() as logs, broker.wire() as client:
        init = client.request(
            InitProducerIdRequest(
                transactional_id=EMPTY,
                transaction_timeout=datetime.timedelta(seconds=60),
                producer_id=ProducerId(-1),
                producer_epoch=i16(-1),
            )
        )
        added = client.request(
            AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=EMPTY,
                v3_and_below_producer_id=ProducerId(1),
                v3_and_below_producer_epoch=i16(0),
                v3_and_below_topics=(
                    AddPartitionsToTxnTopic(name=TopicName("t"), partitions=(i32(0),)),
                ),
            )
        )
        ended = client.request(
            EndTxnRequest(
                transactional_id=EMPTY,
                producer_id=ProducerId(1),
                producer_epoch=i16(0),
                committed=True,
            )
        )
        described = client.request(DescribeTransactionsRequest(transactional_ids=(EMPTY,)))
    assert init.error_code == ErrorCode.invalid_request
    (topic,) = added.results_by_topic_v3_and_below
    assert [r.partition_error_code for r in topic.results_by_partition] == [
        ErrorCode.invalid_request
    ]
    assert ended.error_code == ErrorCode.invalid_request
    (state,) = described.transaction_states
    assert state.error_code == ErrorCode.transactional_id_not_found
    events = [e["event"] for e in logs]
    assert "stored transaction state ignored" not in events
    assert events.count("request refused: empty transactional id") == 3, events
