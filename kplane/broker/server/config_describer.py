"""What DescribeConfigs shows: each config's value, source and synonyms (KIP-226), as Kafka's
``ConfigHelper`` does.

Synonyms come in precedence order, source by source: dynamic per-broker, dynamic cluster
default, static, then the definitions' defaults; a topic's own override comes first for
topic configs. As in Kafka, the synonyms before the first one named for the described config
are left out (``log.retention.hours`` does not list ``log.retention.ms``; a topic's
``retention.ms`` lists its broker synonyms only once ``log.retention.ms`` is set somewhere).
Sensitive values are never shown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum

from kplane.broker.config.definitions import CONFIG_DEFS, CONFIGS, LISTENER_PREFIX, DynamicScope
from kplane.broker.config.dynamic_config import DynamicBrokerConfig, is_password
from kplane.broker.config.listener_key import base_name
from kplane.broker.config.synonyms import broker_synonyms
from kplane.broker.config.topic_configs import TOPIC_CONFIGS, TopicConfigDef
from kplane.broker.group.group_configs import GROUP_CONFIGS


class ConfigSource(IntEnum):
    """DescribeConfigs' ``config_source`` codes."""

    UNKNOWN = 0
    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


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


def topic_default(definition: TopicConfigDef) -> str | None:
    """A topic config's default as Kafka's ``LogConfig`` has it: the default of the broker
    config it follows, in the topic config's unit (``retention.ms`` of ``log.retention.hours``),
    else its own."""
    for name in definition.broker_synonyms:
        text = CONFIGS[name].default_text
        if text is not None:
            return definition.from_broker_value(name, text)
    return definition.default


def _from(name: str, synonyms: list[Synonym]) -> list[Synonym]:
    """``synonyms`` from the first one named ``name`` on (Kafka's ``dropWhile``)."""
    first = next((i for i, s in enumerate(synonyms) if s.name == name), len(synonyms))
    return synonyms[first:]


class ConfigDescriber:
    """Builds DescribeConfigs entries from a broker's layered config."""

    def __init__(self, dynamic: DynamicBrokerConfig) -> None:
        self.dynamic = dynamic

    def _layers(self) -> list[tuple[Mapping[str, str], ConfigSource]]:
        d = self.dynamic
        return [
            (d.dynamic_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
            (d.dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
            (d.static_props, ConfigSource.STATIC_BROKER_CONFIG),
        ]

    def _synonyms(self, names: Iterable[str]) -> list[Synonym]:
        """Every value of ``names``, source by source, in precedence order."""
        names = list(names)
        out = [
            Synonym(n, layer[n], source)
            for layer, source in self._layers()
            for n in names
            if n in layer
        ]
        for n in names:
            definition = CONFIGS.get(n)
            text = definition.default_text if definition else None
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
            layers = [layer for layer, _ in self._layers()]
            prefixed = {k for layer in layers for k in layer if k.startswith(LISTENER_PREFIX)}
            names = [
                c.name for c in CONFIG_DEFS if not c.internal or any(c.name in x for x in layers)
            ] + sorted(prefixed)
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
            synonyms = _from(key, self._synonyms(self._key_synonyms(key)))
            if not per_broker:
                synonyms = [
                    s for s in synonyms if s.source is ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
                ]
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
                    definition.documentation if docs and key == definition.name else None,
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
            broker = self._synonyms(definition.broker_synonyms)
            if name in overrides:
                value: str | None = overrides[name]
            elif broker:
                value = definition.from_broker_value(broker[0].name, broker[0].value or "")
            else:
                value = definition.default
            synonyms = []
            if name in overrides:
                synonyms.append(Synonym(name, value, ConfigSource.TOPIC_CONFIG))
            if definition.broker_synonyms:
                synonyms += _from(definition.broker_synonyms[0], broker)
            entries.append(
                ConfigEntry(
                    name,
                    value,
                    False,
                    synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
                    False,
                    tuple(synonyms),
                    definition.type.wire_code,
                    definition.documentation if docs else None,
                )
            )
        return entries


def group_entries(
    overrides: Mapping[str, str],
    default: Callable[[str], str],
    keys: Iterable[str] | None,
    docs: bool,
) -> list[ConfigEntry]:
    """Entries of a group: its overrides, else the broker's values (``default(name)``)."""
    wanted = set(keys) if keys is not None else None
    entries = []
    for name, definition in GROUP_CONFIGS.items():
        if wanted is not None and name not in wanted:
            continue
        own = name in overrides
        value = overrides[name] if own else default(name)
        source = ConfigSource.GROUP_CONFIG if own else ConfigSource.DEFAULT_CONFIG
        entries.append(
            ConfigEntry(
                name,
                value,
                False,
                source,
                False,
                (Synonym(name, value, source),),
                definition.type.wire_code,
                definition.documentation if docs else None,
            )
        )
    return entries


def client_metrics_entries(
    configs: Mapping[str, str], keys: Iterable[str] | None
) -> list[ConfigEntry]:
    """Entries of a client-metrics subscription: the configs it was given, as Kafka shows
    them (no defaults, no synonyms, no type)."""
    wanted = set(keys) if keys else None
    source = ConfigSource.CLIENT_METRICS_CONFIG
    return [
        ConfigEntry(name, value, False, source, False, (), 0, None)
        for name, value in sorted(configs.items())
        if wanted is None or name in wanted
    ]


def _hide(synonym: Synonym) -> Synonym:
    return Synonym(synonym.name, None, synonym.source)
