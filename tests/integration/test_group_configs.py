"""Group configs (ConfigResource type GROUP, 32): IncrementalAlterConfigs and DescribeConfigs
over the wire and through confluent-kafka's admin client, Kafka's validation, and a group's
own heartbeat interval answered to its members."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.schema.types import GroupId
from kio.static.primitive import i8, i32, i32Timedelta

from kplane.protocol.errors import ErrorCode
from kplane.testing.plugin import RunningBroker

GROUP = 32
SETTINGS = {
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "500",
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.min.session.timeout.ms": "6000",
}


@pytest.fixture
def broker(broker_factory: Callable[..., RunningBroker]) -> RunningBroker:
    return broker_factory(SETTINGS)


def alter(broker: RunningBroker, group: str, **configs: str) -> tuple[int, str | None]:
    request = IncrementalAlterConfigsRequest(
        resources=(
            AlterConfigsResource(
                resource_type=i8(GROUP),
                resource_name=group,
                configs=tuple(
                    AlterableConfig(name=k.replace("_", "."), config_operation=i8(0), value=v)
                    for k, v in configs.items()
                ),
            ),
        ),
        validate_only=False,
    )
    with broker.wire() as wire:
        (result,) = wire.request(request).responses
    return result.error_code, result.error_message


def described(broker: RunningBroker, group: str) -> dict[str, Any]:
    request = DescribeConfigsRequest(
        resources=(
            DescribeConfigsResource(
                resource_type=i8(GROUP), resource_name=group, configuration_keys=None
            ),
        ),
        include_synonyms=False,
        include_documentation=False,
    )
    with broker.wire() as wire:
        (result,) = wire.request(request).results
    assert result.error_code == ErrorCode.none, result.error_message
    return {c.name: (c.value, int(c.config_source)) for c in result.configs}


def test_group_configs_are_set_described_and_checked(broker: RunningBroker) -> None:
    assert alter(broker, "g-cfg", consumer_heartbeat_interval_ms="700") == (ErrorCode.none, None)
    configs = described(broker, "g-cfg")
    assert configs["consumer.heartbeat.interval.ms"] == ("700", 8)  # GROUP_CONFIG
    assert configs["consumer.session.timeout.ms"] == ("6000", 5)  # DEFAULT_CONFIG: the broker's
    assert configs["share.auto.offset.reset"] == ("latest", 5)
    assert set(configs) == {
        "consumer.session.timeout.ms",
        "consumer.heartbeat.interval.ms",
        "share.session.timeout.ms",
        "share.heartbeat.interval.ms",
        "share.record.lock.duration.ms",
        "share.auto.offset.reset",
        "share.isolation.level",
    }
    refused = [
        {"consumer_session_timeout_ms": "1000"},  # below group.consumer.min.session.timeout.ms
        {"consumer_heartbeat_interval_ms": "6000"},  # not below the session timeout
        {"share_auto_offset_reset": "sometimes"},
        {"share_record_lock_duration_ms": "ten"},
        {"no_such_config": "1"},
    ]
    for configs_ in refused:
        error, message = alter(broker, "g-cfg", **configs_)
        assert error == ErrorCode.invalid_config, (configs_, message)
    assert alter(broker, "g-cfg", share_record_lock_duration_ms="20000")[0] == ErrorCode.none
    assert described(broker, "g-cfg")["consumer.heartbeat.interval.ms"] == ("700", 8)


def test_a_groups_heartbeat_interval_reaches_its_members(broker: RunningBroker) -> None:
    def heartbeat_interval(group: str) -> datetime.timedelta:
        request = ConsumerGroupHeartbeatRequest(
            group_id=GroupId(group),
            member_id="member-1",
            member_epoch=i32(0),
            rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
            subscribed_topic_names=(),
            topic_partitions=(),
        )
        with broker.wire() as wire:
            response = wire.request(request)
        assert response.error_code == ErrorCode.none, response.error_message
        return response.heartbeat_interval

    assert heartbeat_interval("g-default") == datetime.timedelta(milliseconds=500)
    assert alter(broker, "g-own", consumer_heartbeat_interval_ms="900")[0] == ErrorCode.none
    assert heartbeat_interval("g-own") == datetime.timedelta(milliseconds=900)


def test_confluent_admin_alters_and_describes_group_configs(broker: RunningBroker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap()})
    resource = ConfigResource(
        ResourceType.GROUP,
        "g-admin",
        incremental_configs=[
            ConfigEntry(
                "consumer.session.timeout.ms",
                "8000",
                incremental_operation=AlterConfigOpType.SET,
            )
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(10)
    (entries,) = admin.describe_configs([ConfigResource(ResourceType.GROUP, "g-admin")]).values()
    assert entries.result(10)["consumer.session.timeout.ms"].value == "8000"
