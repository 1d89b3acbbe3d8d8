"""KIP-226 with real admin clients: DescribeConfigs sources and synonyms, AlterConfigs and
IncrementalAlterConfigs, precedence, persistence across a restart, passwords, validation."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from kplane.client import admin as kadmin
from kplane.client.kafka_client import KafkaClient
from kplane.common.network.config import ClientConfig
from kplane.testing.plugin import RunningBroker
from tests.integration.helpers import with_inter_broker_sasl

SECRET = {"password.encoder.secret": "encoder-secret"}


def _admin(broker: RunningBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap()})


def _describe(broker: RunningBroker, name: str = "0", rtype=ResourceType.BROKER) -> dict:
    if name == "" and rtype == ResourceType.BROKER:
        return _kplane_describe_default(broker)
    admin = _admin(broker)
    (future,) = admin.describe_configs([ConfigResource(rtype, name)]).values()
    return future.result(timeout=10)


def _kplane(broker: RunningBroker, call):  # type: ignore[no-untyped-def]
    """Run ``call(admin)`` with kplane's own Admin (confluent-kafka refuses the empty
    broker name of the cluster-default entity)."""

    async def run():  # type: ignore[no-untyped-def]
        client = KafkaClient(
            ClientConfig.from_properties({"bootstrap.servers": broker.bootstrap()})
        )
        await client.start()
        try:
            return await call(kadmin.Admin(client))
        finally:
            await client.close()

    return asyncio.run(run())


def _kplane_describe_default(broker: RunningBroker) -> dict:
    resource = kadmin.ConfigResource(kadmin.ConfigResourceType.BROKER, "")
    result = _kplane(broker, lambda a: a.describe_configs([resource], include_synonyms=True))
    return dict(result[resource].entries)


def _alter(
    broker: RunningBroker, name: str, ops: list[kadmin.AlterConfigOp], rtype=ResourceType.BROKER
):
    if name == "" and rtype == ResourceType.BROKER:
        resource = kadmin.ConfigResource(kadmin.ConfigResourceType.BROKER, "")
        error = _kplane(broker, lambda a: a.incremental_alter_configs({resource: ops}))[resource]
        if error is not None:
            raise KafkaException(error.code.value, error.message)
        return None
    resource = ConfigResource(
        rtype,
        name,
        incremental_configs=[
            ConfigEntry(
                op.name,
                op.value,
                incremental_operation=AlterConfigOpType[kadmin.OpType(op.op).name],
            )
            for op in ops
        ],
    )
    admin = _admin(broker)
    (future,) = admin.incremental_alter_configs([resource]).values()
    return future.result(timeout=10)


def _set(broker: RunningBroker, name: str, configs: dict[str, str], rtype=ResourceType.BROKER):
    return _alter(broker, name, [kadmin.AlterConfigOp(k, v) for k, v in configs.items()], rtype)


def _delete(broker: RunningBroker, name: str, keys: list[str]):
    return _alter(broker, name, [kadmin.AlterConfigOp(k, None, kadmin.OpType.DELETE) for k in keys])


def _synonyms(broker: RunningBroker, key: str, name: str = "0", topic: bool = False) -> list:
    """(name, value, source) of every synonym of ``key``, with kplane's Admin (confluent's
    result keys synonyms by name, so one name at several sources would collapse)."""
    rtype = kadmin.ConfigResourceType.TOPIC if topic else kadmin.ConfigResourceType.BROKER
    resource = kadmin.ConfigResource(rtype, name)
    result = _kplane(broker, lambda a: a.describe_configs([resource], include_synonyms=True))
    entry = result[resource].entries[key]
    return [(s.name, s.value, ConfigSource(s.source)) for s in entry.synonyms]


def test_sources_and_synonyms_follow_precedence(broker_factory) -> None:
    broker = broker_factory({"log.cleaner.threads": "2"})
    entry = _describe(broker)["log.cleaner.threads"]
    assert (entry.value, ConfigSource(entry.source)) == ("2", ConfigSource.STATIC_BROKER_CONFIG)
    _set(broker, "", {"log.cleaner.threads": "3"})
    _set(broker, "0", {"log.cleaner.threads": "4"})
    entry = _describe(broker)["log.cleaner.threads"]
    assert (entry.value, ConfigSource(entry.source)) == ("4", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert _synonyms(broker, "log.cleaner.threads") == [
        ("log.cleaner.threads", "4", ConfigSource.DYNAMIC_BROKER_CONFIG),
        ("log.cleaner.threads", "3", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.cleaner.threads", "2", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.cleaner.threads", "1", ConfigSource.DEFAULT_CONFIG),
    ]
    # The cluster default entity lists only what is set there.
    default = _describe(broker, "")
    assert list(default) == ["log.cleaner.threads"]
    assert ConfigSource(default["log.cleaner.threads"].source) == (
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    )
    # Delete falls back, one level at a time.
    _delete(broker, "0", ["log.cleaner.threads"])
    entry = _describe(broker)["log.cleaner.threads"]
    assert (entry.value, ConfigSource(entry.source)) == (
        "3",
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
    )
    _delete(broker, "", ["log.cleaner.threads"])
    assert _describe(broker)["log.cleaner.threads"].value == "2"


def test_retention_synonyms_in_order(broker_factory) -> None:
    broker = broker_factory({"log.retention.hours": "72"})
    # As Kafka's ConfigHelper: the synonyms before the first one named for the described
    # config are left out, so log.retention.ms lists none until it is set somewhere.
    assert _synonyms(broker, "log.retention.ms") == []
    assert _synonyms(broker, "log.retention.hours") == [
        ("log.retention.hours", "72", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    ]
    _set(broker, "", {"log.retention.ms": "60000"})
    entry = _describe(broker)["log.retention.ms"]
    assert (entry.value, ConfigSource(entry.source)) == (
        "60000",
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
    )
    assert _synonyms(broker, "log.retention.ms") == [
        ("log.retention.ms", "60000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.hours", "72", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    ]
    # A topic without override follows the broker's effective retention, in ms.
    admin = _admin(broker)
    (future,) = admin.create_topics([NewTopic("r", 1, 1)]).values()
    future.result(timeout=10)
    topic = _describe(broker, "r", ResourceType.TOPIC)
    assert topic["retention.ms"].value == "60000"
    _set(broker, "r", {"retention.ms": "5000"}, ResourceType.TOPIC)
    topic = _describe(broker, "r", ResourceType.TOPIC)["retention.ms"]
    assert (topic.value, ConfigSource(topic.source)) == (
        "5000",
        ConfigSource.DYNAMIC_TOPIC_CONFIG,
    )
    assert _synonyms(broker, "retention.ms", "r", topic=True)[:2] == [
        ("retention.ms", "5000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ("log.retention.ms", "60000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
    ]


def test_dynamic_values_survive_a_restart(broker_factory, tmp_path: Path) -> None:
    broker = broker_factory({**SECRET, "log.dirs": str(tmp_path / "keep")})
    _set(broker, "0", {"log.cleaner.threads": "5"})
    _set(broker, "", {"message.max.bytes": "2000000"})
    broker.stop()
    again = broker_factory({**SECRET, "log.dirs": str(tmp_path / "keep")})
    described = _describe(again)
    assert described["log.cleaner.threads"].value == "5"
    assert described["message.max.bytes"].value == "2000000"
    assert again.current_config("message.max.bytes") == 2000000


def test_passwords_are_encoded_and_never_shown(broker_factory, tmp_path: Path) -> None:
    from kplane.common.certs import create_test_pki

    pki = create_test_pki(tmp_path / "pki", ["localhost", "127.0.0.1"])
    log_dir = tmp_path / "pw"
    broker = broker_factory(
        {
            **SECRET,
            "log.dirs": str(log_dir),
            "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
            "listener.name.ssl.ssl.keystore.type": "PKCS12",
            "listener.name.ssl.ssl.keystore.location": str(pki.broker_p12),
            "listener.name.ssl.ssl.keystore.password": pki.password,
        }
    )
    _set(broker, "0", {"listener.name.ssl.ssl.keystore.password": pki.password})
    entry = _describe(broker)["listener.name.ssl.ssl.keystore.password"]
    assert entry.is_sensitive and entry.value is None
    assert all(s.value is None for s in entry.synonyms.values())
    for path in log_dir.rglob("*"):
        if path.is_file():
            assert pki.password.encode() not in path.read_bytes(), path
    stored = json.loads(broker.znode("/config/brokers/0"))["config"]
    assert stored["listener.name.ssl.ssl.keystore.password"].startswith("encryptedPassword:")


def test_password_without_an_encoder_secret_is_refused(broker) -> None:
    with pytest.raises(KafkaException, match=r"password\.encoder\.secret"):
        _set(broker, "0", {"listener.name.plaintext.ssl.key.password": "x"})


@pytest.mark.parametrize(
    ("entity", "configs", "mention"),
    [
        ("0", {"no.such.config": "1"}, "Unknown broker config"),
        ("0", {"log.dirs": "/tmp/x"}, "Cannot update these configs dynamically"),
        ("0", {"log.retention.hours": "1"}, "log.retention.ms instead"),
        ("", {"listeners": "PLAINTEXT://127.0.0.1:0"}, "broker id must be specified"),
        ("0", {"ssl.keystore.location": "/x"}, "per listener"),
        ("0", {"num.io.threads": "0"}, "at least 1"),
        ("0", {"num.io.threads": "17"}, "double the current value"),
        ("0", {"num.io.threads": "1"}, "half the current value"),
        ("0", {"message.max.bytes": "lots"}, "message.max.bytes"),
    ],
)
def test_invalid_changes_answer_invalid_config(broker, entity, configs, mention) -> None:
    with pytest.raises(KafkaException) as info:
        _set(broker, entity, configs)
    error = info.value.args[0]
    code, text = (error.code(), error.str()) if hasattr(error, "code") else info.value.args
    assert code == 40, info.value  # INVALID_CONFIG
    assert mention in text
    # Nothing was stored.
    assert broker.dynamic_config(entity or "<default>") == {}


def test_validate_only_changes_nothing(broker) -> None:
    resource = ConfigResource(
        ResourceType.BROKER,
        "0",
        incremental_configs=[
            ConfigEntry("log.cleaner.threads", "3", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin = _admin(broker)
    (future,) = admin.incremental_alter_configs([resource], validate_only=True).values()
    future.result(timeout=10)
    assert _describe(broker)["log.cleaner.threads"].value == "1"


def test_kafka_python_describe_and_alter(broker) -> None:
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap())
    try:
        admin.alter_configs(
            [KpResource(ConfigResourceType.BROKER, "0", {"log.cleaner.threads": "2"})]
        )
        described = admin.describe_configs(
            [KpResource(ConfigResourceType.BROKER, "0", ["log.cleaner.threads"])],
            include_synonyms=True,
        )
        entry = described["broker"]["0"]["log.cleaner.threads"]
        assert (entry["value"], entry["config_source"]) == ("2", "DYNAMIC_BROKER_CONFIG")
        assert [(x["value"], x["source"]) for x in entry["synonyms"]] == [
            ("2", "DYNAMIC_BROKER_CONFIG"),
            ("1", "DEFAULT_CONFIG"),
        ]
    finally:
        admin.close()


def test_new_default_reaches_existing_partitions(broker) -> None:
    from confluent_kafka import Producer

    admin = _admin(broker)
    (future,) = admin.create_topics([NewTopic("big", 1, 1)]).values()
    future.result(timeout=10)

    def produce(size: int):
        errors = []
        producer = Producer(
            {"bootstrap.servers": broker.bootstrap(), "message.max.bytes": 2_000_000}
        )
        producer.produce("big", b"x" * size, on_delivery=lambda e, m: errors.append(e))
        producer.flush(10)
        return errors[0]

    assert produce(5000) is None
    _set(broker, "", {"message.max.bytes": "1000"})
    error = produce(5000)
    assert error is not None and error.code() == 10  # MESSAGE_TOO_LARGE
    _set(broker, "big", {"max.message.bytes": "100000"}, ResourceType.TOPIC)
    assert produce(5000) is None


def test_passwords_are_reencoded_under_a_new_secret(broker_factory, tmp_path: Path) -> None:
    log_dir = str(tmp_path / "rotate")
    key = "listener.name.plaintext.ssl.key.password"
    broker = broker_factory({"password.encoder.secret": "old-secret", "log.dirs": log_dir})
    _set(broker, "0", {key: "p4ss"})
    before = json.loads(broker.znode("/config/brokers/0"))["config"][key]
    broker.stop()
    again = broker_factory(
        {
            "password.encoder.secret": "new-secret",
            "password.encoder.old.secret": "old-secret",
            "log.dirs": log_dir,
        }
    )
    after = json.loads(again.znode("/config/brokers/0"))["config"][key]
    assert after != before
    assert again.dynamic_config("0") == {key: "p4ss"}
    from kplane.broker.config.password_encoder import PasswordEncoder

    assert PasswordEncoder("new-secret").decode(after) == "p4ss"


def test_alter_config_policy_and_documentation(broker_factory) -> None:
    broker = broker_factory(
        {"alter.config.policy.class.name": "tests.integration.alter_policy.MinimumRetentionPolicy"}
    )
    admin = _admin(broker)
    (future,) = admin.create_topics([NewTopic("p", 1, 1)]).values()
    future.result(timeout=10)
    with pytest.raises(KafkaException) as info:
        _set(broker, "p", {"retention.ms": "10"}, ResourceType.TOPIC)
    assert info.value.args[0].code() == 44  # POLICY_VIOLATION
    assert "1000 ms minimum" in info.value.args[0].str()
    _set(broker, "p", {"retention.ms": "5000"}, ResourceType.TOPIC)
    resource = kadmin.ConfigResource(kadmin.ConfigResourceType.BROKER, "0")
    described = _kplane(
        broker, lambda a: a.describe_configs([resource], include_documentation=True)
    )[resource].entries
    assert described["num.io.threads"].config_type == 3  # INT
    assert described["num.io.threads"].documentation
    assert described["listeners"].read_only is False
    assert described["log.dirs"].read_only is True


def test_alter_configs_needs_cluster_alter_configs(broker_factory) -> None:
    broker = broker_factory(
        with_inter_broker_sasl(
            {
                "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                "allow.everyone.if.no.acl.found": "false",
            }
        )
    )
    with pytest.raises(KafkaException) as info:
        _set(broker, "0", {"log.cleaner.threads": "2"})
    assert info.value.args[0].code() == 31  # CLUSTER_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as info:
        _describe(broker)
    assert info.value.args[0].code() == 31
