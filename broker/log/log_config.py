"""LogConfigs: a topic's effective log settings — its overrides, else the broker's defaults.

The broker defaults are the current (possibly dynamic, KIP-226) broker config, so a changed
default reaches every existing partition whose topic has no override of its own. Topic
overrides are read from ``/config/topics/<name>`` and re-read when a change notification
names the topic.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from broker.config.kafka_config import KafkaConfig
from broker.metadata.kafka_store import KafkaMetadataClient

TOPICS = "topics"


class LogConfigs:
    """Effective ``min.insync.replicas``, ``max.message.bytes`` and timestamp settings per
    topic."""

    def __init__(self, client: KafkaMetadataClient, broker_config: Callable[[], KafkaConfig]):
        self.client = client
        self._broker_config = broker_config
        self._overrides: dict[str, dict[str, str]] = {}
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

    def _int(self, topic: str, topic_name: str, broker_name: str) -> int:
        value = self._topic(topic).get(topic_name)
        return int(value) if value is not None else int(self._broker_config().get(broker_name))

    def min_insync_replicas(self, topic: str) -> int:
        return self._int(topic, "min.insync.replicas", "min.insync.replicas")

    def max_message_bytes(self, topic: str) -> int:
        return self._int(topic, "max.message.bytes", "message.max.bytes")

    def log_append_time(self, topic: str) -> bool:
        """``message.timestamp.type`` is LogAppendTime (else CreateTime)."""
        value = self._topic(topic).get("message.timestamp.type")
        if value is None:
            value = str(self._broker_config().get("log.message.timestamp.type"))
        return value == "LogAppendTime"

    def timestamp_difference_max_ms(self, topic: str) -> int:
        return self._int(
            topic, "message.timestamp.difference.max.ms", "log.message.timestamp.difference.max.ms"
        )

    def forget(self, topic: str) -> None:
        """Drop a deleted topic's overrides."""
        with self._lock:
            self._overrides.pop(topic, None)
