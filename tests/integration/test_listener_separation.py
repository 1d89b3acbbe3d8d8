"""KIP-2 / KIP-103: each client hears only of the listener it arrived on."""

from __future__ import annotations

import time

from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from kplane.protocol.errors import ErrorCode
from kplane.testing.plugin import RunningBroker
from kplane.testing.wire import WireClient

TWO_LISTENERS = {
    "listeners": "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.2:0",
    "advertised.listeners": "INTERNAL://localhost:0,EXTERNAL://127.0.0.2:0",
    "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
    "inter.broker.listener.name": "INTERNAL",
}


def _endpoints(broker: RunningBroker) -> dict[str, tuple[str, int]]:
    return {name: broker.advertised(name) for name in ("INTERNAL", "EXTERNAL")}


def _metadata(client: WireClient, topic: str | None = None) -> object:
    topics = None if topic is None else (MetadataRequestTopic(name=topic, topic_id=None),)
    return client.request(
        MetadataRequest(
            topics=topics, allow_auto_topic_creation=True, include_topic_authorized_operations=False
        )
    )


def test_metadata_answers_with_the_arrival_listener_only(broker_factory) -> None:
    broker = broker_factory(TWO_LISTENERS)
    advertised = _endpoints(broker)
    assert advertised["INTERNAL"][0] == "localhost"
    assert advertised["EXTERNAL"][0] == "127.0.0.2"
    broker.create_topic("orders")
    for name in ("INTERNAL", "EXTERNAL"):
        with WireClient(*broker.address(name)) as client:
            response = _metadata(client, "orders")
        hosts = [(b.host, b.port) for b in response.brokers]  # type: ignore[attr-defined]
        assert hosts == [advertised[name]], name
        assert response.topics[0].error_code == ErrorCode.none  # type: ignore[attr-defined]


def test_describe_cluster_and_find_coordinator_follow_the_listener(broker_factory) -> None:
    broker = broker_factory(TWO_LISTENERS)
    advertised = _endpoints(broker)
    for name in ("INTERNAL", "EXTERNAL"):
        with WireClient(*broker.address(name)) as client:
            cluster = client.request(
                DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=1)
            )
            coordinator = client.request(
                FindCoordinatorRequest(key_type=0, coordinator_keys=("g",))
            )
        assert [(b.host, b.port) for b in cluster.brokers] == [advertised[name]]
        assert cluster.controller_id == 0
        found = coordinator.coordinators[0]
        assert found.error_code == ErrorCode.none
        assert (found.host, found.port) == advertised[name]


def test_real_clients_see_their_own_listener(broker_factory) -> None:
    broker = broker_factory(TWO_LISTENERS)
    advertised = _endpoints(broker)

    external = AdminClient({"bootstrap.servers": broker.bootstrap("EXTERNAL")})
    brokers = external.list_topics(timeout=10).brokers
    assert [(b.host, b.port) for b in brokers.values()] == [advertised["EXTERNAL"]]

    internal = KafkaAdminClient(bootstrap_servers=broker.bootstrap("INTERNAL"))
    try:
        cluster = internal.describe_cluster()
    finally:
        internal.close()
    assert [(b["host"], b["port"]) for b in cluster["brokers"]] == [advertised["INTERNAL"]]


def test_listener_name_travels_with_each_request(broker_factory) -> None:
    broker = broker_factory(TWO_LISTENERS)
    seen: list[tuple[str, str]] = []
    broker.on_request("Metadata", lambda r: seen.append((r.listener, r.security_protocol)))
    for name in ("INTERNAL", "EXTERNAL"):
        with WireClient(*broker.address(name)) as client:
            _metadata(client)
    assert seen == [("INTERNAL", "PLAINTEXT"), ("EXTERNAL", "PLAINTEXT")]


def test_leader_without_the_listener(broker_factory) -> None:
    """A live broker lacking the arrival listener is left out; its partitions answer
    LISTENER_NOT_FOUND on Metadata v6+ and LEADER_NOT_AVAILABLE before."""
    from kio.schema.create_topics.v7.request import (
        CreatableReplicaAssignment,
        CreatableTopic,
        CreateTopicsRequest,
    )
    from kio.schema.metadata.v5.request import MetadataRequest as MetadataRequestV5
    from kio.schema.metadata.v5.request import MetadataRequestTopic as TopicV5

    broker = broker_factory(TWO_LISTENERS)
    # A second broker that registered only its INTERNAL listener (as a broker configured
    # without EXTERNAL would); it leads the topic's only partition.
    broker.register_stand_in(1, "INTERNAL", "localhost", 1)
    import datetime

    # The controller publishes the new broker, then (below) the topic, asynchronously.
    def wait_until(predicate) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + 20
        while not predicate():
            assert time.monotonic() < deadline
            time.sleep(0.02)

    wait_until(lambda: 1 in broker.alive_brokers())

    with WireClient(*broker.address("EXTERNAL")) as client:
        created = client.request(
            CreateTopicsRequest(
                topics=(
                    CreatableTopic(
                        name="internal-only",
                        num_partitions=-1,
                        replication_factor=-1,
                        assignments=(
                            CreatableReplicaAssignment(partition_index=0, broker_ids=(1,)),
                        ),
                        configs=(),
                    ),
                ),
                timeout=datetime.timedelta(seconds=5),
                validate_only=False,
            )
        )
        assert created.topics[0].error_code == ErrorCode.none
        wait_until(lambda: "internal-only" in broker.topics())
        v12 = _metadata(client, "internal-only")
        v5 = client.request(
            MetadataRequestV5(
                topics=(TopicV5(name="internal-only"),), allow_auto_topic_creation=False
            )
        )
    assert [b.node_id for b in v12.brokers] == [0]  # type: ignore[attr-defined]
    assert v12.topics[0].partitions[0].error_code == ErrorCode.listener_not_found  # type: ignore[attr-defined]
    assert v5.topics[0].partitions[0].error_code == ErrorCode.leader_not_available
    with WireClient(*broker.address("INTERNAL")) as client:
        internal = _metadata(client, "internal-only")
    assert sorted(b.node_id for b in internal.brokers) == [0, 1]  # type: ignore[attr-defined]
    partition = internal.topics[0].partitions[0]  # type: ignore[attr-defined]
    assert partition.error_code == ErrorCode.none and partition.leader_id == 1
