"""KIP-932 share groups: membership on the wire (ShareGroupHeartbeat, ShareGroupDescribe,
ListGroups, DeleteGroups), then confluent-kafka's ShareConsumer (librdkafka 2.16) reading
through ShareFetch and ShareAcknowledge. Every wait is on a condition with a deadline."""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.share_group_describe.v1.request import ShareGroupDescribeRequest
from kio.schema.share_group_heartbeat.v1.request import ShareGroupHeartbeatRequest
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32

from kplane.protocol.errors import ErrorCode
from kplane.testing.plugin import RunningBroker


def heartbeat(
    broker: RunningBroker,
    group: str,
    member_id: str,
    epoch: int,
    topics: tuple[str, ...] | None = None,
) -> Any:
    with broker.wire() as wire:
        return wire.request(
            ShareGroupHeartbeatRequest(
                group_id=GroupId(group),
                member_id=member_id,
                member_epoch=i32(epoch),
                subscribed_topic_names=(
                    tuple(TopicName(t) for t in topics) if topics is not None else None
                ),
            )
        )


def describe(broker: RunningBroker, group: str) -> Any:
    with broker.wire() as wire:
        response = wire.request(
            ShareGroupDescribeRequest(
                group_ids=(GroupId(group),), include_authorized_operations=False
            )
        )
    return response.groups[0]


def list_groups(broker: RunningBroker, *types: str) -> dict[str, tuple[str, str]]:
    with broker.wire() as wire:
        response = wire.request(ListGroupsRequest(states_filter=(), types_filter=types))
    return {g.group_id: (g.group_type, g.group_state) for g in response.groups}


def test_members_share_partitions_and_the_group_is_listed_and_deleted(
    broker: RunningBroker,
) -> None:
    broker.create_topic("sg-one", 1)
    group = "sg-membership"
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    joined = heartbeat(broker, group, a, 0, ("sg-one",))
    assert joined.error_code == ErrorCode.none, joined
    assert joined.member_epoch == 1
    (assigned,) = joined.assignment.topic_partitions
    assert tuple(assigned.partitions) == (0,)
    second = heartbeat(broker, group, b, 0, ("sg-one",))
    assert second.error_code == ErrorCode.none
    assert second.member_epoch == 2
    assert tuple(second.assignment.topic_partitions[0].partitions) == (0,), "shared partition"
    described = describe(broker, group)
    assert described.error_code == ErrorCode.none
    assert described.group_state == "Stable"
    assert described.assignor_name == "simple"
    assert {m.member_id for m in described.members} == {a, b}
    assert all(m.assignment.topic_partitions[0].topic_name == "sg-one" for m in described.members)
    assert list_groups(broker, "share")[group] == ("share", "Stable")
    assert group not in list_groups(broker, "consumer")
    with broker.wire() as wire:
        refused = wire.request(DeleteGroupsRequest(groups_names=(GroupId(group),)))
    assert refused.results[0].error_code == ErrorCode.non_empty_group
    fenced = heartbeat(broker, group, a, 7)
    assert fenced.error_code == ErrorCode.fenced_member_epoch
    for member in (a, b):
        left = heartbeat(broker, group, member, -1)
        assert left.error_code == ErrorCode.none and left.member_epoch == -1
    assert describe(broker, group).group_state == "Empty"
    with broker.wire() as wire:
        deleted = wire.request(DeleteGroupsRequest(groups_names=(GroupId(group),)))
    assert deleted.results[0].error_code == ErrorCode.none
    assert describe(broker, group).error_code == ErrorCode.group_id_not_found


def test_bad_heartbeats_get_kafkas_errors(broker: RunningBroker) -> None:
    broker.create_topic("sg-bad", 1)
    member = str(uuid.uuid4())
    assert heartbeat(broker, "sg-bad", member, 0).error_code == ErrorCode.invalid_request
    assert heartbeat(broker, "sg-bad", "", 0, ("sg-bad",)).error_code == ErrorCode.invalid_request
    assert (
        heartbeat(broker, "sg-bad-unknown", member, 3, ("sg-bad",)).error_code
        == ErrorCode.group_id_not_found
    )
    assert heartbeat(broker, "sg-bad", member, 0, ("sg-bad",)).error_code == ErrorCode.none
    other = str(uuid.uuid4())
    assert heartbeat(broker, "sg-bad", other, 5, ("sg-bad",)).error_code == (
        ErrorCode.unknown_member_id
    )


def test_share_groups_can_be_turned_off(broker_factory: Any) -> None:
    off = broker_factory({"group.share.enable": "false"})
    with off.wire() as wire:
        versions = wire.request(
            ApiVersionsRequest(client_software_name="t", client_software_version="1")
        )
    keys = {int(k.api_key) for k in versions.api_keys}
    assert 76 not in keys and 77 not in keys
