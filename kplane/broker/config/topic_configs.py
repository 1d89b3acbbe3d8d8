"""Topic configs (Kafka's ``LogConfig``) and the broker configs that are their defaults.

Every topic config of Kafka 3.9 (:mod:`kplane.broker.config.kafka_table`), with Kafka's type,
validator and documentation. A topic config that a topic does not override takes the value of
its broker synonyms (Kafka's ``ServerTopicConfigSynonyms``), the first one set winning:
``retention.ms`` follows ``log.retention.ms``, else ``log.retention.minutes``, else
``log.retention.hours`` (converted to milliseconds); one without broker synonyms (the
throttled-replica lists, the tiered-storage switches) takes Kafka's ``LogConfig`` default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kplane.broker.config.definitions import ConfigType, parse_value
from kplane.broker.config.errors import ConfigException
from kplane.broker.config.kafka_table import KAFKA_TOPIC_CONFIGS, KafkaConfigRow
from kplane.broker.config.synonyms import MS_PER_UNIT
from kplane.broker.config.validators import Validator, kafka_validator


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    """One topic config: its name, how it parses, and the broker configs it defaults to."""

    name: str
    type: ConfigType
    documentation: str
    validator: Validator | None = field(default=None, compare=False)
    broker_synonyms: tuple[str, ...] = ()
    """Broker configs supplying the value when the topic does not set it, first one set wins."""
    default: str | None = None
    """Kafka's default, as text, for a config without broker synonyms."""

    def parse(self, raw: str) -> Any:
        """Parse and validate a value of this config; errors name this topic config."""
        return parse_value(self.name, self.type, raw, self.validator)

    def from_broker_value(self, broker_name: str, text: str) -> str:
        """The value of this topic config, as text, when it comes from the broker synonym
        ``broker_name`` set to ``text`` (``log.retention.hours=168`` gives
        ``retention.ms=604800000``; a negative retention means forever, -1, as in Kafka)."""
        factor = MS_PER_UNIT.get(broker_name)
        if factor is None and self.name != RETENTION_MS:
            return text
        try:
            value = int(text.strip()) * (factor or 1)
        except ValueError:
            return text
        if self.name == RETENTION_MS and value < 0:
            value = -1
        return str(value)


RETENTION_MS = "retention.ms"


def _from_kafka(row: KafkaConfigRow) -> TopicConfigDef:
    return TopicConfigDef(
        row.name,
        ConfigType(row.type),
        row.documentation,
        kafka_validator(row.validator, row.valid_values),
        row.server_synonyms,
        None if row.server_synonyms else row.default,
    )


TOPIC_CONFIGS: Mapping[str, TopicConfigDef] = {
    name: _from_kafka(row) for name, row in KAFKA_TOPIC_CONFIGS.items()
}
"""Every topic config by name."""

BROKER_TO_TOPIC: Mapping[str, str] = {
    broker_name: d.name for d in TOPIC_CONFIGS.values() for broker_name in d.broker_synonyms
}
"""The topic config each broker config is a default of (``log.retention.hours`` ->
``retention.ms``)."""


def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Check a topic's config overrides as Kafka's ``LogConfig.validate`` does: known names,
    values of the right type within range, min.compaction.lag.ms <= max.compaction.lag.ms.
    Returns the checked overrides.

    Raises ConfigException naming the offending key.
    """
    checked: dict[str, str] = {}
    values: dict[str, Any] = {}
    for key, raw in configs.items():
        definition = TOPIC_CONFIGS.get(key)
        if definition is None:
            raise ConfigException(f"Unknown topic config name: {key}", name=key)
        if raw is None:
            raise ConfigException(f"Null value not supported for topic configs: {key}", name=key)
        values[key] = definition.parse(raw)
        checked[key] = raw
    low, high = values.get("min.compaction.lag.ms"), values.get("max.compaction.lag.ms")
    if low is not None and high is not None and low > high:
        raise ConfigException(
            f"conflict topic config setting min.compaction.lag.ms ({low}) > "
            f"max.compaction.lag.ms ({high})",
            name="min.compaction.lag.ms",
        )
    return checked
