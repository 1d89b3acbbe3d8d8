"""KafkaConfig: typed values, defaults, validation, listener overrides, example configs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from kplane.broker.config.definitions import (
    CONFIG_DEFS,
    CONFIGS,
    ConfigDef,
    ConfigType,
    DynamicScope,
    Password,
)
from kplane.broker.config.docs import render_markdown
from kplane.broker.config.endpoint import EndPoint, SecurityProtocol
from kplane.broker.config.errors import ConfigException
from kplane.broker.config.kafka_config import KafkaConfig

REPO = Path(__file__).resolve().parents[2]
BASE = {"listeners": "PLAINTEXT://127.0.0.1:9092"}


def config(**props: str) -> KafkaConfig:
    return KafkaConfig.from_properties(
        {**BASE, **{k.replace("_", "."): v for k, v in props.items()}}
    )


def error(props: dict[str, str]) -> str:
    with pytest.raises(ConfigException) as e:
        KafkaConfig.from_properties({**BASE, **props})
    assert "\n" not in str(e.value)
    return str(e.value)


# --- the definitions table --------------------------------------------------------------


def test_every_default_is_valid_for_its_definition() -> None:
    for d in CONFIG_DEFS:
        assert d.parse(None) == d.default
        if d.default is not None and d.type is not ConfigType.LIST:
            text = str(d.default).lower() if d.type is ConfigType.BOOLEAN else str(d.default)
            assert d.parse(text) == d.default, d.name


def test_names_are_unique() -> None:
    assert len(CONFIGS) == len(CONFIG_DEFS)


def test_kafka_defaults() -> None:
    cfg = KafkaConfig.from_properties({})
    assert cfg.broker_id == 0
    assert cfg.listeners == (EndPoint("PLAINTEXT", "", 9092, SecurityProtocol.PLAINTEXT),)
    assert cfg.inter_broker_listener_name == "PLAINTEXT"
    assert cfg.control_plane_listener_name is None
    assert cfg.log_dirs == ["/tmp/kafka-logs"]
    assert cfg.listener_security_protocol_map == {p.name: p for p in SecurityProtocol}
    expected = {
        "num.network.threads": 3,
        "num.io.threads": 8,
        "queued.max.requests": 500,
        "socket.request.max.bytes": 104857600,
        "socket.send.buffer.bytes": 102400,
        "connections.max.idle.ms": 600000,
        "message.max.bytes": 1048588,
        "offsets.topic.num.partitions": 50,
        "offsets.topic.replication.factor": 3,
        "group.initial.rebalance.delay.ms": 3000,
        "group.max.size": 2147483647,
        "auto.create.topics.enable": True,
        "unclean.leader.election.enable": False,
        "compression.type": "producer",
        "fetch.max.bytes": 57671680,
        "zookeeper.connect": None,
        "kplane.metrics.port": -1,
        "kplane.metrics.host": "127.0.0.1",
    }
    assert {name: cfg.get(name) for name in expected} == expected


def test_dynamic_scopes_follow_kip_226() -> None:
    assert CONFIGS["num.io.threads"].dynamic is DynamicScope.CLUSTER_WIDE
    assert CONFIGS["num.network.threads"].dynamic is DynamicScope.CLUSTER_WIDE
    assert CONFIGS["listeners"].dynamic is DynamicScope.PER_BROKER
    assert CONFIGS["advertised.listeners"].dynamic is DynamicScope.PER_BROKER
    assert CONFIGS["listener.security.protocol.map"].dynamic is DynamicScope.PER_BROKER
    assert CONFIGS["unclean.leader.election.enable"].dynamic is DynamicScope.CLUSTER_WIDE
    assert CONFIGS["log.retention.ms"].dynamic is DynamicScope.CLUSTER_WIDE
    for name in ("inter.broker.listener.name", "control.plane.listener.name", "broker.id"):
        assert CONFIGS[name].dynamic is DynamicScope.READ_ONLY


def test_sensitive_follows_password_type() -> None:
    secret = ConfigDef("x.password", ConfigType.PASSWORD, None, "A secret.")
    assert secret.sensitive and not CONFIGS["listeners"].sensitive
    value = secret.parse(" s3cret ")
    assert isinstance(value, Password) and value.value == "s3cret"
    assert "s3cret" not in repr(value) and "s3cret" not in str(value)


# --- typed values ------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "value"), [("true", True), ("TRUE", True), (" False ", False)])
def test_boolean_is_case_insensitive(text: str, value: bool) -> None:
    assert config(auto_create_topics_enable=text).get("auto.create.topics.enable") is value


def test_boolean_rejects_other_words() -> None:
    msg = error({"delete.topic.enable": "yes"})
    assert msg == 'delete.topic.enable: invalid value "yes": expected true or false'


def test_int_and_long_are_trimmed() -> None:
    cfg = config(num_io_threads=" 16 ", connections_max_idle_ms="9000000000")
    assert cfg.get("num.io.threads") == 16
    assert cfg.get("connections.max.idle.ms") == 9000000000


def test_int_not_a_number() -> None:
    msg = error({"num.io.threads": "abc"})
    assert msg == 'num.io.threads: invalid value "abc": not a number of type INT'


def test_int_overflow() -> None:
    msg = error({"num.io.threads": "2147483648"})
    assert msg.startswith('num.io.threads: invalid value "2147483648"')


@pytest.mark.parametrize(
    "name",
    [
        "num.io.threads",
        "num.network.threads",
        "queued.max.requests",
        "socket.request.max.bytes",
        "num.partitions",
        "min.insync.replicas",
    ],
)
def test_positive_ints(name: str) -> None:
    assert error({name: "0"}) == f'{name}: invalid value "0": value must be at least 1'


def test_string_choice() -> None:
    msg = error({"compression.type": "brotli"})
    assert msg.startswith('compression.type: invalid value "brotli": expected one of')


def test_lists_are_comma_separated_and_trimmed() -> None:
    assert config(log_dirs=" /a , /b,/c ").log_dirs == ["/a", "/b", "/c"]
    assert CONFIGS["metric.reporters"].parse(" a.B , c.D") == ["a.B", "c.D"]
    assert CONFIGS["metric.reporters"].parse("  ") == []


def test_double_parsing() -> None:
    d = ConfigDef("x.ratio", ConfigType.DOUBLE, 0.5, "A ratio.")
    assert d.parse(" 0.25 ") == 0.25
    with pytest.raises(ConfigException, match=re.escape('x.ratio: invalid value "half"')):
        d.parse("half")


def test_get_unknown_name() -> None:
    with pytest.raises(KeyError):
        config().get("no.such.config")


def test_unknown_keys_are_kept_and_logged() -> None:
    with capture_logs() as logs:
        cfg = config(my_custom_key="1")
    assert cfg.props["my.custom.key"] == "1"
    assert {"event": "unknown config", "key": "my.custom.key", "log_level": "warning"} in logs


def test_props_are_read_only() -> None:
    cfg = config()
    with pytest.raises(TypeError):
        cfg.props["x"] = "y"  # type: ignore[index]


# --- derived values ----------------------------------------------------------------------


def test_broker_id() -> None:
    assert config(broker_id="7").broker_id == 7
    assert config(broker_id="-1").broker_id == 0
    assert error({"broker.id": "-2"}) == 'broker.id: invalid value "-2": value must be at least -1'


def test_log_dirs_wins_over_log_dir() -> None:
    assert config(log_dir="/one").log_dirs == ["/one"]
    assert config(log_dir="/one", log_dirs="/a,/b").log_dirs == ["/a", "/b"]


def test_empty_log_dirs() -> None:
    assert error({"log.dirs": ""}).startswith("log.dirs: no log directory")


def test_log_retention_precedence() -> None:
    assert config().log_retention_ms == 168 * 3_600_000
    assert config(log_retention_hours="1", log_retention_minutes="5").log_retention_ms == 300_000
    cfg = config(log_retention_minutes="5", log_retention_ms="42")
    assert cfg.log_retention_ms == 42
    assert config(log_retention_ms="-5").log_retention_ms == -1


def test_listener_errors_surface_from_kafka_config() -> None:
    value = "PLAINTEXT://:9092,PLAINTEXT://:9093"
    assert error({"listeners": value}) == (
        f'listeners: duplicate listener name "PLAINTEXT" in "{value}"'
    )


def test_inter_broker_protocol_set_explicitly_to_its_default_conflicts_with_name() -> None:
    msg = error(
        {"inter.broker.listener.name": "PLAINTEXT", "security.inter.broker.protocol": "PLAINTEXT"}
    )
    assert msg.startswith("inter.broker.listener.name: set only one of")


def test_advertised_lookup_and_planes() -> None:
    cfg = KafkaConfig.from_properties(
        {
            "listeners": "CONTROLLER://127.0.0.1:9091,INTERNAL://127.0.0.1:9092",
            "advertised.listeners": "CONTROLLER://localhost:9091,INTERNAL://localhost:9092",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,INTERNAL:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
            "control.plane.listener.name": "CONTROLLER",
        }
    )
    internal = cfg.advertised("internal")
    assert internal is not None and internal.connection_string == "INTERNAL://localhost:9092"
    assert cfg.advertised("EXTERNAL") is None
    assert cfg.control_plane_listener == EndPoint(
        "CONTROLLER", "127.0.0.1", 9091, SecurityProtocol.PLAINTEXT
    )
    assert [e.listener_name for e in cfg.data_plane_listeners] == ["INTERNAL"]


# --- listener.name.<listener>.<config> ---------------------------------------------------


def test_listener_prefixed_config_wins() -> None:
    cfg = KafkaConfig.from_properties(
        {
            "listeners": "INTERNAL://127.0.0.1:9093,EXTERNAL://127.0.0.1:9094",
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
            "connections.max.idle.ms": "1000",
            "listener.name.external.connections.max.idle.ms": "5000",
        }
    )
    assert cfg.listener_get("EXTERNAL", "connections.max.idle.ms") == 5000
    assert cfg.listener_get("external", "connections.max.idle.ms") == 5000
    assert cfg.listener_get("INTERNAL", "connections.max.idle.ms") == 1000
    assert cfg.listener_get("INTERNAL", "socket.send.buffer.bytes") == 102400
    with pytest.raises(KeyError):
        cfg.listener_get("INTERNAL", "no.such.config")


def test_invalid_listener_prefixed_value_names_the_prefixed_key() -> None:
    key = "listener.name.plaintext.socket.request.max.bytes"
    assert error({key: "0"}) == f'{key}: invalid value "0": value must be at least 1'


def test_unknown_listener_prefixed_config_is_logged() -> None:
    with capture_logs() as logs:
        cfg = config(**{"listener.name.plaintext.no.such.config": "x"})
    assert cfg.props["listener.name.plaintext.no.such.config"] == "x"
    assert any(
        e["event"] == "unknown config" and e["key"] == "listener.name.plaintext.no.such.config"
        for e in logs
    )


def test_listener_prefixed_ssl_config_wins() -> None:
    cfg = config(**{"listener.name.plaintext.ssl.keystore.location": "/ks"})
    assert cfg.listener_get("PLAINTEXT", "ssl.keystore.location") == "/ks"
    assert cfg.get("ssl.keystore.location") is None


# --- loading -----------------------------------------------------------------------------


def test_load_with_overrides(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("listeners=PLAINTEXT://127.0.0.1:9092\nnum.io.threads=4\n")
    cfg = KafkaConfig.load(str(path), ["num.io.threads=2", "broker.id=5"])
    assert cfg.get("num.io.threads") == 2 and cfg.broker_id == 5
    assert cfg.props["num.io.threads"] == "2"


def test_load_with_malformed_override(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("listeners=PLAINTEXT://127.0.0.1:9092\n")
    with pytest.raises(ConfigException, match=re.escape('"num.io.threads"')):
        KafkaConfig.load(str(path), ["num.io.threads"])


def test_example_server_properties_loads() -> None:
    cfg = KafkaConfig.load(str(REPO / "configs" / "server.properties"))
    assert cfg.broker_id == 0
    assert [e.connection_string for e in cfg.listeners] == ["PLAINTEXT://127.0.0.1:9092"]
    assert cfg.log_dirs == ["./data/kplane-0"]
    assert cfg.get("group.initial.rebalance.delay.ms") == 0


def test_example_multi_listener_properties_loads() -> None:
    cfg = KafkaConfig.load(str(REPO / "configs" / "multi-listener.properties"))
    assert [e.connection_string for e in cfg.listeners] == [
        "INTERNAL://127.0.0.1:9093",
        "EXTERNAL://127.0.0.2:9094",
    ]
    assert [e.connection_string for e in cfg.advertised_listeners] == [
        "INTERNAL://localhost:9093",
        "EXTERNAL://127.0.0.2:9094",
    ]
    assert cfg.inter_broker_listener_name == "INTERNAL"
    assert cfg.log_dirs == ["./data/kplane-multi"]


# --- docs --------------------------------------------------------------------------------


def test_docs_table_has_one_row_per_honoured_config() -> None:
    lines = render_markdown().splitlines()
    assert lines[0] == "| name | type | default | dynamic scope | description |"
    rows = [line for line in lines if line.startswith("| `")]
    assert len(rows) == sum(1 for d in CONFIG_DEFS if d.honoured)
    pending = [d.name for d in CONFIG_DEFS if not d.honoured]
    assert all(f"`{name}`" in lines[-1] for name in pending)
    assert any(line.startswith("| `num.io.threads` | int | `8` | cluster-wide |") for line in lines)


def test_typed_accessors_follow_the_config_table() -> None:
    config = KafkaConfig.from_properties(
        {"broker.id": "0", "log.dirs": "/tmp/x", "num.io.threads": "3"}
    )
    assert config.get_int("num.io.threads") == 3
    assert config.get_bool("auto.create.topics.enable") is True
    assert config.get_str("kplane.metrics.host") == "127.0.0.1"
    with pytest.raises(TypeError, match="boolean"):
        config.get_int("auto.create.topics.enable")
    with pytest.raises(ValueError, match="no value"):
        config.get_int("log.retention.ms")
