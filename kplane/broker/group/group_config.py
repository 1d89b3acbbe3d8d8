"""GroupConfig: the group.* and offsets.* broker settings the group coordinator uses."""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from kplane.broker.config.errors import ConfigException
from kplane.broker.config.kafka_config import KafkaConfig

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class GroupConfig:
    """The settings with Kafka's defaults (``consumer_*``: KIP-848's ``group.consumer.*``)."""

    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    max_size: int = 2**31 - 1
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096
    new_member_join_timeout_ms: int = 300_000
    consumer_session_timeout_ms: int = 45_000
    consumer_heartbeat_interval_ms: int = 5_000
    consumer_max_size: int = 2**31 - 1
    consumer_assignors: tuple[str, ...] = ("uniform", "range")
    """Server-side assignors by name; the first is the default."""
    consumer_protocol: bool = True
    """Whether the consumer protocol is served (group.coordinator.rebalance.protocols)."""
    consumer_migration_policy: str = "bidirectional"
    """Which online conversions of a group with members are allowed
    (group.consumer.migration.policy: disabled, upgrade, downgrade, bidirectional)."""

    @property
    def upgrade_enabled(self) -> bool:
        """A classic group with members may become a consumer group."""
        return self.consumer_migration_policy in ("upgrade", "bidirectional")

    @property
    def downgrade_enabled(self) -> bool:
        """A consumer group left with classic members only may become a classic group."""
        return self.consumer_migration_policy in ("downgrade", "bidirectional")


_ASSIGNOR_CLASSES = {"UniformAssignor": "uniform", "RangeAssignor": "range"}


def _assignor_name(entry: str) -> str:
    """``uniform``/``range``, or Kafka's class name of one (its last component)."""
    name = entry.strip()
    return _ASSIGNOR_CLASSES.get(name.rsplit(".", 1)[-1], name)


def group_config_from(config: KafkaConfig) -> GroupConfig:
    """The coordinator's settings from the broker's, with Kafka's start-up checks of the
    consumer protocol's bounds (ConfigException names the offending setting)."""
    session = config.get_int("group.consumer.session.timeout.ms")
    interval = config.get_int("group.consumer.heartbeat.interval.ms")
    bounds = (
        ("group.consumer.session.timeout.ms", session, "group.consumer.min.session.timeout.ms",
         "group.consumer.max.session.timeout.ms"),
        ("group.consumer.heartbeat.interval.ms", interval,
         "group.consumer.min.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms"),
    )  # fmt: skip
    for name, value, low, high in bounds:
        if value < config.get_int(low):
            raise ConfigException(f"{name} must be greater than or equal to {low}")
        if value > config.get_int(high):
            raise ConfigException(f"{name} must be less than or equal to {high}")
    if interval >= session:
        raise ConfigException(
            "group.consumer.heartbeat.interval.ms must be less than "
            "group.consumer.session.timeout.ms"
        )
    protocols = set(config.get("group.coordinator.rebalance.protocols") or ())
    if "classic" not in protocols:
        raise ConfigException(
            "group.coordinator.rebalance.protocols: disabling the 'classic' protocol is not "
            "supported"
        )
    if "share" in protocols:  # Kafka 4.1+ deprecates the value: share.version decides
        log.warning(
            "'share' in group.coordinator.rebalance.protocols is deprecated and changes nothing",
            reason="share groups are served with group.share.enable (Kafka: the share.version "
            "feature), not through this list",
        )
    for unserved in sorted(protocols - {"classic", "consumer", "share"}):
        log.warning("group protocol not served", protocol=unserved)
    assignors = tuple(_assignor_name(a) for a in config.get("group.consumer.assignors") or ())
    unknown = [a for a in assignors if a not in _ASSIGNOR_CLASSES.values()]
    if unknown or not assignors:
        raise ConfigException(
            f"group.consumer.assignors: unknown assignor {', '.join(unknown) or '(none)'}; "
            "kplane has uniform and range"
        )
    return GroupConfig(
        initial_rebalance_delay_ms=config.get_int("group.initial.rebalance.delay.ms"),
        min_session_timeout_ms=config.get_int("group.min.session.timeout.ms"),
        max_session_timeout_ms=config.get_int("group.max.session.timeout.ms"),
        max_size=config.get_int("group.max.size"),
        offsets_retention_ms=config.get_int("offsets.retention.minutes") * 60_000,
        consumer_session_timeout_ms=session,
        consumer_heartbeat_interval_ms=interval,
        consumer_max_size=config.get_int("group.consumer.max.size"),
        consumer_assignors=assignors,
        consumer_protocol="consumer" in protocols,
        consumer_migration_policy=str(config.get("group.consumer.migration.policy")).lower(),
    )
