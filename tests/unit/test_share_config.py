"""The share-group settings: group.share.* with Kafka's start-up checks, and the durations
share.auto.offset.reset's by_duration takes."""

from __future__ import annotations

import datetime

import pytest
from structlog.testing import capture_logs

from kplane.broker.config.errors import ConfigException
from kplane.broker.config.kafka_config import KafkaConfig
from kplane.broker.group.group_config import group_config_from
from kplane.broker.group.group_configs import GroupConfigManager
from kplane.broker.group.share_config import parse_duration, share_group_config_from


def config(**overrides: str) -> KafkaConfig:
    return KafkaConfig.from_properties(
        {
            "broker.id": "0",
            "log.dirs": "/tmp/unused",
            **{k.replace("_", "."): v for k, v in overrides.items()},
        }
    )


def test_kafka_4_defaults() -> None:
    found = share_group_config_from(config())
    assert found.enabled
    assert (found.session_timeout_ms, found.heartbeat_interval_ms) == (45_000, 5_000)
    assert (found.record_lock_duration_ms, found.delivery_count_limit) == (30_000, 5)
    assert found.partition_max_record_locks == 2_000


def test_bounds_are_checked_at_start_up() -> None:
    with pytest.raises(ConfigException, match=r"group\.share\.record\.lock\.duration\.ms"):
        share_group_config_from(config(group_share_record_lock_duration_ms="5000"))
    with pytest.raises(ConfigException, match=r"must be less than group\.share\.session"):
        share_group_config_from(
            config(
                group_share_heartbeat_interval_ms="45000",
                group_share_max_heartbeat_interval_ms="60000",
                group_share_session_timeout_ms="45000",
            )
        )


def test_iso_8601_durations() -> None:
    assert parse_duration("PT1H") == datetime.timedelta(hours=1)
    assert parse_duration("P1DT2M3.5S") == datetime.timedelta(days=1, minutes=2, seconds=3.5)
    assert parse_duration("1h") is None
    assert parse_duration("P") is None


def test_a_group_may_start_by_duration() -> None:
    groups = GroupConfigManager(lambda: config())
    groups.validate({"share.auto.offset.reset": "by_duration:PT30M"})
    with pytest.raises(ConfigException):
        groups.validate({"share.auto.offset.reset": "by_duration:soon"})


def test_share_in_the_rebalance_protocols_is_said_to_change_nothing() -> None:
    """As Kafka 4.1+: the value is deprecated, share groups follow their own switch."""
    with capture_logs() as logs:
        group_config_from(config(group_coordinator_rebalance_protocols="classic,consumer,share"))
    said = [e for e in logs if e["log_level"] == "warning"]
    assert [e["event"] for e in said] == [
        "'share' in group.coordinator.rebalance.protocols is deprecated and changes nothing"
    ]
    assert "group.share.enable" in said[0]["reason"]
