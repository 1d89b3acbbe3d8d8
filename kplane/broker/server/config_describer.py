"""What DescribeConfigs shows: each config's value, source and synonyms (KIP-226).

Synonyms come in precedence order, source by source: dynamic per-broker, dynamic cluster
default, static, then the definitions' defaults; a topic's own override comes first for
topic configs. Sensitive values are never shown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum

from kplane.broker.config.definitions import (
    CONFIG_DEFS,
    CONFIGS,
    LISTENER_PREFIX,
    ConfigDef,
    DynamicScope,
)
from kplane.broker.config.dynamic_config import DynamicBrokerConfig, is_password
from kplane.broker.config.listener_key import base_name
from kplane.broker.config.synonyms import broker_synonyms
from kplane.broker.config.topic_configs import TOPIC_CONFIGS, TopicConfigDef


class ConfigSource(IntEnum):
    """DescribeConfigs' ``config_source`` codes."""

    UNKNOWN = 0
    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


@dataclass(frozen=True)
class Synonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True)
class ConfigEntry:
    """One described config."""

    name: str
    value: str | None
    read_only: bool
    source: ConfigSource
    sensitive: bool
    synonyms: tuple[Synonym, ...]
    type_code: int
    documentation: str | None


def default_text(definition: ConfigDef) -> str | None:
    """A definition's default as Kafka prints it (lists comma-joined, booleans lower case)."""
    value = definition.default
    if value is None:
        return None
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def topic_default(definition: TopicConfigDef) -> str | None:
    """A topic config's default as Kafka's ``LogConfig`` has it: the default of the broker
    config it follows, in the topic config's unit (``retention.ms`` of ``log.retention.hours``)."""
    for name in definition.broker_synonyms:
        broker = CONFIGS.get(name)
        text = default_text(broker) if broker is not None else None
        if text is not None:
            return definition.from_broker_value(name, text)
    return None


class ConfigDescriber:
    """Builds DescribeConfigs entries from a broker's layered config."""

    def __init__(self, dynamic: DynamicBrokerConfig) -> None:
        self.dynamic = dynamic

    def _layers(self, per_broker: bool) -> list[tuple[Mapping[str, str], ConfigSource]]:
        d = self.dynamic
        layers: list[tuple[Mapping[str, str], ConfigSource]] = []
        if per_broker:
            layers.append((d.dynamic_broker, ConfigSource.DYNAMIC_BROKER_CONFIG))
        layers.append((d.dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG))
        layers.append((d.static_props, ConfigSource.STATIC_BROKER_CONFIG))
        return layers

    def _synonyms(self, names: Iterable[str], per_broker: bool) -> list[Synonym]:
        names = list(names)
        out = [
            Synonym(n, layer[n], source)
            for layer, source in self._layers(per_broker)
            for n in names
            if n in layer
        ]
        for n in names:
            definition = CONFIGS.get(n)
            text = default_text(definition) if definition else None
            if text is not None:
                out.append(Synonym(n, text, ConfigSource.DEFAULT_CONFIG))
        return out

    @staticmethod
    def _key_synonyms(key: str) -> tuple[str, ...]:
        name = base_name(key)
        return (key, *broker_synonyms(name)) if key != name else broker_synonyms(name)

    def broker_entries(
        self, per_broker: bool, keys: Iterable[str] | None, docs: bool
    ) -> list[ConfigEntry]:
        """Entries of this broker (every config) or of the cluster default (only what is
        set there)."""
        d = self.dynamic
        if per_broker:
            prefixed = {
                k for layer, _ in self._layers(True) for k in layer if k.startswith(LISTENER_PREFIX)
            }
            names = [c.name for c in CONFIG_DEFS] + sorted(prefixed)
        else:
            names = sorted(d.dynamic_default)
        wanted = set(keys) if keys is not None else None
        entries = []
        for key in names:
            if wanted is not None and key not in wanted:
                continue
            definition = CONFIGS.get(base_name(key))
            if definition is None:
                continue
            synonyms = self._synonyms(self._key_synonyms(key), per_broker)
            own = next((s for s in synonyms if s.name == key), None)
            sensitive = is_password(key)
            entries.append(
                ConfigEntry(
                    key,
                    None if sensitive or own is None else own.value,
                    definition.dynamic is DynamicScope.READ_ONLY,
                    synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
                    sensitive,
                    tuple(_hide(s) for s in synonyms) if sensitive else tuple(synonyms),
                    definition.type.wire_code,
                    definition.doc if docs else None,
                )
            )
        return entries

    def topic_entries(
        self, overrides: Mapping[str, str], keys: Iterable[str] | None, docs: bool
    ) -> list[ConfigEntry]:
        """Entries of a topic: its overrides, else the broker configs they follow."""
        wanted = set(keys) if keys is not None else None
        entries = []
        for name, definition in TOPIC_CONFIGS.items():
            if wanted is not None and name not in wanted:
                continue
            synonyms = []
            if name in overrides:
                synonyms.append(Synonym(name, overrides[name], ConfigSource.TOPIC_CONFIG))
            synonyms += self._synonyms(definition.broker_synonyms, True)
            value = synonyms[0].value if synonyms else None
            if value is not None and synonyms and synonyms[0].source != ConfigSource.TOPIC_CONFIG:
                value = definition.from_broker_value(synonyms[0].name, value)
            entries.append(
                ConfigEntry(
                    name,
                    value,
                    False,
                    synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
                    False,
                    tuple(synonyms),
                    definition.type.wire_code,
                    definition.doc if docs else None,
                )
            )
        return entries


def _hide(synonym: Synonym) -> Synonym:
    return Synonym(synonym.name, None, synonym.source)
