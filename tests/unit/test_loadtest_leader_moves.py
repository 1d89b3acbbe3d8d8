"""The cluster scenarios of ``kplane loadtest`` without I/O: the leader-move steps, their
requests, the brokers' request metrics between two scrapes, the cluster's brokers and what the
results make of it all."""

from __future__ import annotations

import argparse
import uuid
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from kplane.broker.metrics import REQUEST_QUEUE_SIZE, BrokerMetrics
from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.tools.loadtest import runner as loadtest
from kplane.tools.loadtest.cli import add_arguments
from kplane.tools.loadtest.controller import ControlResult, Endpoint
from kplane.tools.loadtest.leader_moves import (
    ELECT,
    REASSIGN,
    elect_request,
    growth,
    next_step,
    reassign_request,
    request_totals,
    rotated,
    settled,
    shows,
)
from kplane.tools.loadtest.metrics import Sample, parse_scrape, split_metric
from kplane.tools.loadtest.results import (
    PROPAGATION_PLANE,
    ScenarioRun,
    mean_broker_times,
    request_rows,
    summarize,
)
from kplane.tools.loadtest.scenarios import (
    CLUSTER_SCENARIOS,
    ClusterTarget,
    Target,
    cluster_broker_overrides,
)
from kplane.tools.loadtest.topics import PartitionState, TopicState

T0 = 1_700_000_000.0


def test_steps_rotate_the_replicas_then_elect_the_first() -> None:
    assert rotated((0, 1, 2)) == (1, 2, 0)
    states = {0: PartitionState(0, 4, (0, 1, 2)), 1: PartitionState(1, 7, (1, 2, 0))}
    reassign = next_step(REASSIGN, states)
    assert reassign.expected == {
        0: PartitionState(0, 5, (1, 2, 0)),
        1: PartitionState(1, 8, (2, 0, 1)),
    }
    elect = next_step(ELECT, reassign.expected)
    assert elect.expected == {
        0: PartitionState(1, 6, (1, 2, 0)),
        1: PartitionState(2, 9, (2, 0, 1)),
    }
    assert elect.changed == 2


def test_a_step_shows_once_every_partition_has_its_leader_replicas_and_epoch() -> None:
    step = next_step(ELECT, {0: PartitionState(0, 4, (1, 2, 0))})

    def topic(leader: int, epoch: int, replicas: tuple[int, ...]) -> TopicState:
        return TopicState(
            uuid.UUID(int=1), (0,), epoch, {0: PartitionState(leader, epoch, replicas)}
        )

    assert shows(step, topic(1, 5, (1, 2, 0)))
    assert shows(step, topic(1, 6, (1, 2, 0)))  # a later epoch (an ISR change) still shows it
    assert not shows(step, topic(0, 4, (1, 2, 0)))  # not there yet
    assert not shows(step, topic(1, 5, (2, 0, 1)))
    assert not shows(step, TopicState(uuid.UUID(int=1), (), 0))


@pytest.mark.parametrize("version", api.kio_versions(ApiKey.ALTER_PARTITION_REASSIGNMENTS))
def test_the_reassignment_request(version: int) -> None:
    request = reassign_request(version, "moves", {1: (2, 0, 1), 0: (1, 2, 0)}, 30_000)
    decoded = api.decode_request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, version, api.encode(request))
    (topic,) = decoded.topics
    assert topic.name == "moves"
    assert [(p.partition_index, p.replicas) for p in topic.partitions] == [
        (0, (1, 2, 0)),
        (1, (2, 0, 1)),
    ]
    assert decoded.timeout.total_seconds() == 30


@pytest.mark.parametrize("version", api.kio_versions(ApiKey.ELECT_LEADERS))
def test_the_preferred_election_request(version: int) -> None:
    request = elect_request(version, "moves", [1, 0], 30_000)
    decoded = api.decode_request(ApiKey.ELECT_LEADERS, version, api.encode(request))
    (wanted,) = decoded.topic_partitions
    assert (wanted.topic, wanted.partitions) == ("moves", (0, 1))
    if version >= 1:
        assert decoded.election_type == 0  # preferred


def _scrape(
    at: float, leader_and_isr: list[tuple[str, float]], update_metadata: int, broker: int = 2
) -> list[Sample]:
    """A broker's scrape after LeaderAndIsr requests (plane, total ms) and ``update_metadata``
    UpdateMetadata requests of 1 ms on the control plane."""
    metrics = BrokerMetrics(clock=lambda: 0)
    metrics.register_gauge(REQUEST_QUEUE_SIZE, "data queue", lambda: 3.0)
    for plane, total in leader_and_isr:
        metrics.record_request("LeaderAndIsr", plane, 0.5, total - 0.5, 0.0, 0.0, 0.0, total)
    for _ in range(update_metadata):
        metrics.record_request("UpdateMetadata", "control", 0.1, 0.9, 0.0, 0.0, 0.0, 1.0)
    metrics.record_request("Produce", "data", 1.0, 1.0, 0.0, 0.0, 0.0, 2.0)
    return parse_scrape(at, generate_latest(metrics.registry).decode(), {"broker": str(broker)})


def test_the_requests_between_two_scrapes_and_their_mean_time() -> None:
    before = request_totals(_scrape(T0, [("control", 4.0)], 1))
    assert before == {
        ("LeaderAndIsr", "control"): (1.0, 4.0),
        ("UpdateMetadata", "control"): (1.0, 1.0),
    }
    after = request_totals(_scrape(T0 + 1, [("control", 4.0), ("control", 10.0)], 1))
    assert growth(before, after) == {("LeaderAndIsr", "control"): (1, 10.0)}
    assert not settled(growth(before, after), {"LeaderAndIsr": 1, "UpdateMetadata": 1})
    later = request_totals(
        _scrape(T0 + 2, [("control", 4.0), ("control", 10.0), ("data", 2.0), ("data", 4.0)], 2)
    )
    assert growth(before, later) == {
        ("LeaderAndIsr", "control"): (1, 10.0),
        ("LeaderAndIsr", "data"): (2, 3.0),  # two in one interval: each the mean
        ("UpdateMetadata", "control"): (1, 1.0),
    }
    assert settled(growth(before, later), {"LeaderAndIsr": 3, "UpdateMetadata": 1})


def test_a_cluster_scrape_carries_the_broker_label() -> None:
    names = {s.metric for s in _scrape(T0, [("data", 3.0)], 0)}
    assert 'RequestQueueSize{broker="2"}' in names
    assert 'TotalTimeMs_count{broker="2",plane="data",request="LeaderAndIsr"}' in names
    assert split_metric('TotalTimeMs_sum{broker="2",plane="data",request="Produce"}') == (
        "TotalTimeMs_sum",
        {"broker": "2", "plane": "data", "request": "Produce"},
    )
    assert split_metric("RequestQueueSize") == ("RequestQueueSize", {})


def test_broker_times_per_broker_from_its_own_first_scrape() -> None:
    samples = [
        *_scrape(T0, [("control", 4.0)], 0),
        *_scrape(T0 + 0.1, [("control", 6.0)], 0, broker=1),  # scraped a little later
        *_scrape(T0 + 1, [("control", 4.0), ("control", 8.0)], 0),
        *_scrape(T0 + 1.1, [("control", 6.0)], 0, broker=1),
    ]
    totals = mean_broker_times(samples, "TotalTimeMs")
    assert totals["LeaderAndIsr/control/broker=2"] == 8.0
    assert "LeaderAndIsr/control/broker=1" not in totals  # nothing grew on broker 1
    assert not any(key.startswith("Produce/") for key in totals)  # one each, before and after


def test_cluster_brokers_as_kplane_cluster_up_lays_them_out() -> None:
    shared = cluster_broker_overrides(
        CLUSTER_SCENARIOS["cluster-shared"], 1, "127.0.0.1:2181", Path("/tmp/b1"), 12
    )
    separated = cluster_broker_overrides(
        CLUSTER_SCENARIOS["cluster-separated"], 1, "127.0.0.1:2181", Path("/tmp/b1"), 12
    )
    assert "listeners=CLIENT://127.0.0.1:0,INTERNAL://127.0.0.1:0" in shared
    assert not any(o.startswith("control.plane.listener.name") for o in shared)
    assert "kplane.produce.on.network.threads.max.bytes=0" in shared  # Kafka's single queue
    assert not any(o.startswith("kplane.produce.on.network.threads") for o in separated)
    assert (
        "listeners=CLIENT://127.0.0.1:0,INTERNAL://127.0.0.1:0,CONTROLLER://127.0.0.1:0"
        in separated
    )
    assert "control.plane.listener.name=CONTROLLER" in separated
    for props in (shared, separated):
        assert "broker.id=1" in props and "inter.broker.listener.name=INTERNAL" in props
        assert "zookeeper.connect=127.0.0.1:2181/kplane" in props
        assert "num.partitions=12" in props and "auto.leader.rebalance.enable=false" in props
    assert CLUSTER_SCENARIOS["cluster-shared"].control_listener == "INTERNAL"
    assert CLUSTER_SCENARIOS["cluster-separated"].control_listener == "CONTROLLER"
    assert {s.brokers for s in CLUSTER_SCENARIOS.values()} == {3}
    client = Endpoint("CLIENT", "127.0.0.1", 1)
    target = Target(0, client, client, (client,), None, 1)
    other = Target(1, Endpoint("CLIENT", "127.0.0.1", 2), client, (client,), None, 1)
    assert ClusterTarget((target, other), "zk").bootstrap == "127.0.0.1:1,127.0.0.1:2"


def _check(*argv: str) -> list[str]:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return loadtest._check(parser.parse_args(list(argv)))[0]


def test_cluster_stands_for_both_cluster_scenarios() -> None:
    assert _check("--scenarios", "cluster") == ["cluster-shared", "cluster-separated"]
    assert _check("--scenarios", "idle,cluster-separated") == ["idle", "cluster-separated"]
    with pytest.raises(ValueError, match=r"choose from .*cluster-shared.*cluster"):
        _check("--scenarios", "clustered")
    with pytest.raises(ValueError, match="--move-rate must be positive"):
        _check("--scenarios", "cluster", "--move-rate", "0")


def _cluster_run(name: str, leader_and_isr_ms: list[float]) -> ScenarioRun:
    client = Endpoint("CLIENT", "127.0.0.1", 1)
    brokers = tuple(Target(i, client, client, (client,), None, 1) for i in range(3))
    control = [ControlResult("LeaderAndIsr", T0, ms, None) for ms in leader_and_isr_ms]
    control += [ControlResult("UpdateMetadata", T0, 1.0, None) for _ in leader_and_isr_ms]
    return ScenarioRun(
        name,
        brokers[0],
        {"ElectLeaders": 2},
        10.0,
        control=control,
        brokers=brokers,
        propagation=[
            ControlResult(ELECT, T0, 150.0, None),
            ControlResult(REASSIGN, T0 + 1, 250.0, "REQUEST_TIMED_OUT"),
        ],
        moves={"steps": {ELECT: 1, REASSIGN: 1}},
    )


def test_cluster_results_rows_and_summary() -> None:
    runs = [
        _cluster_run("cluster-shared", [40.0] * 10),
        _cluster_run("cluster-separated", [4.0] * 10),
    ]
    rows = request_rows(runs)
    planes = [(p, a) for p, a in zip(rows["plane"], rows["api"], strict=True)]
    assert planes.count((PROPAGATION_PLANE, ELECT)) == 2
    assert planes.count(("control", "LeaderAndIsr")) == 20
    summary = summarize(runs, {"sample_every": 100})
    assert summary["ratios"][
        "cluster-shared_LeaderAndIsr_p99/cluster-separated_LeaderAndIsr_p99"
    ] == (pytest.approx(10.0))
    assert summary["ratios"][
        "cluster-shared_LeaderAndIsr_p50/cluster-separated_LeaderAndIsr_p50"
    ] == (pytest.approx(10.0))
    assert "cluster-shared_control_p99/cluster-separated_control_p99" in summary["ratios"]
    cluster = summary["scenarios"]["cluster-shared"]["cluster"]
    assert set(cluster["brokers"]) == {"0", "1", "2"}
    assert cluster["controller"] == 0
    assert cluster["propagation"]["steps"] == 2
    assert cluster["propagation"]["error_names"] == {"REQUEST_TIMED_OUT": 1}
    assert cluster["propagation"]["per_api"][ELECT]["latency_ms"]["p50"] == 150.0
    assert cluster["moves"] == {"steps": {ELECT: 1, REASSIGN: 1}}
