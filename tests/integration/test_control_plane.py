"""KIP-291: LeaderAndIsr, StopReplica and UpdateMetadata over the control plane, its separate
queue and handler, and its metrics."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from kplane.protocol import api
from kplane.protocol.errors import ErrorCode
from kplane.protocol.records import Record, build_batch
from kplane.testing.broker_view import RequestInfo
from kplane.testing.plugin import RunningBroker
from kplane.testing.wire import WireClient
from tests.integration.helpers import produce, recs

LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA = 4, 5, 6
CONTROLLER_OVERRIDES = {
    "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "inter.broker.listener.name": "PLAINTEXT",
    "control.plane.listener.name": "CONTROLLER",
}


@pytest.fixture
def cp_broker(broker_factory) -> RunningBroker:
    return broker_factory(CONTROLLER_OVERRIDES)


def _module(key: int, version: int) -> Any:
    return api.request_module(key, version)


def leader_and_isr(
    version: int,
    topic: str,
    leader: int,
    leader_epoch: int,
    controller_epoch: int = 1,
    live_leaders: tuple[int, ...] | None = None,
) -> Any:
    """A LeaderAndIsr of one partition, in the layout of ``version``; ``live_leaders``
    defaults to the leader."""
    module = _module(LEADER_AND_ISR, version)
    state = dict(
        topic_name=topic,
        partition_index=0,
        controller_epoch=controller_epoch,
        leader=leader,
        leader_epoch=leader_epoch,
        isr=(leader,),
        partition_epoch=leader_epoch,
        replicas=(0, 1),
    )
    partition = api.make(module.LeaderAndIsrPartitionState, **state)
    grouped = hasattr(module, "LeaderAndIsrTopicState")
    return api.make(
        api.request_class(LEADER_AND_ISR, version),
        controller_id=0,
        controller_epoch=controller_epoch,
        broker_epoch=-1,
        ungrouped_partition_states=() if grouped else (partition,),
        topic_states=(
            api.make(
                module.LeaderAndIsrTopicState,
                topic_name=topic,
                topic_id=None,
                partition_states=(partition,),
            ),
        )
        if grouped
        else (),
        live_leaders=tuple(
            api.make(module.LeaderAndIsrLiveLeader, broker_id=b, host_name="127.0.0.1", port=9)
            for b in ((leader,) if live_leaders is None else live_leaders)
        ),
    )


def update_metadata(
    version: int,
    broker: RunningBroker,
    topic: str,
    leader: int,
    controller_epoch: int = 1,
    controller_id: int = 0,
) -> Any:
    """An UpdateMetadata naming broker 0 (every listener) and a broker 1 (PLAINTEXT only)."""
    module = _module(UPDATE_METADATA, version)
    host, port = broker.address("PLAINTEXT")
    ports = {"PLAINTEXT": port, "CONTROLLER": broker.address("CONTROLLER")[1]}

    def live(broker_id: int, listeners: dict[str, int]) -> Any:
        return api.make(
            module.UpdateMetadataBroker,
            id=broker_id,
            v0_host=host,
            v0_port=listeners["PLAINTEXT"],
            endpoints=tuple(
                api.make(
                    module.UpdateMetadataEndpoint,
                    port=p,
                    host=host,
                    listener=name,
                    security_protocol=0,
                )
                for name, p in listeners.items()
            )
            if hasattr(module, "UpdateMetadataEndpoint")
            else (),
            rack=None,
        )

    state = api.make(
        module.UpdateMetadataPartitionState,
        topic_name=topic,
        partition_index=0,
        controller_epoch=controller_epoch,
        leader=leader,
        leader_epoch=7,
        isr=(leader,),
        zk_version=7,
        replicas=(0, 1),
        offline_replicas=(),
    )
    grouped = hasattr(module, "UpdateMetadataTopicState")
    return api.make(
        api.request_class(UPDATE_METADATA, version),
        controller_id=controller_id,
        controller_epoch=controller_epoch,
        broker_epoch=-1,
        ungrouped_partition_states=() if grouped else (state,),
        topic_states=(
            api.make(
                module.UpdateMetadataTopicState,
                topic_name=topic,
                topic_id=None,
                partition_states=(state,),
            ),
        )
        if grouped
        else (),
        live_brokers=(live(0, ports), live(1, {"PLAINTEXT": port + 1})),
    )


def test_a_leader_not_known_alive_is_not_fetched_from(cp_broker) -> None:
    """Kafka's makeFollowers: the partition follows, but no fetcher is started for a leader
    that neither the request's live leaders nor the metadata cache name alive (a forged
    LeaderAndIsr naming broker 7 left a thread retrying a connection to it for the
    broker's lifetime)."""
    topic = "lai-unknown-leader"
    cp_broker.create_topic(topic, 1)
    with capture_logs() as logs, cp_broker.wire("CONTROLLER") as control:
        unknown = leader_and_isr(7, topic, leader=7, leader_epoch=5, live_leaders=(3,))
        assert _partition_errors(control.request(unknown)) == [ErrorCode.none]
        assert cp_broker.replica_fetchers() == []
        # Known alive from the cache (an UpdateMetadata named broker 1) ...
        control.request(update_metadata(7, cp_broker, topic, leader=1))
        control.request(leader_and_isr(7, topic, leader=1, leader_epoch=6, live_leaders=()))
        assert [f.leader for f in cp_broker.replica_fetchers()] == [1]
        # ... or from the request's live leaders, as the controller sends them.
        control.request(leader_and_isr(7, topic, leader=2, leader_epoch=7))
        assert [f.leader for f in cp_broker.replica_fetchers()] == [2]
    assert [e for e in logs if "not fetching" in e["event"]] == [
        {
            "event": "LeaderAndIsr names leaders this broker does not know alive: not fetching",
            "log_level": "warning",
            "count": 1,
            "partitions": [f"{topic}-0"],
        }
    ]


def test_shutdown_asks_only_a_registered_controller(cp_broker) -> None:
    """Controlled shutdown finds the controller and the live brokers in the metadata store,
    as Kafka's ZooKeeper-mode broker did: an UpdateMetadata naming a controller 1 that never
    registered does not hold shutdown through every retry against it."""
    topic = "um-forged-controller"
    cp_broker.create_topic(topic, 1)
    with cp_broker.wire("CONTROLLER") as control:
        control.request(update_metadata(7, cp_broker, topic, leader=0, controller_id=1))
    assert cp_broker.controller_id() == 1
    with capture_logs() as logs:
        cp_broker.stop()
    assert [e for e in logs if e["event"].startswith("controlled shutdown")] == []


def _partition_errors(response: Any) -> list[ErrorCode]:
    if hasattr(response, "topics"):
        return [p.error_code for t in response.topics for p in t.partition_errors]
    return [p.error_code for p in response.partition_errors]


def _produce_error(client: WireClient, topic: str) -> ErrorCode:
    return produce(client, topic, build_batch(recs("k", 1)), acks=1).error_code


@pytest.mark.parametrize("version", [0, 1, 4, 5, 7])
def test_leader_and_isr_makes_the_broker_follower_then_leader(cp_broker, version) -> None:
    topic = f"lai-{version}"
    cp_broker.create_topic(topic, 1)
    with cp_broker.wire("CONTROLLER") as control, cp_broker.wire("PLAINTEXT") as data:
        assert _produce_error(data, topic) == ErrorCode.none
        response = control.request(leader_and_isr(version, topic, leader=1, leader_epoch=5))
        assert response.error_code == ErrorCode.none
        assert _partition_errors(response) == [ErrorCode.none]
        assert _produce_error(data, topic) == ErrorCode.not_leader_or_follower
        # Not newer than what was applied: refused per partition, nothing changes.
        stale = control.request(leader_and_isr(version, topic, leader=0, leader_epoch=5))
        assert _partition_errors(stale) == [ErrorCode.stale_controller_epoch]
        assert _produce_error(data, topic) == ErrorCode.not_leader_or_follower
        back = control.request(leader_and_isr(version, topic, leader=0, leader_epoch=6))
        assert _partition_errors(back) == [ErrorCode.none]
        assert _produce_error(data, topic) == ErrorCode.none
        # An older controller is refused as a whole.
        old = control.request(
            leader_and_isr(version, topic, leader=1, leader_epoch=9, controller_epoch=0)
        )
        assert old.error_code == ErrorCode.stale_controller_epoch
        assert _produce_error(data, topic) == ErrorCode.none


@pytest.mark.parametrize("version", [0, 3, 5, 7, 8])
def test_update_metadata_replaces_brokers_and_merges_partitions(cp_broker, version) -> None:
    cp_broker.create_topic("um", 1)
    cp_broker.create_topic("untouched", 1)
    with cp_broker.wire("CONTROLLER") as control:
        response = control.request(update_metadata(version, cp_broker, "um", leader=1))
        assert response.error_code == ErrorCode.none
        stale = control.request(update_metadata(version, cp_broker, "um", 1, controller_epoch=0))
        assert stale.error_code == ErrorCode.stale_controller_epoch
    with cp_broker.wire("PLAINTEXT") as client:
        metadata = client.request(
            api.make(api.request_class(3, 12), topics=None, allow_auto_topic_creation=False)
        )
    by_name = {t.name: t for t in metadata.topics}
    (partition,) = by_name["um"].partitions
    assert (partition.leader_id, partition.leader_epoch) == (1, 7)
    assert by_name["untouched"].partitions[0].leader_id == 0  # merged, not replaced
    brokers = sorted(b.node_id for b in metadata.brokers)
    assert brokers == [0, 1]


@pytest.mark.parametrize("version", [0, 1, 3, 4])
def test_stop_replica_with_delete_drops_the_partition(cp_broker, version) -> None:
    cp_broker.create_topic("gone", 1)
    module = _module(STOP_REPLICA, version)
    request = api.make(
        api.request_class(STOP_REPLICA, version),
        controller_id=0,
        controller_epoch=1,
        broker_epoch=-1,
        delete_partitions=True,
        ungrouped_partitions=(
            api.make(module.StopReplicaPartitionV0, topic_name="gone", partition_index=0),
        )
        if hasattr(module, "StopReplicaPartitionV0")
        else (),
        topics=(api.make(module.StopReplicaTopicV1, name="gone", partition_indexes=(0,)),)
        if hasattr(module, "StopReplicaTopicV1")
        else (),
        topic_states=(
            api.make(
                module.StopReplicaTopicState,
                topic_name="gone",
                partition_states=(
                    api.make(
                        module.StopReplicaPartitionState,
                        partition_index=0,
                        leader_epoch=-2,
                        delete_partition=True,
                    ),
                ),
            ),
        )
        if hasattr(module, "StopReplicaTopicState")
        else (),
    )
    with cp_broker.wire("CONTROLLER") as control, cp_broker.wire("PLAINTEXT") as data:
        response = control.request(request)
        assert response.error_code == ErrorCode.none
        assert [p.error_code for p in response.partition_errors] == [ErrorCode.none]
        assert _produce_error(data, "gone") == ErrorCode.not_leader_or_follower
    assert cp_broker.replica("gone", 0) is None


def test_controller_requests_need_cluster_action(broker_factory) -> None:
    # The controller authenticates on the control plane as User:broker (a super user);
    # an anonymous client sending controller requests on the data listener is refused.
    broker = broker_factory(
        {
            **CONTROLLER_OVERRIDES,
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": (
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                'username="broker" password="b" user_broker="b";'
            ),
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:broker",
        }
    )
    assert broker.alive_brokers()  # the controller's requests got through
    with broker.wire("PLAINTEXT") as control:
        response = control.request(update_metadata(8, broker, "x", leader=0))
        assert response.error_code == ErrorCode.cluster_authorization_failed
        response = control.request(leader_and_isr(7, "x", leader=0, leader_epoch=1))
        assert response.error_code == ErrorCode.cluster_authorization_failed


def _gauges(broker: RunningBroker) -> dict[str, float]:
    text = broker.metrics_text()
    return {
        f.name: sum(s.value for s in f.samples)
        for f in text_string_to_metric_families(text)
        if f.type in ("gauge", "unknown")
    }


def test_a_full_data_queue_does_not_hold_back_a_control_request(broker_factory) -> None:
    broker = broker_factory(
        {
            **CONTROLLER_OVERRIDES,
            "queued.max.requests": "4",
            "num.io.threads": "1",
            "num.network.threads": "1",
        }
    )
    broker.create_topic("cp", 1)
    # A stuck data-plane handler (a fault kplane cannot cause on purpose): Metadata blocks.
    release = threading.Event()

    def stuck(request: RequestInfo) -> None:
        if request.plane == "data":
            release.wait(60)

    broker.on_request("Metadata", stuck)
    metadata = api.make(api.request_class(3, 12), topics=None, allow_auto_topic_creation=False)
    clients = [broker.wire("PLAINTEXT") for _ in range(5)]
    try:
        for client in clients:  # one in the handler, four filling the queue
            client.send(metadata)
        queue = "kafka_network_requestchannel_requestqueuesize"
        while _gauges(broker).get(queue) != 4:
            threading.Event().wait(0.05)
        with broker.wire("CONTROLLER") as control:
            response = control.request(update_metadata(8, broker, "cp", leader=0))
            assert response.error_code == ErrorCode.none
            assert _gauges(broker)[queue] == 4  # the data plane is still full
            gauges = _gauges(broker)
            assert gauges["kafka_network_requestchannel_controlplanerequestqueuesize"] == 0
    finally:
        release.set()
        for client in clients:
            client.receive(3, 12)
            client.close()


def test_plane_metrics_have_kip_291_names(cp_broker) -> None:
    with cp_broker.wire("CONTROLLER") as control:
        control.request(update_metadata(8, cp_broker, "m", leader=0))
    gauges = _gauges(cp_broker)
    for name in (
        "kafka_network_requestchannel_requestqueuesize",
        "kafka_network_requestchannel_responsequeuesize",
        "kafka_network_requestchannel_controlplanerequestqueuesize",
        "kafka_network_requestchannel_controlplaneresponsequeuesize",
        "kafka_network_socketserver_controlplaneexpiredconnectionskilledcount",
        "kafka_network_socketserver_controlplanenetworkprocessoravgidlepercent",
        "kafka_server_kafkarequesthandlerpool_controlplanerequesthandleravgidlepercent",
    ):
        assert name in gauges, name
    text = cp_broker.metrics_text()
    assert 'request="UpdateMetadata"' in text and 'plane="control"' in text
    # The data plane's processor idle metric names no control-plane listener.
    for family in text_string_to_metric_families(text):
        if family.name == "kafka_network_socketserver_networkprocessoravgidlepercent":
            assert all(s.labels["listener"] != "CONTROLLER" for s in family.samples)


def test_data_plane_threads_can_give_way_to_the_control_plane(broker_factory) -> None:
    import os

    broker = broker_factory({**CONTROLLER_OVERRIDES, "kplane.data.plane.thread.nice": "7"})
    mine = os.getpriority(os.PRIO_PROCESS, 0)

    def nice(thread) -> int:  # type: ignore[no-untyped-def]
        return os.getpriority(os.PRIO_PROCESS, thread.native_id)

    data_handlers = [t for t in broker.request_handlers("data") if t.native_id]
    assert data_handlers and all(nice(t) == mine + 7 for t in data_handlers)
    control = [t for t in broker.request_handlers("control") if t.native_id]
    assert control and all(nice(t) == mine for t in control)


@pytest.mark.parametrize(
    ("control_plane", "max_bytes", "value_bytes", "role"),
    [
        (True, None, 10, "network-thread"),
        (False, None, 10, "network-thread"),
        (False, None, 70_000, "request-handler"),  # over the default 65536
        (False, "100000", 70_000, "network-thread"),
        (False, "0", 10, "request-handler"),
        (True, "0", 10, "request-handler"),
    ],
)
def test_where_produce_is_handled(
    broker_factory, control_plane, max_bytes, value_bytes, role
) -> None:
    """``kplane.produce.on.network.threads.max.bytes``: a Produce up to that size is handled
    on the data-plane network thread that read it (with or without a control plane), a
    larger one (all, with 0) on a request handler; either way the answer is the same."""
    overrides = dict(CONTROLLER_OVERRIDES) if control_plane else {}
    if max_bytes is not None:
        overrides["kplane.produce.on.network.threads.max.bytes"] = max_bytes
    broker = broker_factory(overrides)
    broker.create_topic("where", 1)
    threads: list[str] = []
    broker.on_request("Produce", lambda _info: threads.append(threading.current_thread().name))
    batch = build_batch([Record(b"k", b"v" * value_bytes)])
    with broker.wire("PLAINTEXT") as data:
        for _ in range(2):
            assert produce(data, "where", batch, acks=1).error_code == ErrorCode.none
    assert len(threads) == 2
    assert all(name.startswith(f"data-plane-kafka-{role}-") for name in threads), threads
