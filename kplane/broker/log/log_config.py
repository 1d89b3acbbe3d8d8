"""LogConfigs: a topic's effective log settings — its overrides, else the broker's defaults.

The broker defaults are the current (possibly dynamic, KIP-226) broker config, so a changed
default reaches every existing partition whose topic has no override of its own. Topic
overrides are read from ``/config/topics/<name>`` and re-read when a change notification
names the topic.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from kplane.broker.config.definitions import LONG_MAX
from kplane.broker.config.kafka_config import KafkaConfig
from kplane.broker.config.topic_configs import TOPIC_CONFIGS
from kplane.broker.metadata.kafka_store import KafkaMetadataClient

TOPICS = "topics"


@dataclass(frozen=True, slots=True)
class LogSettings:
    """What a partition's log acts on, by the topic config each field is named after
    (``segment_bytes`` is ``segment.bytes``); the defaults are Kafka's."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    retention_ms: int = 604800000
    retention_bytes: int = -1
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60000
    cleanup_policy: tuple[str, ...] = ("delete",)
    delete_retention_ms: int = 86400000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    min_insync_replicas: int = 1
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    message_timestamp_difference_max_ms: int = LONG_MAX

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        """``message.timestamp.type`` is LogAppendTime (else CreateTime)."""
        return self.message_timestamp_type == "LogAppendTime"


_SETTING_FIELDS = tuple((f.name, f.name.replace("_", ".")) for f in fields(LogSettings))


class LogConfigs:
    """Each topic's effective settings (:class:`LogSettings`), parsed once and cached until
    the topic's or the broker's config changes: the Produce path reads typed fields."""

    def __init__(self, client: KafkaMetadataClient, broker_config: Callable[[], KafkaConfig]):
        self.client = client
        self._broker_config = broker_config
        self._overrides: dict[str, dict[str, str]] = {}
        self._settings: dict[str, tuple[KafkaConfig, LogSettings]] = {}
        self._lock = threading.Lock()

    def on_config_change(self, entity_path: str) -> None:
        """A change notification naming a topic: re-read its overrides when next needed."""
        kind, _, name = entity_path.partition("/")
        if kind == TOPICS:
            self.forget(name)

    def _topic(self, topic: str) -> dict[str, str]:
        overrides = self._overrides.get(topic)
        if overrides is None:
            overrides = self.client.get_entity_config(TOPICS, topic)
            with self._lock:
                self._overrides[topic] = overrides
        return overrides

    def replica_list(self, topic: str, name: str) -> list[str]:
        """A topic's ``leader.replication.throttled.replicas`` or
        ``follower.replication.throttled.replicas`` (``name``): its items, none unset."""
        value = self._topic(topic).get(name)
        return [item for item in value.split(",") if item.strip()] if value else []

    def log_settings(self, topic: str) -> LogSettings:
        """The topic's LogSettings: its overrides, else the current broker defaults (Kafka's
        synonyms: ``retention.ms`` from ``log.retention.ms|minutes|hours``). Cached until
        the topic's config or the broker's config changes."""
        config = self._broker_config()
        cached = self._settings.get(topic)
        if cached is not None and cached[0] is config:
            return cached[1]
        overrides = self._topic(topic)
        values: dict[str, Any] = {}
        for field_name, name in _SETTING_FIELDS:
            text = overrides.get(name)
            if text is None:
                text = self._broker_default(config, name)
            if text is not None:
                values[field_name] = TOPIC_CONFIGS[name].parse(text)
        if "cleanup_policy" in values:
            values["cleanup_policy"] = tuple(values["cleanup_policy"])
        settings = LogSettings(**values)
        with self._lock:
            self._settings[topic] = (config, settings)
        return settings

    @staticmethod
    def _broker_default(config: KafkaConfig, name: str) -> str | None:
        definition = TOPIC_CONFIGS[name]
        for broker_name in definition.broker_synonyms:
            value = config.get(broker_name)
            if value is None:
                continue
            if isinstance(value, list | tuple):
                text = ",".join(str(v) for v in value)
            elif isinstance(value, bool):
                text = str(value).lower()
            else:
                text = str(value)
            return definition.from_broker_value(broker_name, text)
        return None

    def forget(self, topic: str) -> None:
        """Drop a topic's overrides (deleted, or its config changed)."""
        with self._lock:
            self._overrides.pop(topic, None)
            self._settings.pop(topic, None)
