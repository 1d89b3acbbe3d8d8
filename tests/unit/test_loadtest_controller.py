"""The fake controller's requests: every version round-trips and says what the plan says."""

from __future__ import annotations

import uuid

import pytest

from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode
from kplane.tools.loadtest.controller import (
    ControlPlan,
    Endpoint,
    leader_and_isr_request,
    response_errors,
    update_metadata_request,
)

TOPIC_ID = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
ENDPOINTS = (
    Endpoint("CLIENT", "127.0.0.1", 9092),
    Endpoint("INTERNAL", "127.0.0.1", 9093),
    Endpoint("CONTROLLER", "127.0.0.1", 9094),
)
PLAN = ControlPlan(
    broker_id=3,
    endpoints=ENDPOINTS,
    leader_endpoint=ENDPOINTS[2],
    topic="loadtest-control",
    topic_id=TOPIC_ID,
    partitions=(0, 1, 2, 3),
    controller_epoch=7,
)
CONTROLLER_EPOCH = 7
EPOCH = 41


def partition_states(request: object, grouped: str = "topic_states") -> list[tuple[str, object]]:
    """(topic name, partition state) in either layout (flat before v5, grouped after)."""
    flat = [(s.topic_name, s) for s in getattr(request, "ungrouped_partition_states", ())]
    return flat + [
        (t.topic_name, s) for t in getattr(request, grouped, ()) for s in t.partition_states
    ]


@pytest.mark.parametrize("version", list(api.kio_versions(ApiKey.UPDATE_METADATA)))
def test_update_metadata_round_trips_every_version(version: int) -> None:
    request = update_metadata_request(version, PLAN, EPOCH)
    assert type(request) is api.request_class(ApiKey.UPDATE_METADATA, version)
    decoded = api.decode_request(ApiKey.UPDATE_METADATA, version, api.encode(request))
    assert decoded == request

    assert decoded.controller_id == 3
    assert decoded.controller_epoch == CONTROLLER_EPOCH
    states = partition_states(decoded)
    assert [(name, s.partition_index) for name, s in states] == [
        ("loadtest-control", p) for p in range(4)
    ]
    for _, s in states:
        assert (s.leader, s.leader_epoch, s.zk_version) == (3, EPOCH, EPOCH)
        assert s.isr == s.replicas == (3,)
    (broker,) = decoded.live_brokers
    assert broker.id == 3
    if version == 0:
        assert (broker.v0_host, broker.v0_port) == ("127.0.0.1", 9092)
    else:
        assert [(e.host, e.port, e.security_protocol) for e in broker.endpoints] == [
            ("127.0.0.1", p, 0) for p in (9092, 9093, 9094)
        ]
    if version >= 3:
        assert [e.listener for e in broker.endpoints] == ["CLIENT", "INTERNAL", "CONTROLLER"]
    if version >= 7:
        assert [t.topic_id for t in decoded.topic_states] == [TOPIC_ID]


@pytest.mark.parametrize("version", list(api.kio_versions(ApiKey.LEADER_AND_ISR)))
def test_leader_and_isr_round_trips_every_version(version: int) -> None:
    request = leader_and_isr_request(version, PLAN, EPOCH)
    assert type(request) is api.request_class(ApiKey.LEADER_AND_ISR, version)
    decoded = api.decode_request(ApiKey.LEADER_AND_ISR, version, api.encode(request))
    assert decoded == request

    assert (decoded.controller_id, decoded.controller_epoch) == (3, CONTROLLER_EPOCH)
    states = partition_states(decoded)
    assert [s.partition_index for _, s in states] == [0, 1, 2, 3]
    for name, s in states:
        assert name == "loadtest-control"
        assert (s.leader, s.leader_epoch, s.partition_epoch) == (3, EPOCH, EPOCH)
        assert s.isr == s.replicas == (3,)
        assert getattr(s, "is_new", False) is False
    (leader,) = decoded.live_leaders
    assert (leader.broker_id, leader.host_name, leader.port) == (3, "127.0.0.1", 9094)
    if version >= 5:
        assert decoded.type_ == 0
        assert [t.topic_id for t in decoded.topic_states] == [TOPIC_ID]


def test_response_without_errors_has_none() -> None:
    response = api.make(api.response_class(ApiKey.UPDATE_METADATA, 8), error_code=ErrorCode.none)
    assert response_errors(response) is None


def test_response_errors_are_found_in_nested_partitions() -> None:
    module = api.response_module(ApiKey.LEADER_AND_ISR, 7)

    def partition(index: int, code: ErrorCode) -> object:
        return api.make(module.LeaderAndIsrPartitionError, partition_index=index, error_code=code)

    topic = api.make(
        module.LeaderAndIsrTopicError,
        topic_id=TOPIC_ID,
        partition_errors=(
            partition(0, ErrorCode.none),
            partition(1, ErrorCode.stale_controller_epoch),
            partition(2, ErrorCode.stale_controller_epoch),
            partition(3, ErrorCode.fenced_leader_epoch),
        ),
    )
    response = api.make(
        api.response_class(ApiKey.LEADER_AND_ISR, 7), error_code=ErrorCode.none, topics=(topic,)
    )
    assert response_errors(response) == "FENCED_LEADER_EPOCH,STALE_CONTROLLER_EPOCH"


def test_response_top_level_error() -> None:
    response = api.make(
        api.response_class(ApiKey.UPDATE_METADATA, 0), error_code=ErrorCode.stale_controller_epoch
    )
    assert response_errors(response) == "STALE_CONTROLLER_EPOCH"
