"""A group's own configs (Kafka's GroupConfig, ConfigResource type GROUP): KIP-848's
``consumer.*`` and KIP-932's ``share.*``, each defaulting to its broker config and checked
against the broker's bounds as Kafka does. They live at ``/config/groups/<group>`` (the
group id quoted as one znode name) with a change notification, and are cached here until
one names the group.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import quote, unquote

from kplane.broker.config.definitions import ConfigType
from kplane.broker.config.errors import ConfigException
from kplane.broker.config.kafka_config import KafkaConfig
from kplane.broker.group.share_config import parse_duration

GROUPS = "groups"
"""The entity type of group configs under ``/config``."""


@dataclass(frozen=True, slots=True)
class GroupConfigDef:
    name: str
    type: ConfigType
    broker_default: str
    """The broker config whose value is the default."""
    bounds: tuple[str, str] | None = None
    """The broker configs of the lowest and highest value allowed."""
    choices: tuple[str, ...] = ()
    documentation: str = ""


GROUP_CONFIGS: Mapping[str, GroupConfigDef] = {
    d.name: d
    for d in (
        GroupConfigDef(
            "consumer.session.timeout.ms",
            ConfigType.INT,
            "group.consumer.session.timeout.ms",
            ("group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms"),
            documentation="The timeout to detect client failures when using the consumer "
            "group protocol.",
        ),
        GroupConfigDef(
            "consumer.heartbeat.interval.ms",
            ConfigType.INT,
            "group.consumer.heartbeat.interval.ms",
            (
                "group.consumer.min.heartbeat.interval.ms",
                "group.consumer.max.heartbeat.interval.ms",
            ),
            documentation="The heartbeat interval given to the members.",
        ),
        GroupConfigDef(
            "share.session.timeout.ms",
            ConfigType.INT,
            "group.share.session.timeout.ms",
            ("group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms"),
            documentation="The timeout to detect client failures when using the share group "
            "protocol.",
        ),
        GroupConfigDef(
            "share.heartbeat.interval.ms",
            ConfigType.INT,
            "group.share.heartbeat.interval.ms",
            ("group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms"),
            documentation="The heartbeat interval given to the members of a share group.",
        ),
        GroupConfigDef(
            "share.record.lock.duration.ms",
            ConfigType.INT,
            "group.share.record.lock.duration.ms",
            (
                "group.share.min.record.lock.duration.ms",
                "group.share.max.record.lock.duration.ms",
            ),
            documentation="The record acquisition lock duration in milliseconds for share groups.",
        ),
        GroupConfigDef(
            "share.auto.offset.reset",
            ConfigType.STRING,
            "",
            choices=("latest", "earliest"),
            documentation="The strategy to initialize the share-partition start offset: "
            "latest, earliest, or by_duration:<ISO-8601 duration>.",
        ),
        GroupConfigDef(
            "share.isolation.level",
            ConfigType.STRING,
            "",
            choices=("read_uncommitted", "read_committed"),
            documentation="Controls how to read records written transactionally.",
        ),
    )
}
"""Every group config by name."""

_FIXED_DEFAULTS = {"share.auto.offset.reset": "latest", "share.isolation.level": "read_uncommitted"}


def _by_duration(value: str) -> bool:
    """``by_duration:<ISO-8601 duration>`` (KIP-1106), a share.auto.offset.reset value."""
    kind, _, duration = value.strip().partition(":")
    return kind.lower() == "by_duration" and parse_duration(duration) is not None


def group_node(group_id: str) -> str:
    """A group id as one znode name under ``/config/groups``."""
    return quote(group_id, safe="")


class GroupConfigManager:
    """Groups' configs: their overrides (from ``read(group_id)``), else the broker's values
    (``broker()``, the current KafkaConfig)."""

    def __init__(
        self,
        broker: Callable[[], KafkaConfig] | None,
        read: Callable[[str], dict[str, str]] = lambda _group_id: {},
    ) -> None:
        self._broker = broker
        self._read = read
        self._cache: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()

    def default(self, name: str) -> str:
        """The value a group has without an override of ``name``."""
        definition = GROUP_CONFIGS[name]
        if definition.name in _FIXED_DEFAULTS:
            return _FIXED_DEFAULTS[definition.name]
        if self._broker is None:
            raise ConfigException(f"{name}: no broker config to default to", name=name)
        return str(self._broker().get(definition.broker_default))

    def overrides(self, group_id: str) -> dict[str, str]:
        """The group's own configs (read once, until a change notification names it)."""
        with self._lock:
            cached = self._cache.get(group_id)
        if cached is None:
            cached = self._read(group_id)
            with self._lock:
                self._cache[group_id] = cached
        return dict(cached)

    def get_int(self, group_id: str, name: str, fallback: int) -> int:
        """An int group config of ``group_id``: its override, else ``fallback`` (the broker's
        value as the coordinator has it)."""
        value = self.overrides(group_id).get(name)
        return int(value) if value is not None else fallback

    def on_config_change(self, entity_path: str) -> None:
        """A change notification: forget the cached overrides of the group it names."""
        kind, _, node = entity_path.partition("/")
        if kind == GROUPS:
            with self._lock:
                self._cache.pop(unquote(node), None)

    def validate(self, configs: Mapping[str, str]) -> None:
        """Kafka's GroupConfig checks: known names, values of the right type within the
        broker's bounds, and each heartbeat interval below its session timeout
        (ConfigException names the config)."""
        values: dict[str, int] = {}
        for name, value in configs.items():
            definition = GROUP_CONFIGS.get(name)
            if definition is None:
                raise ConfigException(f"Unknown group config name: {name}", name=name)
            if definition.choices:
                if name == "share.auto.offset.reset" and _by_duration(value):
                    continue
                if value.lower() not in definition.choices:
                    raise ConfigException(
                        f"Invalid value {value} for configuration {name}: String must be one "
                        f"of: {', '.join(definition.choices)}",
                        name=name,
                    )
                continue
            try:
                number = int(value.strip())
            except ValueError:
                raise ConfigException(
                    f"Invalid value {value} for configuration {name}: Not a number of type INT",
                    name=name,
                ) from None
            assert definition.bounds is not None and self._broker is not None
            low_name, high_name = definition.bounds
            broker = self._broker()
            low, high = broker.get_int(low_name), broker.get_int(high_name)
            if number < low:
                raise ConfigException(
                    f"{name} must be greater than or equal to {low_name}", name=name
                )
            if number > high:
                raise ConfigException(
                    f"{name} must be less than or equal to {high_name}", name=name
                )
            values[name] = number
        for kind in ("consumer", "share"):
            interval = values.get(f"{kind}.heartbeat.interval.ms")
            session = values.get(f"{kind}.session.timeout.ms")
            interval = (
                interval
                if interval is not None
                else int(self.default(f"{kind}.heartbeat.interval.ms"))
            )
            session = (
                session if session is not None else int(self.default(f"{kind}.session.timeout.ms"))
            )
            if interval >= session:
                raise ConfigException(
                    f"{kind}.heartbeat.interval.ms must be less than {kind}.session.timeout.ms",
                    name=f"{kind}.heartbeat.interval.ms",
                )
