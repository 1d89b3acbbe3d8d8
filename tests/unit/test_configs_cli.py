"""``kplane configs`` without a broker: --add-config parsing, command-line checks, output."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from kplane.client.admin import ConfigEntry, ConfigSource, ConfigSynonym, OpType
from kplane.tools import configs
from kplane.tools.admin_session import UsageError, client_properties
from kplane.tools.configs import (
    Command,
    Entity,
    alter_ops,
    completed_message,
    describe_header,
    describe_lines,
    format_entry,
    parse_add_config,
    parse_command,
    parse_delete_config,
)

BOOTSTRAP = ["--bootstrap-server", "127.0.0.1:9"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kplane")
    configs.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser


def _args(*argv: str) -> argparse.Namespace:
    return _parser().parse_args(["configs", *BOOTSTRAP, *argv])


def _command(*argv: str) -> Command:
    return parse_command(_args(*argv))


def _refused(*argv: str) -> str:
    with pytest.raises(UsageError) as info:
        _command(*argv)
    return str(info.value)


# --add-config ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a=1", {"a": "1"}),
        ("a=1,b=2", {"a": "1", "b": "2"}),
        (" a = 1 , b= 2 ", {"a": "1", "b": "2"}),
        ("k=[x,y,z]", {"k": "x,y,z"}),
        ("k1=v1,k2=[v1,v2,v2],k3=v3", {"k1": "v1", "k2": "v1,v2,v2", "k3": "v3"}),
        ("k=[ x, y ]", {"k": "x, y"}),
        ("k=[]", {"k": ""}),
        ("ssl.endpoint.identification.algorithm=", {"ssl.endpoint.identification.algorithm": ""}),
        ("a=b=c", {"a": "b=c"}),
        (
            'sasl.jaas.config=[m required username="u",x=y]',
            {"sasl.jaas.config": 'm required username="u",x=y'},
        ),
        ("k=[a=1,b=2],j=3", {"k": "a=1,b=2", "j": "3"}),
        ("a=1,", {"a": "1"}),
        ("a=1,a=2", {"a": "2"}),
        (
            "listener.name.internal.ssl.keystore.type=PKCS12",
            {"listener.name.internal.ssl.keystore.type": "PKCS12"},
        ),
        (
            "log.cleaner.threads=2,log.retention.ms=-1",
            {"log.cleaner.threads": "2", "log.retention.ms": "-1"},
        ),
        ("a-b_c.d$E=1", {"a-b_c.d$E": "1"}),
    ],
)
def test_parse_add_config(text: str, expected: dict[str, str]) -> None:
    assert parse_add_config(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", " ", ",", "a", "a=1,b", "=1", " =1", "a=1,,b=2", "[a=1]", "a=[1,b=2"],
)
def test_parse_add_config_refuses_pairs_without_a_key(text: str) -> None:
    with pytest.raises(UsageError, match="Invalid entity config"):
        parse_add_config(text)


@pytest.mark.parametrize("text", ["a=[1,2", "a=1]", "a=[[1,2]", "a=]1,2[", "a=1,b=[2"])
def test_parse_add_config_refuses_unbalanced_brackets(text: str) -> None:
    with pytest.raises(UsageError, match=r"unbalanced|unclosed"):
        parse_add_config(text)


@pytest.mark.parametrize("text", ["a b=1", "a/b=1", "[a]=1", "ä=1"])
def test_parse_add_config_refuses_odd_key_characters(text: str) -> None:
    with pytest.raises(UsageError, match="Invalid character found for config key"):
        parse_add_config(text)


def test_parse_delete_config() -> None:
    assert parse_delete_config(None) == []
    assert parse_delete_config(["a,b", " c ", "d,,e,"]) == ["a", "b", "c", "d", "e"]


# command line ------------------------------------------------------------------------------
def test_entity_spellings() -> None:
    broker = Entity("brokers", "0")
    assert _command("--entity-type", "brokers", "--entity-name", "0", "--describe").entity == broker
    assert _command("--broker", "0", "--describe").entity == broker
    default = Entity("brokers", "")
    assert _command("--entity-type", "brokers", "--entity-default", "--describe").entity == default
    assert _command("--broker-defaults", "--describe").entity == default
    topic = Entity("topics", "t1")
    assert _command("--entity-type", "topics", "--entity-name", "t1", "--describe").entity == topic
    assert _command("--topic", "t1", "--describe").entity == topic
    assert _command("--entity-type", "topics", "--describe").entity == Entity("topics", None)
    assert _command("--entity-type", "brokers", "--describe").entity == Entity("brokers", None)


def test_describe_all() -> None:
    assert _command("--broker", "0", "--describe", "--all").describe_all
    assert not _command("--broker", "0", "--describe").describe_all


def test_alter_changes() -> None:
    command = _command(
        "--broker", "1", "--alter", "--add-config", "a=1,b=[x,y]", "--delete-config", "c,d"
    )
    assert command.action == "alter"
    assert command.add == {"a": "1", "b": "x,y"}
    assert list(command.delete) == ["c", "d"]


def test_add_config_file(tmp_path: Path) -> None:
    path = tmp_path / "add.properties"
    path.write_text("# changes\nlog.cleaner.threads=3\nssl.cipher.suites=A,B\n")
    command = _command("--broker-defaults", "--alter", "--add-config-file", str(path))
    assert command.add == {"log.cleaner.threads": "3", "ssl.cipher.suites": "A,B"}
    missing = _refused("--broker", "0", "--alter", "--add-config-file", str(tmp_path / "nope"))
    assert "cannot read properties file" in missing


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--broker", "0"], "Command must include exactly one action: --describe, --alter"),
        (
            ["--broker", "0", "--describe", "--alter"],
            "Command must include exactly one action: --describe, --alter",
        ),
        (
            ["--broker", "0", "--describe", "--add-config", "a=1"],
            'Option "[describe]" can\'t be used with option "[add-config]"',
        ),
        (
            ["--broker", "0", "--describe", "--delete-config", "a"],
            'Option "[describe]" can\'t be used with option "[delete-config]"',
        ),
        (
            ["--broker", "0", "--alter", "--all", "--delete-config", "a"],
            'Option "[alter]" can\'t be used with option "[all]"',
        ),
        (["--describe"], "At least one entity type must be specified"),
        (["--entity-name", "0", "--describe"], "At least one entity type must be specified"),
        (
            ["--entity-type", "widgets", "--entity-name", "u", "--describe"],
            "Invalid entity type widgets, the entity type must be one of topics, clients, "
            "users, brokers, ips, groups with a --bootstrap-server argument",
        ),
        (
            ["--entity-type", "brokers", "--entity-type", "brokers", "--describe"],
            "Duplicate entity type(s) specified: brokers",
        ),
        (
            ["--broker", "0", "--broker-defaults", "--describe"],
            "Duplicate entity type(s) specified: brokers",
        ),
        (
            ["--entity-type", "brokers", "--entity-type", "topics", "--describe"],
            "Only 'users' and 'clients' entity types may be specified together",
        ),
        (
            ["--entity-default", "--broker", "0", "--describe"],
            "--entity-{type,name,default} should not be used in conjunction with specific "
            "entity flags",
        ),
        (
            ["--entity-name", "t", "--topic", "t", "--describe"],
            "--entity-{type,name,default} should not be used in conjunction with specific "
            "entity flags",
        ),
        (
            ["--entity-type", "brokers", "--entity-name", "0", "--entity-default", "--describe"],
            "Only one of --entity-name or --entity-default may be specified",
        ),
        (
            ["--entity-type", "topics", "--entity-default", "--describe"],
            "--entity-default is only supported for --entity-type brokers",
        ),
        (
            ["--entity-type", "brokers", "--entity-name", "b0", "--describe"],
            "The entity name for brokers must be a valid integer broker id, but it is: b0",
        ),
        (
            ["--broker", "x", "--alter", "--delete-config", "a"],
            "The entity name for brokers must be a valid integer broker id, but it is: x",
        ),
        (
            ["--topic", "bad/name", "--describe"],
            'Topic name "bad/name" is illegal, it contains a character other than ASCII '
            "alphanumerics, '.', '_' and '-'",
        ),
        (["--topic", "..", "--describe"], 'Topic name cannot be "." or ".."'),
        (
            ["--entity-type", "topics", "--alter", "--add-config", "a=1"],
            "an entity name must be specified with --alter of topics",
        ),
        (
            ["--entity-type", "brokers", "--alter", "--add-config", "a=1"],
            "an entity-name or default entity must be specified with --alter of brokers",
        ),
        (
            ["--broker", "0", "--alter"],
            "At least one of --add-config, --add-config-file, or --delete-config must be "
            "specified with --alter",
        ),
        (
            ["--broker", "0", "--alter", "--add-config", "a=1", "--add-config-file", "f"],
            "Only one of --add-config or --add-config-file must be specified",
        ),
        (
            ["--topic", "t", "--alter", "--add-config", "a"],
            'Invalid entity config: all configs to be added must be in the format "key=val" '
            'or "key=[val1,val2]" to group values which contain commas.',
        ),
    ],
)
def test_refused_command_lines(argv: list[str], message: str) -> None:
    assert _refused(*argv) == message


def test_run_prints_one_line_and_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    args = _args("--broker", "0", "--alter")
    assert args.func(args) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.strip().count("\n") == 0
    assert err.startswith("At least one of --add-config")


def test_argparse_refuses_missing_bootstrap_server(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        _parser().parse_args(["configs", "--broker", "0", "--describe"])
    assert info.value.code == 2
    assert "--bootstrap-server" in capsys.readouterr().err


def test_client_properties(tmp_path: Path) -> None:
    assert client_properties(_args("--broker", "0", "--describe")) == {
        "bootstrap.servers": "127.0.0.1:9"
    }
    path = tmp_path / "client.properties"
    path.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        "bootstrap.servers=elsewhere:1\nssl.truststore.location=/x/trust.p12\n"
    )
    props = client_properties(_args("--command-config", str(path), "--broker", "0", "--describe"))
    assert props == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "bootstrap.servers": "127.0.0.1:9",
        "ssl.truststore.location": "/x/trust.p12",
    }


def test_run_refuses_unreadable_command_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = _args("--command-config", str(tmp_path / "none"), "--broker", "0", "--describe")
    assert args.func(args) == 1
    assert "cannot read properties file" in capsys.readouterr().err


# output ------------------------------------------------------------------------------------
def _entry(
    name: str,
    value: str | None,
    source: ConfigSource,
    synonyms: tuple[ConfigSynonym, ...] = (),
    sensitive: bool = False,
) -> ConfigEntry:
    return ConfigEntry(name, value, int(source), False, sensitive, synonyms)


def test_format_entry() -> None:
    entry = _entry(
        "log.cleaner.threads",
        "2",
        ConfigSource.DYNAMIC_BROKER_CONFIG,
        (
            ConfigSynonym("log.cleaner.threads", "2", int(ConfigSource.DYNAMIC_BROKER_CONFIG)),
            ConfigSynonym("log.cleaner.threads", "1", int(ConfigSource.DEFAULT_CONFIG)),
        ),
    )
    assert format_entry(entry) == (
        "  log.cleaner.threads=2 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:"
        "log.cleaner.threads=2, DEFAULT_CONFIG:log.cleaner.threads=1}"
    )
    assert format_entry(_entry("x", None, ConfigSource.DEFAULT_CONFIG)) == (
        "  x=null sensitive=false synonyms={}"
    )


def test_format_entry_hides_sensitive_values() -> None:
    entry = _entry(
        "ssl.keystore.password",
        "secret",
        ConfigSource.DYNAMIC_BROKER_CONFIG,
        (ConfigSynonym("ssl.keystore.password", "secret", 2),),
        sensitive=True,
    )
    line = format_entry(entry)
    assert "secret" not in line
    assert line == (
        "  ssl.keystore.password=null sensitive=true "
        "synonyms={DYNAMIC_BROKER_CONFIG:ssl.keystore.password=null}"
    )


def test_format_entry_source_names() -> None:
    synonyms = tuple(ConfigSynonym("n", "v", s) for s in (1, 3, 4, 6, 7, 8, 0, 99))
    assert format_entry(_entry("n", "v", ConfigSource.DYNAMIC_TOPIC_CONFIG, synonyms)) == (
        "  n=v sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:n=v, "
        "DYNAMIC_DEFAULT_BROKER_CONFIG:n=v, STATIC_BROKER_CONFIG:n=v, "
        "DYNAMIC_BROKER_LOGGER_CONFIG:n=v, DYNAMIC_CLIENT_METRICS_CONFIG:n=v, "
        "DYNAMIC_GROUP_CONFIG:n=v, UNKNOWN:n=v, UNKNOWN:n=v}"
    )


def test_headers() -> None:
    assert describe_header("brokers", "0", False) == "Dynamic configs for broker 0 are:"
    assert describe_header("brokers", "0", True) == "All configs for broker 0 are:"
    assert describe_header("brokers", "", False) == (
        "Default configs for brokers in the cluster are:"
    )
    assert describe_header("brokers", "", True) == (
        "Default configs for brokers in the cluster are:"
    )
    assert describe_header("topics", "t", False) == "Dynamic configs for topic t are:"
    assert describe_header("topics", "t", True) == "All configs for topic t are:"


def test_describe_lines_filter_by_source_and_sort() -> None:
    entries = {
        e.name: e
        for e in (
            _entry("z", "1", ConfigSource.DYNAMIC_BROKER_CONFIG),
            _entry("a", "2", ConfigSource.DYNAMIC_BROKER_CONFIG),
            _entry("m", "3", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
            _entry("s", "4", ConfigSource.STATIC_BROKER_CONFIG),
            _entry("d", "5", ConfigSource.DEFAULT_CONFIG),
            _entry("t", "6", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        )
    }
    names = [line.split("=")[0].strip() for line in describe_lines("brokers", "0", entries, False)]
    assert names == ["Dynamic configs for broker 0 are:", "a", "z"]
    default = describe_lines("brokers", "", entries, False)
    assert [line.split("=")[0].strip() for line in default[1:]] == ["m"]
    topic = describe_lines("topics", "t", entries, False)
    assert [line.split("=")[0].strip() for line in topic[1:]] == ["t"]
    every = describe_lines("brokers", "0", entries, True)
    assert every[0] == "All configs for broker 0 are:"
    assert [line.split("=")[0].strip() for line in every[1:]] == ["a", "d", "m", "s", "t", "z"]


def test_completed_messages() -> None:
    assert completed_message(Entity("brokers", "0")) == "Completed updating config for broker 0."
    assert completed_message(Entity("brokers", "")) == (
        "Completed updating default config for brokers in the cluster."
    )
    assert completed_message(Entity("topics", "t")) == "Completed updating config for topic t."


def test_alter_ops_delete_first() -> None:
    ops = alter_ops({"a": "1", "b": "x,y"}, ["c"])
    assert [(o.name, o.value, o.op) for o in ops] == [
        ("c", None, OpType.DELETE),
        ("a", "1", OpType.SET),
        ("b", "x,y", OpType.SET),
    ]
