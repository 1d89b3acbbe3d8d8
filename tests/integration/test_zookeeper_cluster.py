"""Brokers sharing a real ZooKeeper, in this process: start-up guards, requests at the wrong
broker, listener-aware metadata across brokers, group coordinators spread by group id,
dynamic config across brokers, rack-aware assignment."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest

from kplane.broker.config.errors import ConfigException
from kplane.protocol import api
from kplane.protocol.errors import ErrorCode
from kplane.protocol.records import build_batch
from kplane.testing.broker_view import PartitionInfo
from kplane.testing.plugin import RunningBroker
from tests.integration.helpers import produce, recs
from tests.integration.test_dynamic_config import _set


def _wait(predicate: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    return value


@pytest.fixture
def pair(broker_factory, zookeeper) -> tuple[RunningBroker, RunningBroker]:
    """Broker 0 with an EXTRA listener broker 1 lacks, on one ZooKeeper chroot."""
    common = {"zookeeper.connect": zookeeper, "zookeeper.session.timeout.ms": "4000"}
    first = broker_factory(
        {
            **common,
            "broker.id": "0",
            "broker.rack": "a",
            "listeners": "PLAINTEXT://127.0.0.1:0,EXTRA://127.0.0.1:0",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTRA:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
        }
    )
    second = broker_factory({**common, "broker.id": "1", "broker.rack": "b"})
    _wait(lambda: len(first.alive_brokers()) == 2)
    return first, second


def _create(
    broker: RunningBroker, topic: str, partitions: int, factor: int = 1
) -> dict[int, PartitionInfo]:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap()})
    admin.create_topics([NewTopic(topic, partitions, factor)])[topic].result(timeout=15)

    def led() -> dict[int, PartitionInfo] | None:
        found = broker.partitions(topic)
        if len(found) == partitions and all(p.leader >= 0 for p in found.values()):
            return found
        return None

    return _wait(led)


def test_requests_at_the_wrong_broker_and_listener_aware_metadata(pair) -> None:
    first, second = pair
    partitions = _create(first, "across", 4)
    leaders = {i: p.leader for i, p in partitions.items()}
    assert set(leaders.values()) == {0, 1}
    brokers = {0: first, 1: second}
    for index, leader in leaders.items():
        other = brokers[1 - leader]
        with other.wire() as client:
            response = produce(client, "across", build_batch(recs("k", 1)), partition=index)
        assert response.error_code == ErrorCode.not_leader_or_follower
        with brokers[leader].wire() as client:
            response = produce(client, "across", build_batch(recs("k", 1)), partition=index)
        assert response.error_code == ErrorCode.none
    # Through broker 0's EXTRA listener, partitions led by broker 1 (which lacks EXTRA)
    # answer LISTENER_NOT_FOUND on Metadata v6+, LEADER_NOT_AVAILABLE before.
    for version, expected in (
        (12, ErrorCode.listener_not_found),
        (5, ErrorCode.leader_not_available),
    ):
        with first.wire("EXTRA") as client:
            module = api.request_module(3, version)
            response = client.request(
                api.make(
                    api.request_class(3, version),
                    topics=(api.make(module.MetadataRequestTopic, name="across", topic_id=None),),
                    allow_auto_topic_creation=False,
                )
            )
        assert [b.node_id for b in response.brokers] == [0]
        (topic,) = response.topics
        for p in topic.partitions:
            if leaders[int(p.partition_index)] == 1:
                assert (p.error_code, p.leader_id) == (expected, -1)
            else:
                assert (p.error_code, p.leader_id) == (ErrorCode.none, 0)


def test_group_coordinators_are_spread_by_group_id(pair) -> None:
    first, second = pair
    groups = [f"group-{i}" for i in range(40)]
    with first.wire() as client:
        response = client.request(
            FindCoordinatorRequest(key_type=0, coordinator_keys=tuple(groups))
        )
    owners = {c.key: int(c.node_id) for c in response.coordinators}
    assert set(owners.values()) == {0, 1}
    brokers = {0: first, 1: second}
    group = groups[0]
    wrong = brokers[1 - owners[group]]
    module = api.request_module(11, 9)
    join = api.make(
        api.request_class(11, 9),
        group_id=group,
        session_timeout=datetime.timedelta(seconds=10),
        rebalance_timeout=datetime.timedelta(seconds=10),
        member_id="",
        protocol_type="consumer",
        protocols=(api.make(module.JoinGroupRequestProtocol, name="range", metadata=b""),),
    )
    with wrong.wire() as client:
        assert client.request(join).error_code == ErrorCode.not_coordinator


def test_dynamic_defaults_reach_every_broker(pair) -> None:
    first, second = pair
    _set(first, "", {"log.cleaner.threads": "3"})
    _wait(lambda: second.current_config("log.cleaner.threads") == 3)
    _set(first, "1", {"num.io.threads": "6"})
    _wait(lambda: len(second.request_handlers()) == 6)
    assert len(first.request_handlers()) == 4


def test_replicas_are_spread_over_racks(pair) -> None:
    first, _second = pair
    partitions = _create(first, "racked", 4, factor=2)
    for p in partitions.values():
        assert sorted(p.replicas) == [0, 1]


def test_start_up_guards(pair, broker_factory, zookeeper, tmp_path: Path) -> None:
    first, _second = pair
    with pytest.raises(RuntimeError, match="already registered"):
        broker_factory({"zookeeper.connect": zookeeper, "broker.id": "0"})
    # A log directory that belongs to another cluster is refused.
    log_dir = tmp_path / "foreign"
    log_dir.mkdir()
    (log_dir / "meta.properties").write_text("version=0\nbroker.id=5\ncluster.id=someone-else\n")
    with pytest.raises(ConfigException, match="doesn't match stored clusterId"):
        broker_factory({"zookeeper.connect": zookeeper, "broker.id": "5", "log.dirs": str(log_dir)})
    assert first.alive_brokers() == {0, 1}


def test_topic_deletion_stops_the_replicas_on_every_broker(pair) -> None:
    first, second = pair
    partitions = _create(first, "doomed", 4)
    hosts = {0: first, 1: second}
    for index, p in partitions.items():
        assert hosts[p.leader].replica("doomed", index)
    admin = AdminClient({"bootstrap.servers": second.bootstrap()})
    admin.delete_topics(["doomed"])["doomed"].result(timeout=15)
    for broker in (first, second):
        _wait(lambda b=broker: "doomed" not in b.topics())
        _wait(lambda b=broker: all(b.replica("doomed", i) is None for i in range(4)))
