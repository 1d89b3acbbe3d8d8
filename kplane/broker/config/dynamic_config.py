"""DynamicBrokerConfig (KIP-226): static, cluster-default and per-broker configs, layered.

Precedence: dynamic per-broker (``/config/brokers/<id>``) > dynamic cluster default
(``/config/brokers/<default>``) > static (server.properties) > the definition's default.
Dynamic values live in the metadata store as ``{"version":1,"config":{...}}``; passwords are
stored encoded with ``password.encoder.secret``. A change is announced under
``/config/changes``; every broker watching it reloads, and the components whose configs
changed are reconfigured — each validates the new config first, so a change any of them
refuses changes nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Protocol

import structlog

from kplane.broker.config.definitions import CONFIGS, ConfigType, DynamicScope
from kplane.broker.config.errors import ConfigException
from kplane.broker.config.kafka_config import KafkaConfig
from kplane.broker.config.listener_key import base_name
from kplane.broker.config.password_encoder import PasswordDecodeError, PasswordEncoder, reencode
from kplane.broker.config.synonyms import dynamic_synonym

log = structlog.get_logger(__name__)

BROKERS = "brokers"
DEFAULT_ENTITY = "<default>"
_PASSWORD_ENCODER_CONFIGS = ("password.encoder.secret", "password.encoder.old.secret")


class BrokerReconfigurable(Protocol):
    """A broker component that follows config changes (Kafka's BrokerReconfigurable)."""

    @property
    def reconfigurable_configs(self) -> frozenset[str]:
        """Config names (without listener prefix) this component reacts to."""
        ...

    def validate_reconfiguration(self, new: KafkaConfig) -> None:
        """Raise ConfigException when ``new`` cannot be applied."""
        ...

    def reconfigure(self, old: KafkaConfig, new: KafkaConfig) -> None:
        """Apply ``new``; called only after every component validated it."""
        ...


def is_password(key: str) -> bool:
    definition = CONFIGS.get(base_name(key))
    return definition is not None and definition.type is ConfigType.PASSWORD


class EntityConfigStore(Protocol):
    """Where dynamic configs are kept: the metadata store's ``/config/<type>/<name>``
    (``broker.metadata.kafka_store.KafkaMetadataClient``)."""

    def get_entity_config(self, entity_type: str, name: str) -> dict[str, str]: ...

    def set_entity_config(self, entity_type: str, name: str, configs: dict[str, str]) -> None: ...


class DynamicBrokerConfig:
    """The layered config of one broker, and the mechanism that changes it at runtime."""

    def __init__(self, static: KafkaConfig, client: EntityConfigStore) -> None:
        self.static = static
        self.broker_id = static.broker_id
        self.client = client
        self.static_props: dict[str, str] = dict(static.props)
        self.dynamic_default: dict[str, str] = {}
        self.dynamic_broker: dict[str, str] = {}
        self.current = static
        self._encoder = _encoder(static, "password.encoder.secret")
        self._old_encoder = _encoder(static, "password.encoder.old.secret")
        self._reconfigurables: list[BrokerReconfigurable] = []
        self._lock = threading.RLock()

    # start-up ------------------------------------------------------------------------
    def initialize(self) -> KafkaConfig:
        """Read the dynamic configs from the store (re-encoding passwords kept under
        ``password.encoder.old.secret``) and build the current config; ConfigException
        when the stored values do not make a valid config."""
        with self._lock:
            self.dynamic_default = self._load(DEFAULT_ENTITY)
            self.dynamic_broker = self._load(str(self.broker_id))
            self.current = self._build(self.dynamic_default, self.dynamic_broker)
            return self.current

    def on_config_change(self, entity_path: str) -> None:
        """A change notification: reload when it names a broker entity."""
        if entity_path.startswith(f"{BROKERS}/"):
            self.reload()

    def add_reconfigurable(self, component: BrokerReconfigurable) -> None:
        """Reconfigure ``component`` on changes to its configs. As Kafka's
        verifyReconfigurableConfigs, each of them must be dynamic in the config table (a
        component's own custom configs aside): a scope declared in two places agrees."""
        custom: frozenset[str] = getattr(component, "custom_configs", frozenset)()
        static = sorted(
            name
            for name in component.reconfigurable_configs - custom
            if (d := CONFIGS.get(base_name(name))) is None or d.dynamic is DynamicScope.READ_ONLY
        )
        if static:
            raise ValueError(
                f"{type(component).__name__} reconfigures configs that are not dynamic: {static}"
            )
        self._reconfigurables.append(component)

    def remove_reconfigurable(self, component: BrokerReconfigurable) -> None:
        if component in self._reconfigurables:
            self._reconfigurables.remove(component)

    # reading -------------------------------------------------------------------------
    def entity_configs(self, entity: str) -> dict[str, str]:
        """The dynamic configs of ``entity`` (a broker id or ``<default>``), decoded."""
        if entity == DEFAULT_ENTITY:
            return dict(self.dynamic_default)
        if entity == str(self.broker_id):
            return dict(self.dynamic_broker)
        return self._load(entity)

    # changing ------------------------------------------------------------------------
    def validate(self, entity: str, configs: Mapping[str, str]) -> KafkaConfig | None:
        """Check that ``entity``'s dynamic configs may become ``configs``: Kafka's rules,
        then every component affected on this broker. The config it would produce (None
        for another broker's entity); ConfigException with the reason otherwise."""
        per_broker = entity != DEFAULT_ENTITY
        custom = frozenset().union(
            *(getattr(c, "custom_configs", frozenset)() for c in self._reconfigurables)
        )
        check_dynamic_configs(configs, per_broker, custom)
        if any(is_password(k) for k in configs) and self._encoder is None:
            raise ConfigException(
                "Password encoder secret not configured: set password.encoder.secret in "
                "server.properties to store password configs dynamically",
                name="password.encoder.secret",
            )
        if entity not in (DEFAULT_ENTITY, str(self.broker_id)):
            return None
        with self._lock:
            default = dict(configs) if not per_broker else self.dynamic_default
            broker = dict(configs) if per_broker else self.dynamic_broker
            new = self._build(default, broker)
            for component in self._affected(self.current, new):
                component.validate_reconfiguration(new)
            return new

    def alter(self, entity: str, configs: Mapping[str, str]) -> None:
        """Validate, then store ``configs`` as ``entity``'s whole dynamic config; every
        broker (this one through its watch) applies it."""
        self.validate(entity, configs)
        stored = {k: self._encode(v) if is_password(k) else v for k, v in sorted(configs.items())}
        self.client.set_entity_config(BROKERS, entity, stored)
        log.info("dynamic broker config stored", entity=entity, keys=sorted(configs))
        self.reload()  # the store's watch does too; applying is idempotent

    def reload(self) -> None:
        """Re-read both entities and apply what changed."""
        with self._lock:
            default = self._load(DEFAULT_ENTITY)
            broker = self._load(str(self.broker_id))
            if (default, broker) == (self.dynamic_default, self.dynamic_broker):
                return
            try:
                new = self._build(default, broker)
                affected = self._affected(self.current, new)
                for component in affected:
                    component.validate_reconfiguration(new)
            except ConfigException as exc:
                log.error("dynamic config not applied", reason=str(exc))
                return
            old = self.current
            self.dynamic_default, self.dynamic_broker, self.current = default, broker, new
            for component in affected:
                component.reconfigure(old, new)
            log.info(
                "dynamic broker config applied",
                changed=sorted(changed_keys(old, new)),
                components=[type(c).__name__ for c in affected],
            )

    # internals -----------------------------------------------------------------------
    def _affected(self, old: KafkaConfig, new: KafkaConfig) -> list[BrokerReconfigurable]:
        changed = {base_name(k) for k in changed_keys(old, new)}
        return [c for c in self._reconfigurables if c.reconfigurable_configs & changed]

    def _build(self, default: Mapping[str, str], broker: Mapping[str, str]) -> KafkaConfig:
        return KafkaConfig.from_properties(
            {**self.static_props, **default, **broker}, log_unused=False
        )

    def _load(self, entity: str) -> dict[str, str]:
        stored = self.client.get_entity_config(BROKERS, entity)
        out = {}
        rewrite = False
        for key, value in stored.items():
            if not is_password(key):
                out[key] = value
                continue
            out[key], fresh = self._decode(key, value)
            rewrite |= fresh is not None
            if fresh is not None:
                stored[key] = fresh
        if rewrite:
            self.client.set_entity_config(BROKERS, entity, stored)
            log.info("passwords re-encoded with the new password.encoder.secret", entity=entity)
        return out

    def _decode(self, key: str, value: str) -> tuple[str, str | None]:
        """The clear password, and its re-encoding when it was under the old secret."""
        if self._encoder is None:
            raise ConfigException(
                f"{key}: stored encoded, but password.encoder.secret is not configured",
                name="password.encoder.secret",
            )
        try:
            return self._encoder.decode(value), None
        except PasswordDecodeError:
            if self._old_encoder is None:
                raise ConfigException(
                    f"{key}: cannot decode with password.encoder.secret (set the previous "
                    "secret as password.encoder.old.secret)",
                    name="password.encoder.secret",
                ) from None
        clear = self._old_encoder.decode(value)
        return clear, reencode(value, self._old_encoder, self._encoder)

    def _encode(self, value: str) -> str:
        assert self._encoder is not None
        return self._encoder.encode(value)


def _encoder(config: KafkaConfig, key: str) -> PasswordEncoder | None:
    secret = config.get(key)
    if secret is None or not secret.value:
        return None
    return PasswordEncoder(
        secret.value,
        key_factory_algorithm=config.get("password.encoder.keyfactory.algorithm"),
        cipher_algorithm=config.get("password.encoder.cipher.algorithm"),
        key_length=config.get_int("password.encoder.key.length"),
        iterations=config.get_int("password.encoder.iterations"),
    )


def changed_keys(old: KafkaConfig, new: KafkaConfig) -> set[str]:
    """Every key whose text differs between two configs' properties."""
    keys = set(old.props) | set(new.props)
    return {k for k in keys if old.props.get(k) != new.props.get(k)}


def check_dynamic_configs(
    configs: Iterable[str], per_broker: bool, custom: frozenset[str] = frozenset()
) -> None:
    """Kafka's rules for a dynamic broker config, each with what to do instead. ``custom``
    names configs a pluggable component (a metrics reporter) declares."""
    for key in configs:
        name = base_name(key)
        definition = CONFIGS.get(name)
        if definition is None and key in custom:
            continue
        if definition is None:
            raise ConfigException(f"Unknown broker config: {key}", name=key)
        if key in _PASSWORD_ENCODER_CONFIGS or definition.dynamic is DynamicScope.READ_ONLY:
            instead = dynamic_synonym(name)
            hint = (
                f"; set {instead} instead" if instead else "; change server.properties and restart"
            )
            raise ConfigException(f"Cannot update these configs dynamically: {key}{hint}", name=key)
        if key == name and definition.listener_prefix_required:
            raise ConfigException(
                f"{key}: this security config can be updated dynamically only per listener, "
                f"as listener.name.<listener name>.{name}",
                name=key,
            )
        if not per_broker and (definition.dynamic is DynamicScope.PER_BROKER or key != name):
            raise ConfigException(
                f"Cannot update {key} at the default cluster level, broker id must be "
                "specified (it is a per-broker config)",
                name=key,
            )
