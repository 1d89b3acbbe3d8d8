"""KafkaConfig: the one object a broker is built from, made from server.properties."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import structlog

from kplane.broker.config import listeners as lc
from kplane.broker.config.definitions import CONFIG_DEFS, CONFIGS, ConfigType
from kplane.broker.config.endpoint import EndPoint, SecurityProtocol
from kplane.broker.config.errors import ConfigException
from kplane.broker.config.listener_key import ListenerKey
from kplane.broker.config.properties import apply_overrides, load_properties

log = structlog.get_logger(__name__)

SASL_JAAS_CONFIG = "sasl.jaas.config"


class KafkaConfig:
    """Validated, typed broker configuration.

    Built with :meth:`from_properties` or :meth:`load`; any invalid value raises
    :class:`ConfigException` naming the key. Unknown keys are kept in :attr:`props` and logged
    as ``unknown config``, as Kafka logs unused configs; Kafka's configs kplane does not act on
    are named in one ``configs accepted but not acted on`` line.
    """

    __slots__ = (
        "_listener_values",
        "_values",
        "advertised_listeners",
        "broker_id",
        "control_plane_listener_name",
        "inter_broker_listener_name",
        "inter_broker_security_protocol",
        "listener_security_protocol_map",
        "listeners",
        "log_dirs",
        "props",
    )

    props: Mapping[str, str]
    broker_id: int
    listeners: tuple[EndPoint, ...]
    advertised_listeners: tuple[EndPoint, ...]
    listener_security_protocol_map: Mapping[str, SecurityProtocol]
    inter_broker_listener_name: str
    inter_broker_security_protocol: SecurityProtocol
    control_plane_listener_name: str | None
    log_dirs: list[str]

    def __init__(self, props: Mapping[str, str], log_unused: bool = True) -> None:
        self.props = MappingProxyType(dict(props))
        self._values = {d.name: d.parse(props.get(d.name)) for d in CONFIG_DEFS}
        self._listener_values = _listener_overrides(props, log_unused)
        if log_unused:
            _log_unused(props)

        broker_id = self._values["broker.id"]
        self.broker_id = 0 if broker_id == -1 else broker_id
        resolved = lc.resolve_listeners(
            listeners=self._values[lc.LISTENERS],
            advertised_listeners=self._values[lc.ADVERTISED_LISTENERS],
            protocol_map=self._values[lc.LISTENER_SECURITY_PROTOCOL_MAP],
            inter_broker_listener_name=self._values[lc.INTER_BROKER_LISTENER_NAME],
            security_inter_broker_protocol=(
                self._values[lc.SECURITY_INTER_BROKER_PROTOCOL]
                if lc.SECURITY_INTER_BROKER_PROTOCOL in props
                else None
            ),
            control_plane_listener_name=self._values[lc.CONTROL_PLANE_LISTENER_NAME],
        )
        self.listeners = resolved.listeners
        self.advertised_listeners = resolved.advertised_listeners
        self.listener_security_protocol_map = MappingProxyType(dict(resolved.protocol_map))
        self.inter_broker_listener_name = resolved.inter_broker_listener_name
        self.inter_broker_security_protocol = resolved.inter_broker_security_protocol
        self.control_plane_listener_name = resolved.control_plane_listener_name
        self.log_dirs = self._log_dirs()

    @classmethod
    def from_properties(cls, props: Mapping[str, str], log_unused: bool = True) -> KafkaConfig:
        """Validate ``props`` (server.properties after overrides, or with dynamic values
        on top) and build the config; ``log_unused`` logs unknown and unused keys."""
        return cls(props, log_unused)

    @classmethod
    def load(cls, path: str, overrides: Sequence[str] = ()) -> KafkaConfig:
        """Load a properties file, apply ``--override key=value`` entries, validate."""
        return cls(apply_overrides(load_properties(path), overrides))

    def get(self, name: str) -> Any:
        """The typed value of ``name``: the configured value, else the default.

        Raises ``KeyError`` for a name that is not a known config.
        """
        return self._values[name]

    def get_int(self, name: str) -> int:
        """An INT, SHORT or LONG config that has a value (typed: no cast at the caller)."""
        return int(self._typed(name, _INTEGER_TYPES))

    def get_bool(self, name: str) -> bool:
        """A BOOLEAN config."""
        return bool(self._typed(name, (ConfigType.BOOLEAN,)))

    def get_str(self, name: str) -> str:
        """A STRING or CLASS config that has a value."""
        return str(self._typed(name, (ConfigType.STRING, ConfigType.CLASS)))

    def _typed(self, name: str, types: tuple[ConfigType, ...]) -> Any:
        """The value of ``name`` after checking the table gives it one of ``types``."""
        definition = CONFIGS[name]
        if definition.type not in types:
            raise TypeError(f"{name} is a {definition.type.value} config")
        value = self._values[name]
        if value is None:
            raise ValueError(f"{name} has no value (its default is none)")
        return value

    def listener_get(self, listener_name: str, name: str) -> Any:
        """``listener.name.<listener in lower case>.<name>`` if set, else :meth:`get`."""
        value = self._listener_values.get((listener_name.lower(), name), _UNSET)
        return self.get(name) if value is _UNSET else value

    def sasl_jaas_config(self, listener_name: str, mechanism: str) -> Any:
        """``listener.name.<l>.<mechanism>.sasl.jaas.config``, else the listener's or the
        broker's ``sasl.jaas.config`` (KIP-226's lookup order)."""
        key = (listener_name.lower(), f"{mechanism.lower()}.{SASL_JAAS_CONFIG}")
        if key in self._listener_values:
            return self._listener_values[key]
        return self.listener_get(listener_name, SASL_JAAS_CONFIG)

    def advertised(self, listener_name: str) -> EndPoint | None:
        """The advertised endpoint of a listener name (any case), or None."""
        wanted = lc.normalise(listener_name)
        return next((e for e in self.advertised_listeners if e.listener_name == wanted), None)

    @property
    def control_plane_listener(self) -> EndPoint | None:
        """The bound endpoint reserved for controller requests (KIP-291), if any."""
        name = self.control_plane_listener_name
        return next((e for e in self.listeners if e.listener_name == name), None)

    @property
    def data_plane_listeners(self) -> tuple[EndPoint, ...]:
        """Every bound endpoint except the control-plane one."""
        name = self.control_plane_listener_name
        return tuple(e for e in self.listeners if e.listener_name != name)

    @property
    def log_retention_ms(self) -> int:
        """Retention in ms: log.retention.ms, else .minutes, else .hours; -1 means forever."""
        ms = self.get("log.retention.ms")
        if ms is None:
            minutes = self.get("log.retention.minutes")
            ms = (
                minutes * 60_000
                if minutes is not None
                else self.get("log.retention.hours") * 3_600_000
            )
        return -1 if ms < 0 else ms

    def __repr__(self) -> str:
        listeners = ",".join(e.connection_string for e in self.listeners)
        return f"KafkaConfig(broker_id={self.broker_id}, listeners={listeners!r})"

    def _log_dirs(self) -> list[str]:
        """``log.dirs``, else ``log.dir``: comma-separated (Kafka's ``Csv.parseCsvList``)."""
        key = "log.dirs" if self._values["log.dirs"] is not None else "log.dir"
        dirs = [d.strip() for d in self._values[key].split(",") if d.strip()]
        if not dirs:
            raise ConfigException(f"{key}: no log directory defined", name=key)
        return dirs


_UNSET = object()
_INTEGER_TYPES = (ConfigType.SHORT, ConfigType.INT, ConfigType.LONG)
LISTENER_MECHANISM_CONFIGS = frozenset(
    {
        SASL_JAAS_CONFIG,
        "sasl.login.callback.handler.class",
        "sasl.login.class",
        "sasl.server.callback.handler.class",
        "connections.max.reauth.ms",
    }
)
"""Configs that may be set per listener and SASL mechanism,
``listener.name.<listener>.<mechanism>.<config>`` (Kafka's ``ListenerMechanismConfigs``)."""


def _log_unused(props: Mapping[str, str]) -> None:
    """Warn of each unknown key; name the set configs kplane does not act on in one line."""
    not_acted_on = []
    for key in props:
        parsed = ListenerKey.parse(key)
        definition = CONFIGS.get(key if parsed is None else parsed.name)
        if definition is None and parsed is None:
            log.warning("unknown config", key=key)
        elif definition is not None and not definition.honoured:
            not_acted_on.append(key)
    if not_acted_on:
        log.info("configs accepted but not acted on", keys=sorted(not_acted_on))


def _listener_overrides(props: Mapping[str, str], log_unused: bool) -> dict[tuple[str, str], Any]:
    """Parse every ``listener.name.<listener>.<config>`` whose config is known."""
    values: dict[tuple[str, str], Any] = {}
    for key, raw in props.items():
        parsed = ListenerKey.parse(key)
        if parsed is None:
            continue
        definition = CONFIGS.get(parsed.name)
        if (
            not parsed.listener
            or definition is None
            or (parsed.mechanism is not None and parsed.name not in LISTENER_MECHANISM_CONFIGS)
        ):
            if log_unused:
                log.warning("unknown config", key=key)
            continue
        middle = f"{parsed.mechanism}." if parsed.mechanism else ""
        values[(parsed.listener, middle + parsed.name)] = definition.parse(raw, key=key)
    return values
