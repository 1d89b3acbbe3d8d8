"""ShareGroupConfig: the ``group.share.*`` broker settings (KIP-932), with Kafka's start-up
checks of their bounds."""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass

from kplane.broker.config.errors import ConfigException
from kplane.broker.config.kafka_config import KafkaConfig


@dataclass(frozen=True)
class ShareGroupConfig:
    """Kafka's defaults; ``enabled`` is ``group.share.enable`` (Kafka 4.2 has share groups
    on in a new cluster, its ``share.version`` feature at 1)."""

    enabled: bool = True
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 200
    record_lock_duration_ms: int = 30_000
    delivery_count_limit: int = 5
    partition_max_record_locks: int = 2_000


def share_group_config_from(config: KafkaConfig) -> ShareGroupConfig:
    """The share settings from the broker's (ConfigException names the offending one)."""
    bounds = (
        ("group.share.session.timeout.ms", "group.share.min.session.timeout.ms",
         "group.share.max.session.timeout.ms"),
        ("group.share.heartbeat.interval.ms", "group.share.min.heartbeat.interval.ms",
         "group.share.max.heartbeat.interval.ms"),
        ("group.share.record.lock.duration.ms", "group.share.min.record.lock.duration.ms",
         "group.share.max.record.lock.duration.ms"),
    )  # fmt: skip
    for name, low, high in bounds:
        value = config.get_int(name)
        if value < config.get_int(low):
            raise ConfigException(f"{name} must be greater than or equal to {low}")
        if value > config.get_int(high):
            raise ConfigException(f"{name} must be less than or equal to {high}")
    session = config.get_int("group.share.session.timeout.ms")
    interval = config.get_int("group.share.heartbeat.interval.ms")
    if interval >= session:
        raise ConfigException(
            "group.share.heartbeat.interval.ms must be less than group.share.session.timeout.ms"
        )
    return ShareGroupConfig(
        enabled=config.get_bool("group.share.enable"),
        session_timeout_ms=session,
        heartbeat_interval_ms=interval,
        max_size=config.get_int("group.share.max.size"),
        record_lock_duration_ms=config.get_int("group.share.record.lock.duration.ms"),
        delivery_count_limit=config.get_int("group.share.delivery.count.limit"),
        partition_max_record_locks=config.get_int("group.share.partition.max.record.locks"),
    )


_DURATION = re.compile(
    r"P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?",
    re.IGNORECASE,
)


def parse_duration(text: str) -> datetime.timedelta | None:
    """An ISO-8601 duration as Java's Duration.parse reads it (days, hours, minutes,
    seconds), None when it is not one."""
    found = _DURATION.fullmatch(text.strip())
    if found is None or not any(found.groupdict().values()):
        return None
    parts = {k: float(v) for k, v in found.groupdict().items() if v}
    return datetime.timedelta(
        days=parts.get("d", 0), hours=parts.get("h", 0), minutes=parts.get("m", 0),
        seconds=parts.get("s", 0),
    )  # fmt: skip
