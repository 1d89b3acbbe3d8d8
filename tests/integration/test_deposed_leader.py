"""An acks=all Produce parked on a leader that loses its leadership is answered
NOT_LEADER_OR_FOLLOWER when the controller's LeaderAndIsr arrives (Kafka's ReplicaManager
completes a partition's delayed produces when it becomes a follower), not after its
timeout."""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from kplane.protocol.errors import ErrorCode
from kplane.protocol.records import Record, build_batch
from kplane.testing.plugin import KafkaCluster
from tests.integration.helpers import produce_request

LISTENERS = {
    "listeners": "CLIENT://127.0.0.1:0,INTERNAL://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
    "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "inter.broker.listener.name": "INTERNAL",
    "control.plane.listener.name": "CONTROLLER",
    "replica.lag.time.max.ms": "60000",  # the slowed followers stay in the ISR
}
PRODUCE_TIMEOUT_MS = 30_000
FOLLOWER_FETCH_DELAY_MS = 15_000
"""Long enough to park the Produce past the leader move and the 10 s the test waits for its
answer, short enough for the teardown to wait out the delayed fetch responses."""


def test_a_parked_acks_all_produce_is_answered_when_leadership_moves(
    kafka_cluster: Callable[..., KafkaCluster],
) -> None:
    cluster = kafka_cluster(brokers=3, overrides=LISTENERS)
    leader = cluster.brokers[0]
    admin = AdminClient({"bootstrap.servers": leader.bootstrap("CLIENT")})
    admin.create_topics([NewTopic("moving", 1, 3)])["moving"].result(30)
    leader.wait_for_partitions("moving", 1)
    cluster.move_leader("moving", 0, 0)
    # Fetches from the leader and from the next leader are answered 15 s late: the high
    # watermark stands still and an acks=all Produce parks, and once deposed the old leader
    # learns nothing from the new one (whose answer would complete it: its high watermark
    # moves) before the Produce's own timeout. The controller's requests come over
    # CONTROLLER, which is not slowed.
    slowed = cluster.brokers[:2]
    for broker in slowed:
        broker.set_rtt(FOLLOWER_FETCH_DELAY_MS, "INTERNAL")
    answer: list[Any] = []
    request = produce_request("moving", build_batch([Record(key=None, value=b"v")]))
    request = type(request)(
        transactional_id=None,
        acks=request.acks,
        timeout=datetime.timedelta(milliseconds=PRODUCE_TIMEOUT_MS),
        topic_data=request.topic_data,
    )
    with leader.wire("CLIENT") as client:
        client.sock.settimeout(PRODUCE_TIMEOUT_MS / 1000 + 10)
        sent = threading.Thread(target=lambda: answer.append(client.request(request)))
        sent.start()
        try:
            deadline = time.monotonic() + 10
            while leader.purgatory_size("Produce") == 0:
                assert time.monotonic() < deadline, "the Produce did not park"
                time.sleep(0.02)
            cluster.move_leader("moving", 0, 1)
            sent.join(10)
            assert answer, "the parked Produce was not answered when leadership moved"
        finally:
            for broker in slowed:
                broker.set_rtt(0, "INTERNAL")
            sent.join(PRODUCE_TIMEOUT_MS / 1000 + 15)
    (topic,) = answer[0].responses
    (partition,) = topic.partition_responses
    assert partition.error_code == ErrorCode.not_leader_or_follower
