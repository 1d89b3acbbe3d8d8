"""Transactions across brokers sharing a real ZooKeeper: markers to every leader involved
(over the inter-broker listener), and a coordinator's broker stopped mid-transaction.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest

from kplane.broker.group.placement import coordinator_for
from kplane.testing.plugin import RunningBroker
from tests.integration.test_transactions import consume_all

TXN_PARTITIONS = 50  # transaction.state.log.num.partitions, Kafka's default


def _wait(predicate: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    return value


@pytest.fixture
def pair(broker_factory, zookeeper) -> tuple[RunningBroker, RunningBroker]:  # type: ignore[no-untyped-def]
    common = {
        "zookeeper.connect": zookeeper,
        "zookeeper.session.timeout.ms": "4000",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
    }
    first = broker_factory({**common, "broker.id": "0"})
    second = broker_factory({**common, "broker.id": "1"})
    _wait(lambda: len(first.alive_brokers()) == 2)
    _wait(lambda: len(second.alive_brokers()) == 2)
    return first, second


def _create(broker: RunningBroker, topic: str, assignment: list[list[int]]) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap()})
    admin.create_topics(
        [NewTopic(topic, num_partitions=len(assignment), replica_assignment=assignment)]
    )[topic].result(15)
    _wait(
        lambda: (
            len(found := broker.partitions(topic)) == len(assignment)
            and all(p.leader >= 0 for p in found.values())
        )
    )


def _transaction_state(broker: RunningBroker, transactional_id: str) -> str:
    """The transaction's state as DescribeTransactions answers it."""
    with broker.wire() as client:
        request = DescribeTransactionsRequest(transactional_ids=(transactional_id,))
        (state,) = client.request(request).transaction_states
    return str(state.transaction_state)


def _transactional_id_on(broker_id: int, prefix: str) -> str:
    for i in range(1000):
        tid = f"{prefix}-{i}"
        if coordinator_for(tid, [0, 1], TXN_PARTITIONS) == broker_id:
            return tid
    raise AssertionError("no transactional id maps to the broker")


def test_markers_reach_every_leader(pair) -> None:  # type: ignore[no-untyped-def]
    first, _second = pair
    _create(first, "spread", [[0], [1], [0], [1]])
    for coordinator in (0, 1):
        p = Producer(
            {
                "bootstrap.servers": first.bootstrap(),
                "transactional.id": _transactional_id_on(coordinator, "spread"),
            }
        )
        p.init_transactions(20)
        p.begin_transaction()
        for i in range(8):
            p.produce("spread", f"c{coordinator}-{i}".encode(), partition=i % 4)
        p.commit_transaction(20)
        p.begin_transaction()
        for i in range(4):
            p.produce("spread", f"aborted-{i}".encode(), partition=i)
        p.flush(10)
        p.abort_transaction(20)
    seen = consume_all(first.bootstrap(), "spread", "read_committed", 16, partitions=4)
    assert sorted(seen) == sorted(f"c{c}-{i}".encode() for c in (0, 1) for i in range(8))


def test_a_new_coordinator_aborts_the_open_transaction_of_a_stopped_one(pair) -> None:  # type: ignore[no-untyped-def]
    first, second = pair
    _create(first, "survivor", [[1]])  # led by the broker that stays
    tid = _transactional_id_on(0, "orphan")  # coordinated by the broker that stops
    p = Producer(
        {
            "bootstrap.servers": second.bootstrap(),
            "transactional.id": tid,
            "transaction.timeout.ms": 2000,
        }
    )
    p.init_transactions(20)
    p.begin_transaction()
    p.produce("survivor", b"orphaned")
    p.flush(10)
    assert consume_all(second.bootstrap(), "survivor", "read_committed", 1, timeout=1) == []

    first.stop()
    _wait(lambda: second.alive_brokers() == {1})
    # Broker 1 now coordinates the id: it aborts the timed-out transaction, writing the
    # marker, so read_committed readers move past the open records.
    _wait(lambda: _transaction_state(second, tid) == "CompleteAbort")
    replica = second.replica("survivor", 0)
    assert replica is not None and replica.last_stable_offset == replica.high_watermark
    assert consume_all(second.bootstrap(), "survivor", "read_uncommitted", 1) == [b"orphaned"]
