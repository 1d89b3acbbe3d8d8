"""Consumer groups across coordinators and types, on a real in-process metadata store: two
GroupCoordinators share it as two brokers do, the live brokers deciding which one
coordinates; and the consumer protocol's bytes embedded in the classic protocol."""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import pytest

from kplane.broker.group.consumer_protocol import ConsumerGroupHeartbeat
from kplane.broker.group.coordinator import GroupCoordinator
from kplane.broker.group.embedded_protocol import (
    MalformedProtocol,
    decode_assignment,
    decode_subscription,
    encode_assignment,
)
from kplane.broker.group.group_config import GroupConfig
from kplane.broker.metadata.cache import MetadataSnapshot, PartitionInfo, TopicInfo
from kplane.broker.metadata.kafka_store import BrokerRegistration, KafkaMetadataClient
from kplane.broker.metadata.store import EmbeddedMetadataStore
from kplane.broker.utils.timer import SystemTimer
from kplane.protocol.errors import ErrorCode

WAIT = 5.0
TOPIC_ID = uuid.uuid4()
GROUP = "g-moving"


@pytest.fixture
def timer() -> Iterator[SystemTimer]:
    t = SystemTimer("test-group-moves")
    yield t
    t.shutdown()


class Cluster:
    """The live brokers as both coordinators' metadata has them, and the shared store."""

    def __init__(self) -> None:
        self.live = {0, 1}
        self.client = KafkaMetadataClient(EmbeddedMetadataStore(None))

    def snapshot(self) -> MetadataSnapshot:
        partitions = {p: PartitionInfo(p, 0, 0, (0, 1), (0, 1)) for p in range(4)}
        return MetadataSnapshot(
            "c",
            0,
            brokers={b: BrokerRegistration(b, ()) for b in self.live},
            topics={"t": TopicInfo("t", TOPIC_ID, partitions)},
            topic_ids={TOPIC_ID: "t"},
        )

    def coordinator(
        self, timer: SystemTimer, broker_id: int, session_timeout_ms: int = 45_000
    ) -> GroupCoordinator:
        """Broker ``broker_id``'s coordinator: it coordinates GROUP while it is the lowest
        live broker (broker 0, and broker 1 once 0 is gone)."""
        coord = GroupCoordinator(
            GroupConfig(
                initial_rebalance_delay_ms=0,
                min_session_timeout_ms=10,
                consumer_session_timeout_ms=session_timeout_ms,
            ),
            timer,
            lambda _t, _p: True,
            self.client,
            topics=self.snapshot,
            stored_topics=lambda: ["t"],
            group_store=self.client,
            owns=lambda _group_id: min(self.live) == broker_id,
        )
        return coord


def heartbeat(coord: GroupCoordinator, member_id: str, epoch: int) -> Any:
    return coord.consumer.heartbeat(
        ConsumerGroupHeartbeat(
            group_id=GROUP,
            member_id=member_id,
            member_epoch=epoch,
            rebalance_timeout_ms=30_000 if epoch == 0 else -1,
            subscribed_topic_names=("t",) if epoch == 0 else None,
            owned={} if epoch == 0 else None,
        )
    )


def wait_until(predicate: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_the_next_coordinator_answers_from_the_stored_group_and_the_last_unloads_it(
    timer: SystemTimer,
) -> None:
    cluster = Cluster()
    first, second = cluster.coordinator(timer, 0), cluster.coordinator(timer, 1)
    try:
        joined = heartbeat(first, "m-1", 0)
        assert joined.error is ErrorCode.none and joined.member_epoch == 1
        cluster.live = {1}  # broker 0 is gone: broker 1 coordinates the group
        (described,) = second.describe_consumer_groups([GROUP])  # before any heartbeat
        assert described.error is ErrorCode.none
        assert [(m.member_id, m.member_epoch) for m, _t in described.members] == [("m-1", 1)]
        assert heartbeat(second, "m-1", 1).error is ErrorCode.none
        wait_until(lambda: first.groups.registered(GROUP) is None)  # unloaded within a second
    finally:
        first.shutdown()
        second.shutdown()


def test_a_coordinator_taking_groups_over_loads_them_and_starts_their_sessions(
    timer: SystemTimer,
) -> None:
    """The member does not come back at the new coordinator: its session, started when
    the group was loaded, expires there and it is fenced (the old coordinator fences no
    one for a group it no longer coordinates)."""
    cluster = Cluster()
    first = cluster.coordinator(timer, 0, session_timeout_ms=1000)
    second = cluster.coordinator(timer, 1, session_timeout_ms=1000)
    try:
        assert heartbeat(first, "m-1", 0).error is ErrorCode.none
        assert second.groups.registered(GROUP) is None
        cluster.live = {1}
        wait_until(lambda: second.groups.registered(GROUP) is not None)  # loaded unasked
        wait_until(lambda: not second.describe_consumer_groups([GROUP])[0].members)
        assert second.describe_consumer_groups([GROUP])[0].group_epoch == 2
    finally:
        first.shutdown()
        second.shutdown()


def test_a_group_that_turns_classic_leaves_no_stored_consumer_group(timer: SystemTimer) -> None:
    cluster = Cluster()
    coord = cluster.coordinator(timer, 0)
    try:
        assert heartbeat(coord, "m-1", 0).error is ErrorCode.none
        assert heartbeat(coord, "m-1", -1).error is ErrorCode.none  # left: Empty
        assert cluster.client.read_consumer_group(GROUP) is not None
        joined: Future[Any] = Future()
        coord.join_group(
            GROUP, "", None, "c", "/h", 30_000, 10_000, "consumer", [("range", b"")],
            joined.set_result, require_known_member_id=False,
        )  # fmt: skip
        assert joined.result(WAIT).error is ErrorCode.none
        assert cluster.client.read_consumer_group(GROUP) is None
    finally:
        coord.shutdown()


def _subscription(version: int, topics: list[str], *tail: bytes) -> bytes:
    out = struct.pack(">hi", version, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + b"".join(tail)


def test_embedded_subscription_of_each_version() -> None:
    no_user_data = struct.pack(">i", -1)
    owned = struct.pack(">i", 1) + struct.pack(">h", 1) + b"t" + struct.pack(">iii", 2, 0, 3)
    rack = struct.pack(">h", 2) + b"r1"
    v0 = decode_subscription(_subscription(0, ["t", "u"], no_user_data))
    assert v0.topics == ("t", "u") and v0.owned_partitions == () and v0.rack_id is None
    v3 = decode_subscription(
        _subscription(3, ["t"], no_user_data, owned, struct.pack(">i", 7), rack)
    )
    assert v3.owned_partitions == (("t", 0), ("t", 3))
    assert (v3.generation_id, v3.rack_id) == (7, "r1")
    assert decode_subscription(_subscription(1, ["t"])).topics == ("t",)  # stops early
    for bad in (b"", b"\x00", _subscription(0, ["t"])[:-1], struct.pack(">hi", 0, 99)):
        with pytest.raises(MalformedProtocol):
            decode_subscription(bad)


def test_embedded_assignment_round_trip() -> None:
    data = encode_assignment({"t": [3, 1], "u": [0]}, 3)
    assert decode_assignment(data) == (("t", 1), ("t", 3), ("u", 0))
    assert struct.unpack_from(">h", data)[0] == 3
    assert decode_assignment(b"") == ()
    with pytest.raises(MalformedProtocol):
        decode_assignment(data[:9])
