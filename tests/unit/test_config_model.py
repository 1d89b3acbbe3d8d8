"""The config model against Kafka's: KIP-226 scopes, synonyms, topic configs, wire type codes."""

from __future__ import annotations

import pytest

from kplane.broker.config.definitions import (
    CONFIG_DEFS,
    CONFIGS,
    LONG_MAX,
    UNKNOWN_CONFIG_TYPE,
    ConfigType,
    DynamicScope,
)
from kplane.broker.config.errors import ConfigException
from kplane.broker.config.synonyms import broker_synonyms, dynamic_synonym
from kplane.broker.config.topic_configs import (
    BROKER_TO_TOPIC,
    TOPIC_CONFIGS,
    validate_topic_configs,
)

RO, BROKER, CLUSTER = DynamicScope.READ_ONLY, DynamicScope.PER_BROKER, DynamicScope.CLUSTER_WIDE

# --- scopes (Kafka's DynamicBrokerConfig) ------------------------------------------------

SCOPES = {
    # DynamicThreadPool
    "num.io.threads": CLUSTER,
    "num.network.threads": CLUSTER,
    "num.replica.fetchers": CLUSTER,
    "num.recovery.threads.per.data.dir": CLUSTER,
    "background.threads": CLUSTER,
    # LogCleaner
    "log.cleaner.threads": CLUSTER,
    "log.cleaner.io.max.bytes.per.second": CLUSTER,
    "log.cleaner.dedupe.buffer.size": CLUSTER,
    "log.cleaner.io.buffer.size": CLUSTER,
    "log.cleaner.io.buffer.load.factor": CLUSTER,
    "log.cleaner.backoff.ms": CLUSTER,
    "log.cleaner.enable": RO,
    # DynamicLogConfig: the broker defaults of topic configs
    "log.segment.bytes": CLUSTER,
    "log.roll.ms": CLUSTER,
    "log.roll.jitter.ms": CLUSTER,
    "log.retention.ms": CLUSTER,
    "log.retention.bytes": CLUSTER,
    "log.cleanup.policy": CLUSTER,
    "log.flush.interval.messages": CLUSTER,
    "log.flush.interval.ms": CLUSTER,
    "log.index.size.max.bytes": CLUSTER,
    "log.index.interval.bytes": CLUSTER,
    "log.cleaner.delete.retention.ms": CLUSTER,
    "log.cleaner.min.compaction.lag.ms": CLUSTER,
    "log.cleaner.max.compaction.lag.ms": CLUSTER,
    "log.cleaner.min.cleanable.ratio": CLUSTER,
    "log.segment.delete.delay.ms": CLUSTER,
    "log.preallocate": CLUSTER,
    "log.message.timestamp.type": CLUSTER,
    "log.message.downconversion.enable": CLUSTER,
    "message.max.bytes": CLUSTER,
    "min.insync.replicas": CLUSTER,
    "compression.type": CLUSTER,
    "unclean.leader.election.enable": CLUSTER,
    # ... but not their other-unit synonyms
    "log.retention.hours": RO,
    "log.retention.minutes": RO,
    "log.roll.hours": RO,
    "log.roll.jitter.hours": RO,
    "log.flush.scheduler.interval.ms": RO,
    # metrics reporters, producer ids
    "metric.reporters": CLUSTER,
    "producer.id.expiration.ms": CLUSTER,
    # DynamicListenerConfig and DynamicSecurityConfigs
    "listeners": BROKER,
    "advertised.listeners": BROKER,
    "listener.security.protocol.map": BROKER,
    "ssl.keystore.location": BROKER,
    "ssl.keystore.password": BROKER,
    "ssl.truststore.location": BROKER,
    "ssl.client.auth": BROKER,
    "ssl.enabled.protocols": BROKER,
    "ssl.cipher.suites": BROKER,
    "ssl.endpoint.identification.algorithm": BROKER,
    "sasl.enabled.mechanisms": BROKER,
    "sasl.jaas.config": BROKER,
    # read-only
    "broker.id": RO,
    "log.dirs": RO,
    "inter.broker.listener.name": RO,
    "security.inter.broker.protocol": RO,
    "control.plane.listener.name": RO,
    "ssl.principal.mapping.rules": RO,
    "queued.max.requests": RO,
    "auto.create.topics.enable": RO,
    "password.encoder.secret": RO,
    "password.encoder.old.secret": RO,
    "password.encoder.keyfactory.algorithm": RO,
    "password.encoder.cipher.algorithm": RO,
    "password.encoder.key.length": RO,
    "password.encoder.iterations": RO,
    "alter.config.policy.class.name": RO,
}


@pytest.mark.parametrize("name", sorted(SCOPES))
def test_dynamic_scope_is_kafkas(name: str) -> None:
    assert CONFIGS[name].dynamic is SCOPES[name]


def test_listener_prefix_is_required_for_kafkas_reconfigurable_ssl_configs_only() -> None:
    required = {d.name for d in CONFIG_DEFS if d.listener_prefix_required}
    assert required == {
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
        "ssl.key.password",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.truststore.certificates",
    }
    assert all(CONFIGS[name].dynamic is BROKER for name in required)


# --- new configs: Kafka's types and defaults ---------------------------------------------

DEFAULTS = {
    "background.threads": (ConfigType.INT, 10),
    "num.replica.fetchers": (ConfigType.INT, 1),
    "num.recovery.threads.per.data.dir": (ConfigType.INT, 1),
    "log.cleanup.policy": (ConfigType.LIST, ["delete"]),
    "log.roll.ms": (ConfigType.LONG, None),
    "log.roll.hours": (ConfigType.INT, 168),
    "log.roll.jitter.ms": (ConfigType.LONG, None),
    "log.roll.jitter.hours": (ConfigType.INT, 0),
    "log.flush.interval.messages": (ConfigType.LONG, LONG_MAX),
    "log.flush.interval.ms": (ConfigType.LONG, None),
    "log.flush.scheduler.interval.ms": (ConfigType.LONG, LONG_MAX),
    "log.index.interval.bytes": (ConfigType.INT, 4096),
    "log.index.size.max.bytes": (ConfigType.INT, 10485760),
    "log.preallocate": (ConfigType.BOOLEAN, False),
    "log.message.timestamp.type": (ConfigType.STRING, "CreateTime"),
    "log.message.downconversion.enable": (ConfigType.BOOLEAN, True),
    "log.segment.delete.delay.ms": (ConfigType.LONG, 60000),
    "log.cleaner.enable": (ConfigType.BOOLEAN, True),
    "log.cleaner.threads": (ConfigType.INT, 1),
    "log.cleaner.dedupe.buffer.size": (ConfigType.LONG, 134217728),
    "log.cleaner.io.buffer.size": (ConfigType.INT, 524288),
    "log.cleaner.io.buffer.load.factor": (ConfigType.DOUBLE, 0.9),
    "log.cleaner.backoff.ms": (ConfigType.LONG, 15000),
    "log.cleaner.min.cleanable.ratio": (ConfigType.DOUBLE, 0.5),
    "log.cleaner.delete.retention.ms": (ConfigType.LONG, 86400000),
    "log.cleaner.min.compaction.lag.ms": (ConfigType.LONG, 0),
    "log.cleaner.max.compaction.lag.ms": (ConfigType.LONG, LONG_MAX),
    "metric.reporters": (ConfigType.LIST, []),
    "password.encoder.secret": (ConfigType.PASSWORD, None),
    "password.encoder.old.secret": (ConfigType.PASSWORD, None),
    "password.encoder.keyfactory.algorithm": (ConfigType.STRING, None),
    "password.encoder.cipher.algorithm": (ConfigType.STRING, "AES/CBC/PKCS5Padding"),
    "password.encoder.key.length": (ConfigType.INT, 128),
    "password.encoder.iterations": (ConfigType.INT, 4096),
    "alter.config.policy.class.name": (ConfigType.CLASS, None),
    "offsets.topic.replication.factor": (ConfigType.SHORT, 3),
}


@pytest.mark.parametrize("name", sorted(DEFAULTS))
def test_type_and_default_are_kafkas(name: str) -> None:
    assert (CONFIGS[name].type, CONFIGS[name].default) == DEFAULTS[name]


@pytest.mark.parametrize(
    ("name", "text", "expectation"),
    [
        ("password.encoder.key.length", "7", "value must be at least 8"),
        ("password.encoder.iterations", "1023", "value must be at least 1024"),
        ("log.cleanup.policy", "delete,purge", "'purge' is not one of compact, delete"),
        ("log.message.timestamp.type", "createtime", "expected one of CreateTime, LogAppendTime"),
        ("log.cleaner.min.cleanable.ratio", "1.5", "value must be no more than 1"),
        ("log.roll.hours", "0", "value must be at least 1"),
        ("log.index.size.max.bytes", "3", "value must be at least 4"),
        ("offsets.topic.replication.factor", "32768", "not a number of type SHORT"),
        ("metric.reporters", "a.B,c-d", "'c-d' is not a dotted class name"),
        ("alter.config.policy.class.name", "not a class", "not a dotted class name"),
    ],
)
def test_kafka_validators(name: str, text: str, expectation: str) -> None:
    with pytest.raises(ConfigException) as info:
        CONFIGS[name].parse(text)
    assert str(info.value).startswith(f"{name}: invalid value")
    assert expectation in str(info.value)
    assert info.value.name == name


def test_valid_values_of_new_configs() -> None:
    assert CONFIGS["log.cleanup.policy"].parse(" compact , delete ") == ["compact", "delete"]
    assert CONFIGS["log.cleanup.policy"].parse("") == []
    assert CONFIGS["metric.reporters"].parse("pkg.mod.Reporter") == ["pkg.mod.Reporter"]
    assert CONFIGS["alter.config.policy.class.name"].parse("pkg.mod.Policy") == "pkg.mod.Policy"
    assert CONFIGS["offsets.topic.replication.factor"].parse("32767") == 32767


def test_every_default_parses_and_validates() -> None:
    for d in CONFIG_DEFS:
        if d.default is None:
            continue
        if d.validator is not None:
            d.validator(d.name, d.default)
        if d.type is ConfigType.LIST:
            text = ",".join(d.default)
        elif d.type is ConfigType.BOOLEAN:
            text = str(d.default).lower()
        else:
            text = str(d.default)
        assert d.parse(text) == d.default, d.name


def test_not_yet_honoured_names_are_configs() -> None:
    assert CONFIGS["password.encoder.secret"].honoured
    assert CONFIGS["alter.config.policy.class.name"].honoured
    assert not CONFIGS["log.preallocate"].honoured


# --- synonyms ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "synonyms"),
    [
        ("log.retention.ms", ("log.retention.ms", "log.retention.minutes", "log.retention.hours")),
        (
            "log.retention.hours",
            ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
        ),
        ("log.roll.ms", ("log.roll.ms", "log.roll.hours")),
        ("log.roll.hours", ("log.roll.ms", "log.roll.hours")),
        ("log.roll.jitter.ms", ("log.roll.jitter.ms", "log.roll.jitter.hours")),
        ("log.flush.interval.ms", ("log.flush.interval.ms", "log.flush.scheduler.interval.ms")),
        ("log.flush.scheduler.interval.ms", ("log.flush.scheduler.interval.ms",)),
        ("num.io.threads", ("num.io.threads",)),
        ("no.such.config", ("no.such.config",)),
    ],
)
def test_broker_synonyms_in_precedence_order(name: str, synonyms: tuple[str, ...]) -> None:
    assert broker_synonyms(name) == synonyms


def test_every_synonym_is_a_config() -> None:
    for d in CONFIG_DEFS:
        assert d.name in broker_synonyms(d.name)
        assert all(s in CONFIGS for s in broker_synonyms(d.name)), d.name


@pytest.mark.parametrize(
    ("name", "instead"),
    [
        ("log.retention.hours", "log.retention.ms"),
        ("log.retention.minutes", "log.retention.ms"),
        ("log.roll.hours", "log.roll.ms"),
        ("log.roll.jitter.hours", "log.roll.jitter.ms"),
        ("log.retention.ms", None),  # dynamic itself
        ("num.io.threads", None),
        ("broker.id", None),  # read-only without a dynamic synonym
        ("log.flush.scheduler.interval.ms", None),
        ("no.such.config", None),
    ],
)
def test_dynamic_synonym(name: str, instead: str | None) -> None:
    assert dynamic_synonym(name) == instead


# --- topic configs -----------------------------------------------------------------------

KAFKA_TOPIC_CONFIGS = {
    # Topic-only configs: Kafka has no broker default for them (KIP-73's replica lists,
    # KIP-405's and KIP-950's tiered-storage switches).
    "leader.replication.throttled.replicas": (),
    "follower.replication.throttled.replicas": (),
    "remote.storage.enable": (),
    "remote.log.copy.disable": (),
    "remote.log.delete.on.disable": (),
    "compression.gzip.level": ("compression.gzip.level",),
    "compression.lz4.level": ("compression.lz4.level",),
    "compression.zstd.level": ("compression.zstd.level",),
    "local.retention.bytes": ("log.local.retention.bytes",),
    "local.retention.ms": ("log.local.retention.ms",),
    "message.format.version": ("log.message.format.version",),
    "message.timestamp.after.max.ms": ("log.message.timestamp.after.max.ms",),
    "message.timestamp.before.max.ms": ("log.message.timestamp.before.max.ms",),
    "cleanup.policy": ("log.cleanup.policy",),
    "compression.type": ("compression.type",),
    "delete.retention.ms": ("log.cleaner.delete.retention.ms",),
    "file.delete.delay.ms": ("log.segment.delete.delay.ms",),
    "flush.messages": ("log.flush.interval.messages",),
    "flush.ms": ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    "index.interval.bytes": ("log.index.interval.bytes",),
    "max.compaction.lag.ms": ("log.cleaner.max.compaction.lag.ms",),
    "max.message.bytes": ("message.max.bytes",),
    "message.downconversion.enable": ("log.message.downconversion.enable",),
    "message.timestamp.difference.max.ms": ("log.message.timestamp.difference.max.ms",),
    "message.timestamp.type": ("log.message.timestamp.type",),
    "min.cleanable.dirty.ratio": ("log.cleaner.min.cleanable.ratio",),
    "min.compaction.lag.ms": ("log.cleaner.min.compaction.lag.ms",),
    "min.insync.replicas": ("min.insync.replicas",),
    "preallocate": ("log.preallocate",),
    "retention.bytes": ("log.retention.bytes",),
    "retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "segment.bytes": ("log.segment.bytes",),
    "segment.index.bytes": ("log.index.size.max.bytes",),
    "segment.jitter.ms": ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    "segment.ms": ("log.roll.ms", "log.roll.hours"),
    "unclean.leader.election.enable": ("unclean.leader.election.enable",),
}


def test_topic_configs_and_their_broker_synonyms_are_kafkas() -> None:
    assert {n: d.broker_synonyms for n, d in TOPIC_CONFIGS.items()} == KAFKA_TOPIC_CONFIGS
    assert all(name == d.name for name, d in TOPIC_CONFIGS.items())


def test_every_topic_config_broker_synonym_is_a_dynamic_config_first() -> None:
    for d in TOPIC_CONFIGS.values():
        if not d.broker_synonyms:
            continue
        assert all(s in CONFIGS for s in d.broker_synonyms), d.name
        # The first synonym is the one AlterConfigs may set cluster-wide (DynamicLogConfig),
        # but for message.format.version (Kafka's NonReconfigrableLogConfigs).
        scope = RO if d.name == "message.format.version" else CLUSTER
        assert CONFIGS[d.broker_synonyms[0]].dynamic is scope, d.name


def test_every_broker_default_is_a_valid_topic_value() -> None:
    for d in TOPIC_CONFIGS.values():
        for synonym in d.broker_synonyms:
            default = CONFIGS[synonym].default
            if default is None:
                continue
            text = (
                ",".join(default)
                if isinstance(default, list)
                else str(default).lower()
                if isinstance(default, bool)
                else str(default)
            )
            d.parse(d.from_broker_value(synonym, text))


def test_topic_config_types_match_their_broker_synonyms() -> None:
    for d in TOPIC_CONFIGS.values():
        if not d.broker_synonyms:
            continue
        assert d.type is CONFIGS[d.broker_synonyms[0]].type, d.name


def test_broker_to_topic() -> None:
    assert BROKER_TO_TOPIC["log.retention.hours"] == "retention.ms"
    assert BROKER_TO_TOPIC["message.max.bytes"] == "max.message.bytes"
    assert BROKER_TO_TOPIC["log.flush.scheduler.interval.ms"] == "flush.ms"
    assert "num.io.threads" not in BROKER_TO_TOPIC


@pytest.mark.parametrize(
    ("topic", "broker", "text", "value"),
    [
        ("retention.ms", "log.retention.hours", "168", "604800000"),
        ("retention.ms", "log.retention.minutes", "5", "300000"),
        ("retention.ms", "log.retention.ms", "42", "42"),
        ("retention.ms", "log.retention.hours", "-1", "-1"),
        ("retention.ms", "log.retention.ms", "-5", "-1"),
        ("segment.ms", "log.roll.hours", "2", "7200000"),
        ("segment.jitter.ms", "log.roll.jitter.hours", "0", "0"),
        ("cleanup.policy", "log.cleanup.policy", "compact,delete", "compact,delete"),
        ("max.message.bytes", "message.max.bytes", "2000", "2000"),
    ],
)
def test_from_broker_value(topic: str, broker: str, text: str, value: str) -> None:
    assert TOPIC_CONFIGS[topic].from_broker_value(broker, text) == value


def test_topic_parse_names_the_topic_config() -> None:
    assert TOPIC_CONFIGS["retention.ms"].parse(" -1 ") == -1
    assert TOPIC_CONFIGS["cleanup.policy"].parse("compact") == ["compact"]
    with pytest.raises(ConfigException) as info:
        TOPIC_CONFIGS["retention.ms"].parse("-2")
    assert str(info.value) == 'retention.ms: invalid value "-2": value must be at least -1'
    assert info.value.name == "retention.ms"


def test_validate_topic_configs_accepts_valid_overrides() -> None:
    validate_topic_configs({})
    validate_topic_configs(
        {
            "retention.ms": "1000",
            "cleanup.policy": "compact,delete",
            "compression.type": "zstd",
            "min.cleanable.dirty.ratio": "0.1",
            "message.timestamp.type": "LogAppendTime",
            "unclean.leader.election.enable": "TRUE",
            "min.compaction.lag.ms": "10",
            "max.compaction.lag.ms": "10",
        }
    )


@pytest.mark.parametrize(
    ("configs", "key", "message"),
    [
        ({"retention.ms": "1", "no.such": "1"}, "no.such", "Unknown topic config name: no.such"),
        (
            {"log.retention.ms": "1"},
            "log.retention.ms",
            "Unknown topic config name: log.retention.ms",
        ),
        ({"retention.ms": "soon"}, "retention.ms", 'retention.ms: invalid value "soon"'),
        ({"cleanup.policy": "purge"}, "cleanup.policy", 'cleanup.policy: invalid value "purge"'),
        ({"compression.type": "brotli"}, "compression.type", "expected one of"),
        ({"segment.bytes": "13"}, "segment.bytes", "value must be at least 14"),
        ({"min.insync.replicas": "0"}, "min.insync.replicas", "value must be at least 1"),
        ({"preallocate": "yes"}, "preallocate", "expected true or false"),
        ({"retention.ms": None}, "retention.ms", "Null value not supported for topic configs"),
        (
            {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"},
            "min.compaction.lag.ms",
            "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)",
        ),
    ],
)
def test_validate_topic_configs_errors(
    configs: dict[str, str | None], key: str, message: str
) -> None:
    with pytest.raises(ConfigException) as info:
        validate_topic_configs(configs)
    assert message in str(info.value)
    assert info.value.name == key


# --- DescribeConfigs config_type codes ---------------------------------------------------


def test_wire_codes_are_kafkas() -> None:
    assert UNKNOWN_CONFIG_TYPE == 0
    assert {t: t.wire_code for t in ConfigType} == {
        ConfigType.BOOLEAN: 1,
        ConfigType.STRING: 2,
        ConfigType.INT: 3,
        ConfigType.SHORT: 4,
        ConfigType.LONG: 5,
        ConfigType.DOUBLE: 6,
        ConfigType.LIST: 7,
        ConfigType.CLASS: 8,
        ConfigType.PASSWORD: 9,
    }
    assert TOPIC_CONFIGS["retention.ms"].type.wire_code == 5
    assert CONFIGS["ssl.keystore.password"].type.wire_code == 9
