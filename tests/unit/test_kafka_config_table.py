"""kplane's config tables against Kafka 3.9's, config by config: every broker and topic config
Kafka defines is known, with Kafka's type, default, dynamic scope, importance, validator and
documentation. The reference is the committed ``kafka_3_9_configs.json``, read here directly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from kplane.broker.config.definitions import CONFIGS
from kplane.broker.config.errors import ConfigException
from kplane.broker.config.kafka_config import KafkaConfig
from kplane.broker.config.topic_configs import TOPIC_CONFIGS
from kplane.broker.config.validators import kafka_validator
from kplane.broker.server.config_describer import topic_default

TABLE = json.loads(
    (
        Path(__file__).parents[2] / "kplane" / "broker" / "config" / "kafka_3_9_configs.json"
    ).read_text()
)
BROKER = {row["name"]: row for row in TABLE["broker"]}
TOPIC = {row["name"]: row for row in TABLE["topic"]}

KPLANE_OWN = {
    # Kafka's ACL authorizer reads these beside KafkaConfig; they are not in its table.
    "super.users",
    "allow.everyone.if.no.acl.found",
    # Kafka 4.1's ShareGroupConfig (KIP-932), after 3.9's table.
    "group.share.max.share.sessions",
}
"""Broker configs kplane has that Kafka's table does not, besides ``kplane.*``."""

KAFKA_4_DEFAULTS = {
    # KIP-848's consumer protocol is on by default from Kafka 4.0.
    "group.coordinator.rebalance.protocols": "classic,consumer",
    # ... and live groups migrate between the protocols both ways (3.9: disabled).
    "group.consumer.migration.policy": "bidirectional",
    # KIP-932's share groups: on in a new Kafka 4.2 cluster (share.version=1), and Kafka 4.1
    # raised the in-flight records per share partition from 200 to 2,000.
    "group.share.enable": "true",
    "group.share.partition.max.record.locks": "2000",
}
"""Defaults kplane takes from Kafka 4 rather than from 3.9's table."""


def test_the_table_is_kafka_3_9s_whole_table() -> None:
    assert len(BROKER) == 331 and len(TOPIC) == 36
    assert "Kafka 3.9.0" in TABLE["source"]


def test_kplane_only_broker_configs_are_its_own() -> None:
    extra = {name for name in CONFIGS if name not in BROKER}
    assert {name for name in extra if not name.startswith("kplane.")} == KPLANE_OWN


@pytest.mark.parametrize("name", sorted(BROKER))
def test_broker_config_is_kafkas(name: str) -> None:
    row, definition = BROKER[name], CONFIGS.get(name)
    assert definition is not None, f"{name} is not a known config"
    assert definition.type.value == row["type"]
    assert definition.default_text == KAFKA_4_DEFAULTS.get(name, row["default"])
    assert definition.dynamic.value == row["update_mode"]
    assert definition.importance.value == row["importance"]
    assert definition.listener_prefix_required is row["listener_prefix_required"]
    assert definition.internal is row["internal"]
    assert definition.documentation == row["documentation"]
    # Kafka's validator, where it has one that kplane applies to a parsed value (a
    # LambdaValidator prints a sentence): kplane's prints Kafka's valid values.
    kafkas = kafka_validator(row["validator"], row["valid_values"])
    if kafkas is not None and row["validator"] != "ConfigDef$LambdaValidator":
        assert str(definition.validator) == str(kafkas) == row["valid_values"]


@pytest.mark.parametrize("name", sorted(TOPIC))
def test_topic_config_is_kafkas(name: str) -> None:
    row, definition = TOPIC[name], TOPIC_CONFIGS.get(name)
    assert definition is not None, f"{name} is not a known topic config"
    assert definition.type.value == row["type"]
    assert topic_default(definition) == row["default"]
    assert list(definition.broker_synonyms) == row["server_synonyms"]
    assert definition.documentation == row["documentation"]
    if row["validator"] is not None:
        assert str(definition.validator) == row["valid_values"]


def test_no_topic_config_beyond_kafkas() -> None:
    assert set(TOPIC_CONFIGS) == set(TOPIC)


def test_configs_kplane_does_not_act_on_are_the_rest_of_kafkas() -> None:
    acted_on = {name for name, d in CONFIGS.items() if d.honoured}
    assert {"num.io.threads", "log.retention.ms", "listeners"} <= acted_on
    assert not CONFIGS["sasl.kerberos.min.time.before.relogin"].honoured
    assert not CONFIGS["remote.log.storage.system.enable"].honoured
    assert all(CONFIGS[name].honoured for name in CONFIGS if name not in BROKER)


@pytest.mark.parametrize(
    ("name", "good", "bad", "message"),
    [
        ("sasl.kerberos.ticket.renew.window.factor", "0.5", "x", "not a number of type DOUBLE"),
        ("remote.log.manager.thread.pool.size", "4", "0", "value must be at least 1"),
        ("remote.log.manager.copier.thread.pool.size", "-1", "0", "value must be at least 1"),
        ("compression.gzip.level", "-1", "10", "value must be no more than 9"),
        ("compression.zstd.level", "-131072", "23", "value must be no more than 22"),
        ("group.consumer.migration.policy", "upgrade", "sideways", "expected one of"),
        ("group.coordinator.rebalance.protocols", "classic,consumer", "x", "'x' is not one of"),
        ("inter.broker.protocol.version", "3.9", "3.99", "Version 3.99 is not a valid version"),
        ("log.message.format.version", "0.10.0.1", "0.10.9", "not a valid version"),
        ("remote.log.storage.manager.impl.prefix", "rsm.", "", "String must be non-empty"),
        ("controller.quorum.voters", "1@a:9093,2@[::1]:9093", "a:9093", "{id}@{host}:{port}"),
        ("controller.quorum.bootstrap.servers", "a:9093", "a", "{host}:{port}"),
        ("process.roles", "broker", "zookeeper", "'zookeeper' is not one of"),
        ("sasl.kerberos.min.time.before.relogin", "1000", "soon", "not a number of type LONG"),
    ],
)
def test_kafkas_validators(name: str, good: str, bad: str, message: str) -> None:
    CONFIGS[name].parse(good)
    with pytest.raises(ConfigException) as info:
        CONFIGS[name].parse(bad)
    assert message in str(info.value)
    assert info.value.name == name


def test_every_kafka_validator_is_known() -> None:
    for row in [*BROKER.values(), *TOPIC.values()]:
        kafka_validator(row["validator"], row["valid_values"])
    with pytest.raises(ValueError, match="no validator"):
        kafka_validator("ConfigDef$SomethingNew", "[x]")


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("log.cleaner.io.max.bytes.per.second", "1.7976931348623157E308"),
        ("log.cleaner.io.buffer.load.factor", "0.9"),
        ("leader.replication.throttled.rate", "9223372036854775807"),
        ("sasl.enabled.mechanisms", "GSSAPI"),
        ("ssl.cipher.suites", ""),
        (
            "principal.builder.class",
            "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder",
        ),
        ("zookeeper.connect", None),
    ],
)
def test_defaults_print_as_kafkas(name: str, text: str | None) -> None:
    assert CONFIGS[name].default_text == text


def test_configs_not_acted_on_are_named_in_one_line() -> None:
    props = {
        "listeners": "PLAINTEXT://127.0.0.1:9092",
        "sasl.kerberos.service.name": "kafka",
        "listener.name.plaintext.sasl.kerberos.min.time.before.relogin": "1000",
        "log.local.retention.ms": "5000",
        "num.io.threads": "4",
        "no.such.config": "1",
    }
    with capture_logs() as logs:
        KafkaConfig.from_properties(props)
    assert [(e["event"], e["log_level"], e.get("keys", e.get("key"))) for e in logs] == [
        ("unknown config", "warning", "no.such.config"),
        (
            "configs accepted but not acted on",
            "info",
            [
                "listener.name.plaintext.sasl.kerberos.min.time.before.relogin",
                "log.local.retention.ms",
                "sasl.kerberos.service.name",
            ],
        ),
    ]
    with capture_logs() as logs:
        KafkaConfig.from_properties(props, log_unused=False)
    assert logs == []
