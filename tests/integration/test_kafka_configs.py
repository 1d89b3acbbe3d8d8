"""Kafka 3.9's config table through real clients (issue 26 items 3 and 4): DescribeConfigs
answers Kafka's defaults, documentation and synonyms; configs of features kplane does not
serve are accepted, stored and described as Kafka does, and named at start-up."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import pytest
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
from kplane.tools.serve_process import json_events
from tests.repo import REPO_ROOT

RELOGIN = "sasl.kerberos.min.time.before.relogin"
CLEANUP_POLICY_DOC = (
    'This config designates the retention policy to use on log segments. The "delete" policy '
    "(which is the default) will discard old segments when their retention time or size limit "
    'has been reached. The "compact" policy will enable <a href="#compaction">log compaction'
    "</a>, which retains the latest value for each key. It is also possible to specify both "
    'policies in a comma-separated list (e.g. "delete,compact"). In this case, old segments '
    "will be discarded per the retention time and size configuration, while retained segments "
    "will be compacted."
)
"""Kafka 3.9's TopicConfig.CLEANUP_POLICY_DOC."""


def _admin(broker: RunningBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap()})


def _create_topic(broker: RunningBroker, name: str) -> None:
    admin = _admin(broker)
    (future,) = admin.create_topics([NewTopic(name, 1, 1)]).values()
    future.result(timeout=10)


def _describe(broker: RunningBroker, rtype: ResourceType, name: str) -> dict[str, ConfigEntry]:
    admin = _admin(broker)
    (future,) = admin.describe_configs([ConfigResource(rtype, name)]).values()
    return future.result(timeout=10)


def _kplane_describe(
    broker: RunningBroker, rtype: kadmin.ConfigResourceType, name: str
) -> dict[str, kadmin.ConfigEntry]:
    """Every entry, with synonyms and documentation, through kplane's Admin (confluent-kafka
    asks for no documentation)."""
    resource = kadmin.ConfigResource(rtype, name)

    async def run() -> dict[str, kadmin.ConfigEntry]:
        props = {"bootstrap.servers": broker.bootstrap()}
        client = KafkaClient(ClientConfig.from_properties(props))
        await client.start()
        try:
            result = await kadmin.Admin(client).describe_configs(
                [resource], include_synonyms=True, include_documentation=True
            )
            return dict(result[resource].entries)
        finally:
            await client.close()

    return asyncio.run(run())


def _kafka_python_describe(broker: RunningBroker, rtype: str, name: str) -> dict[str, dict]:
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap())
    try:
        described = admin.describe_configs(
            [KpResource(ConfigResourceType[rtype], name)],
            include_synonyms=True,
            config_filter="all",
        )
        return described[rtype.lower()][name]
    finally:
        admin.close()


def _incremental_set(
    broker: RunningBroker, rtype: ResourceType, name: str, key: str, value: str
) -> None:
    entry = ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(rtype, name, incremental_configs=[entry])
    admin = _admin(broker)
    (future,) = admin.incremental_alter_configs([resource]).values()
    future.result(timeout=10)


# item 3: Kafka's defaults, documentation and synonyms -------------------------------------
def test_throttled_replica_lists_default_to_an_empty_string(broker) -> None:
    _create_topic(broker, "throttled")
    described = _describe(broker, ResourceType.TOPIC, "throttled")
    for key in ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas"):
        assert (described[key].value, described[key].source) == (
            "",
            ConfigSource.DEFAULT_CONFIG.value,
        )
    kp = _kafka_python_describe(broker, "TOPIC", "throttled")
    assert kp["leader.replication.throttled.replicas"]["value"] == ""
    # A client copying every described config back into AlterConfigs is answered as by Kafka.
    copy = ConfigResource(ResourceType.TOPIC, "throttled")
    for key, entry in described.items():
        copy.set_config(key, entry.value)
    admin = _admin(broker)
    with pytest.warns(DeprecationWarning, match="alter_configs"):
        (future,) = admin.alter_configs([copy]).values()
    future.result(timeout=10)


def test_topic_retention_synonyms_as_kafka_lists_them(broker_factory) -> None:
    broker = broker_factory({"log.retention.hours": "100"})
    _create_topic(broker, "retained")
    kp = _kafka_python_describe(broker, "TOPIC", "retained")["retention.ms"]
    # Kafka's ConfigHelper lists the synonyms of log.retention.ms from the first one named
    # log.retention.ms: none while it is set nowhere.
    assert (kp["value"], kp["config_source"], kp["synonyms"]) == ("360000000", "DEFAULT_CONFIG", [])
    _kplane_alter_default(broker, "log.retention.ms", "60000")
    _incremental_set(broker, ResourceType.TOPIC, "retained", "retention.ms", "5000")
    kp = _kafka_python_describe(broker, "TOPIC", "retained")["retention.ms"]
    assert (kp["value"], kp["config_source"]) == ("5000", "DYNAMIC_TOPIC_CONFIG")
    assert [(s["name"], s["value"], s["source"]) for s in kp["synonyms"]] == [
        ("retention.ms", "5000", "DYNAMIC_TOPIC_CONFIG"),
        ("log.retention.ms", "60000", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
        ("log.retention.hours", "100", "STATIC_BROKER_CONFIG"),
        ("log.retention.hours", "168", "DEFAULT_CONFIG"),
    ]
    entry = _describe(broker, ResourceType.TOPIC, "retained")["retention.ms"]
    assert list(entry.synonyms) == ["retention.ms", "log.retention.ms", "log.retention.hours"]


def _kplane_alter_default(broker: RunningBroker, key: str, value: str) -> None:
    """Set ``key`` on the cluster-default broker entity (confluent-kafka refuses its empty
    name)."""
    resource = kadmin.ConfigResource(kadmin.ConfigResourceType.BROKER, "")

    async def run() -> None:
        props = {"bootstrap.servers": broker.bootstrap()}
        client = KafkaClient(ClientConfig.from_properties(props))
        await client.start()
        try:
            ops = {resource: [kadmin.AlterConfigOp(key, value)]}
            assert (await kadmin.Admin(client).incremental_alter_configs(ops))[resource] is None
        finally:
            await client.close()

    asyncio.run(run())


def test_documentation_types_and_defaults_are_kafkas(broker) -> None:
    _create_topic(broker, "documented")
    topic = _kplane_describe(broker, kadmin.ConfigResourceType.TOPIC, "documented")
    assert topic["cleanup.policy"].documentation == CLEANUP_POLICY_DOC
    assert topic["cleanup.policy"].config_type == 7  # LIST
    assert topic["remote.storage.enable"].value == "false"
    assert topic["message.format.version"].value == "3.0-IV1"
    brokers = _kplane_describe(broker, kadmin.ConfigResourceType.BROKER, "0")
    assert brokers[RELOGIN].documentation == "Login thread sleep time between refresh attempts."
    assert (brokers[RELOGIN].value, brokers[RELOGIN].config_type) == ("60000", 5)  # LONG
    assert brokers["log.dirs"].config_type == 2  # STRING
    cleaner = brokers["log.cleaner.io.max.bytes.per.second"]
    assert cleaner.value == "1.7976931348623157E308"
    described = _describe(broker, ResourceType.BROKER, "0")
    assert described["sasl.kerberos.service.name"].value is None
    assert described["remote.log.storage.system.enable"].value == "false"
    assert described[RELOGIN].is_read_only is False


# item 4: every config Kafka defines is known -----------------------------------------------
def test_a_dynamic_listener_config_kplane_does_not_act_on_can_be_altered(broker) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kplane",
            "configs",
            "--bootstrap-server",
            broker.bootstrap(),
            "--entity-type",
            "brokers",
            "--entity-name",
            "0",
            "--alter",
            "--add-config",
            f"{RELOGIN}=120000",
        ],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, ""), done.stdout + done.stderr
    entry = _describe(broker, ResourceType.BROKER, "0")[RELOGIN]
    assert (entry.value, entry.source) == ("120000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    _incremental_set(broker, ResourceType.BROKER, "0", RELOGIN, "90000")
    entry = _describe(broker, ResourceType.BROKER, "0")[RELOGIN]
    assert (entry.value, entry.source) == ("90000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    # kafka-python checks a key against the broker's described dynamic configs first.
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap())
    try:
        admin.alter_configs([KpResource(ConfigResourceType.BROKER, "0", {RELOGIN: "80000"})])
    finally:
        admin.close()
    kp = _kafka_python_describe(broker, "BROKER", "0")[RELOGIN]
    assert [(s["value"], s["source"]) for s in kp["synonyms"]] == [
        ("80000", "DYNAMIC_BROKER_CONFIG"),
        ("60000", "DEFAULT_CONFIG"),
    ]
    assert broker.dynamic_config("0") == {RELOGIN: "80000"}


@pytest.mark.slow
def test_configs_not_acted_on_are_named_at_start_up(broker_process) -> None:
    handle = broker_process(
        None, "sasl.kerberos.service.name=kafka", "remote.log.storage.system.enable=false"
    )
    deadline = time.monotonic() + 30
    while not any(e.get("event") == "started" for e in json_events(handle.log_text())):
        assert handle.process.poll() is None and time.monotonic() < deadline, handle.log_text()
        time.sleep(0.05)
    events = json_events(handle.log_text())
    named = [e for e in events if e.get("event") == "configs accepted but not acted on"]
    assert [(e["level"], e["keys"]) for e in named] == [
        ("info", ["remote.log.storage.system.enable", "sasl.kerberos.service.name"])
    ]
    assert not [e for e in events if e.get("event") == "unknown config"]
    admin = AdminClient({"bootstrap.servers": handle.bootstrap})
    (future,) = admin.describe_configs([ConfigResource(ResourceType.BROKER, "0")]).values()
    entry = future.result(timeout=10)["sasl.kerberos.service.name"]
    assert (entry.value, entry.source) == ("kafka", ConfigSource.STATIC_BROKER_CONFIG.value)
