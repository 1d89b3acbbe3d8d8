"""``kplane configs`` against an in-process broker: what kafka-configs.sh prints and does
for brokers, the cluster-wide broker default and topics (KIP-226)."""

from __future__ import annotations

import argparse
import contextlib
import io
import subprocess
import sys
from pathlib import Path

import pytest

from kplane.testing.plugin import RunningBroker
from kplane.tools import configs
from kplane.tools.cli import build_parser

TOPIC = "configs-cli"


class Tool:
    """Runs ``kplane configs`` in this process against one broker."""

    def __init__(self, broker: RunningBroker, capsys: pytest.CaptureFixture[str]) -> None:
        self.bootstrap = broker.bootstrap()
        self.capsys = capsys
        parser = argparse.ArgumentParser(prog="kplane")
        configs.add_parser(parser.add_subparsers(dest="command", required=True))
        self.parser = parser

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        """(exit code, stdout, stderr) of ``kplane configs --bootstrap-server B argv``."""
        self.capsys.readouterr()
        args = self.parser.parse_args(["configs", "--bootstrap-server", self.bootstrap, *argv])
        code = int(args.func(args))
        out, err = self.capsys.readouterr()
        return code, out, err

    def ok(self, *argv: str) -> list[str]:
        """Stdout lines of a run that must succeed."""
        code, out, err = self(*argv)
        assert (code, err) == (0, ""), (argv, code, err)
        return out.splitlines()

    def entries(self, *argv: str) -> dict[str, str]:
        """A --describe run's config lines by config name (header left out)."""
        lines = self.ok("--describe", *argv)
        return {line.strip().split("=", 1)[0]: line for line in lines[1:]}


@pytest.fixture
def tool(broker: RunningBroker, capsys: pytest.CaptureFixture[str]) -> Tool:
    # ``broker`` first: the broker's log is bound to stderr before capsys takes it over.
    return Tool(broker, capsys)


def _synonyms(line: str) -> list[str]:
    """``SOURCE:name=value`` items of a describe line."""
    inner = line.split(" synonyms={", 1)[1].rstrip("}")
    return inner.split(", ") if inner else []


def test_describe_broker_without_dynamic_configs(tool: Tool) -> None:
    assert tool.ok("--entity-type", "brokers", "--entity-name", "0", "--describe") == [
        "Dynamic configs for broker 0 are:"
    ]
    assert tool.ok("--broker-defaults", "--describe") == [
        "Default configs for brokers in the cluster are:"
    ]


def test_describe_all_shows_static_and_default_configs(tool: Tool) -> None:
    lines = tool.ok("--broker", "0", "--describe", "--all")
    assert lines[0] == "All configs for broker 0 are:"
    names = [line.strip().split("=", 1)[0] for line in lines[1:]]
    assert names == sorted(names)
    entries = tool.entries("--broker", "0", "--all")
    assert entries["num.io.threads"] == (
        "  num.io.threads=4 sensitive=false synonyms={STATIC_BROKER_CONFIG:num.io.threads=4, "
        "DEFAULT_CONFIG:num.io.threads=8}"
    )
    assert entries["log.cleaner.threads"] == (
        "  log.cleaner.threads=1 sensitive=false synonyms={DEFAULT_CONFIG:log.cleaner.threads=1}"
    )


def test_alter_broker_config(tool: Tool) -> None:
    assert tool.ok(
        "--entity-type", "brokers", "--entity-name", "0", "--alter",
        "--add-config", "num.io.threads=6,log.cleaner.threads=2",
    ) == ["Completed updating config for broker 0."]  # fmt: skip
    lines = tool.ok("--broker", "0", "--describe")
    assert lines == [
        "Dynamic configs for broker 0 are:",
        "  log.cleaner.threads=2 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:"
        "log.cleaner.threads=2, DEFAULT_CONFIG:log.cleaner.threads=1}",
        "  num.io.threads=6 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:num.io.threads=6, "
        "STATIC_BROKER_CONFIG:num.io.threads=4, DEFAULT_CONFIG:num.io.threads=8}",
    ]


def test_cluster_default_and_fall_back_on_delete(tool: Tool) -> None:
    assert tool.ok(
        "--entity-type", "brokers", "--entity-default", "--alter",
        "--add-config", "log.cleaner.threads=3",
    ) == ["Completed updating default config for brokers in the cluster."]  # fmt: skip
    default = tool.ok("--broker-defaults", "--describe")
    assert default[0] == "Default configs for brokers in the cluster are:"
    assert default[1].startswith("  log.cleaner.threads=3 sensitive=false synonyms=")
    assert _synonyms(default[1])[0] == "DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleaner.threads=3"
    # Broker 0 follows the default until it has its own value.
    assert tool.ok("--broker", "0", "--describe") == ["Dynamic configs for broker 0 are:"]
    line = tool.entries("--broker", "0", "--all")["log.cleaner.threads"]
    assert line.startswith("  log.cleaner.threads=3 ")
    assert tool.ok("--broker", "0", "--alter", "--add-config", "log.cleaner.threads=2") == [
        "Completed updating config for broker 0."
    ]
    line = tool.entries("--broker", "0")["log.cleaner.threads"]
    assert _synonyms(line) == [
        "DYNAMIC_BROKER_CONFIG:log.cleaner.threads=2",
        "DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleaner.threads=3",
        "DEFAULT_CONFIG:log.cleaner.threads=1",
    ]
    # Deleting the broker's own value falls back to the cluster default, then to Kafka's.
    assert tool.ok("--broker", "0", "--alter", "--delete-config", "log.cleaner.threads") == [
        "Completed updating config for broker 0."
    ]
    assert tool.ok("--broker", "0", "--describe") == ["Dynamic configs for broker 0 are:"]
    line = tool.entries("--broker", "0", "--all")["log.cleaner.threads"]
    assert line.startswith("  log.cleaner.threads=3 ")
    assert _synonyms(line)[0] == "DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleaner.threads=3"
    assert tool.ok("--broker-defaults", "--alter", "--delete-config", "log.cleaner.threads") == [
        "Completed updating default config for brokers in the cluster."
    ]
    assert tool.ok("--broker-defaults", "--describe") == [
        "Default configs for brokers in the cluster are:"
    ]
    line = tool.entries("--broker", "0", "--all")["log.cleaner.threads"]
    assert line == (
        "  log.cleaner.threads=1 sensitive=false synonyms={DEFAULT_CONFIG:log.cleaner.threads=1}"
    )


def test_describe_every_broker(tool: Tool) -> None:
    tool.ok("--broker", "0", "--alter", "--add-config", "message.max.bytes=2000000")
    lines = tool.ok("--entity-type", "brokers", "--describe")
    assert lines[0] == "Dynamic configs for broker 0 are:"
    assert lines[1].startswith("  message.max.bytes=2000000 sensitive=false synonyms=")
    assert lines[2:] == ["Default configs for brokers in the cluster are:"]


def test_topic_alter_and_describe(broker: RunningBroker, tool: Tool) -> None:
    broker.create_topic(TOPIC)
    assert tool.ok("--topic", TOPIC, "--describe") == [f"Dynamic configs for topic {TOPIC} are:"]
    assert tool.ok(
        "--entity-type", "topics", "--entity-name", TOPIC, "--alter",
        "--add-config", "retention.ms=3600000,cleanup.policy=[compact,delete]",
    ) == [f"Completed updating config for topic {TOPIC}."]  # fmt: skip
    entries = tool.entries("--topic", TOPIC)
    assert sorted(entries) == ["cleanup.policy", "retention.ms"]
    assert entries["cleanup.policy"].startswith(
        "  cleanup.policy=compact,delete sensitive=false synonyms="
        "{DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete, "
    )
    assert entries["retention.ms"].startswith(
        "  retention.ms=3600000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=3600000"
    )
    assert tool.ok("--topic", TOPIC, "--alter", "--delete-config", "retention.ms") == [
        f"Completed updating config for topic {TOPIC}."
    ]
    assert sorted(tool.entries("--topic", TOPIC)) == ["cleanup.policy"]
    every = tool.ok("--topic", TOPIC, "--describe", "--all")
    assert every[0] == f"All configs for topic {TOPIC} are:"
    retention = next(line for line in every if line.startswith("  retention.ms="))
    assert "DYNAMIC_TOPIC_CONFIG" not in retention
    lines = tool.ok("--entity-type", "topics", "--describe")
    assert f"Dynamic configs for topic {TOPIC} are:" in lines


def test_add_config_file_and_command_config(tool: Tool, tmp_path: Path) -> None:
    changes = tmp_path / "changes.properties"
    changes.write_text("log.cleaner.threads=2\n")
    client = tmp_path / "client.properties"
    client.write_text("security.protocol=PLAINTEXT\nrequest.timeout.ms=10000\n")
    assert tool.ok(
        "--command-config", str(client), "--broker", "0", "--alter",
        "--add-config-file", str(changes),
    ) == ["Completed updating config for broker 0."]  # fmt: skip
    line = tool.entries("--command-config", str(client), "--broker", "0")["log.cleaner.threads"]
    assert line.startswith("  log.cleaner.threads=2 ")


@pytest.mark.parametrize(
    "change",
    [
        "log.cleaner.threads=abc",
        "no.such.config=1",
        "broker.id=7",  # not dynamically updatable
    ],
)
def test_invalid_change_prints_the_error_and_exits_1(tool: Tool, change: str) -> None:
    code, out, err = tool("--broker", "0", "--alter", "--add-config", change)
    assert code == 1
    assert out == ""
    assert err.startswith("kplane configs: ")
    assert err.count("\n") == 1
    assert "INVALID_CONFIG" in err or "INVALID_REQUEST" in err
    assert tool.ok("--broker", "0", "--describe") == ["Dynamic configs for broker 0 are:"]


def test_invalid_topic_change_and_unknown_topic(broker: RunningBroker, tool: Tool) -> None:
    broker.create_topic(TOPIC)
    code, _, err = tool("--topic", TOPIC, "--alter", "--add-config", "retention.ms=soon")
    assert code == 1
    assert "INVALID_CONFIG" in err
    code, out, err = tool("--topic", "no-such-topic", "--describe")
    assert (code, out) == (1, "")
    assert "UNKNOWN_TOPIC_OR_PARTITION" in err


def _cli_has_configs() -> bool:
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            argv = ["configs", "--bootstrap-server", "h:1", "--describe"]
            build_parser(argv).parse_args(argv)
    except SystemExit:
        return False
    return True


@pytest.mark.skipif(not _cli_has_configs(), reason="kplane's cli does not register configs yet")
def test_kplane_configs_command(broker: RunningBroker) -> None:
    """The ``kplane configs`` command as a process, as kafka-configs.sh is run."""
    base = [sys.executable, "-m", "kplane", "configs"]
    base += ["--bootstrap-server", broker.bootstrap(), "--broker", "0"]
    altered = subprocess.run(
        [*base, "--alter", "--add-config", "log.cleaner.threads=2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (altered.returncode, altered.stdout) == (0, "Completed updating config for broker 0.\n")
    described = subprocess.run([*base, "--describe"], capture_output=True, text=True, timeout=60)
    assert described.returncode == 0
    assert described.stdout.splitlines() == [
        "Dynamic configs for broker 0 are:",
        "  log.cleaner.threads=2 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:"
        "log.cleaner.threads=2, DEFAULT_CONFIG:log.cleaner.threads=1}",
    ]
    refused = subprocess.run([*base, "--alter"], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1
    assert refused.stderr.startswith("At least one of --add-config")


def test_group_alter_and_describe(tool: Tool) -> None:
    assert tool.ok(
        "--group", "cli-group", "--alter",
        "--add-config", "consumer.session.timeout.ms=50000,share.auto.offset.reset=earliest",
    ) == ["Completed updating config for group cli-group."]  # fmt: skip
    entries = tool.entries("--entity-type", "groups", "--entity-name", "cli-group")
    assert entries == {
        "consumer.session.timeout.ms": "  consumer.session.timeout.ms=50000 sensitive=false "
        "synonyms={DYNAMIC_GROUP_CONFIG:consumer.session.timeout.ms=50000}",
        "share.auto.offset.reset": "  share.auto.offset.reset=earliest sensitive=false "
        "synonyms={DYNAMIC_GROUP_CONFIG:share.auto.offset.reset=earliest}",
    }
    every = tool.ok("--group", "cli-group", "--describe", "--all")
    assert every[0] == "All configs for group cli-group are:"
    assert "  share.isolation.level=read_uncommitted" in " ".join(every)
    code, _out, err = tool(
        "--group", "cli-group", "--alter", "--add-config", "consumer.session.timeout.ms=10"
    )
    assert code == 1
    assert "consumer.session.timeout.ms must be greater than or equal to" in err
