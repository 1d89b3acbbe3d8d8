"""``kplane topics``' failures as Kafka's tool reports them: one line, exit 1."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient

from kplane.testing.plugin import RunningBroker
from kplane.tools.cli import main


def topics(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["topics", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_broker_refusals_are_one_line(
    broker: RunningBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    b = ("--bootstrap-server", broker.bootstrap_servers)
    assert topics(capsys, *b, "--create", "--topic", "t", "--partitions", "3")[0] == 0
    assert topics(capsys, *b, "--alter", "--topic", "t", "--partitions", "2") == (
        1, "", "Error while executing topic command : Topic currently has 3 partitions, "
        "which is higher than the requested 2.\n"
    )
    assert topics(capsys, *b, "--create", "--topic", "u", "--replication-factor", "3") == (
        1, "", "Error while executing topic command : Replication factor: 3 larger than "
        "available brokers: 1.\n"
    )
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    described = admin.list_topics(timeout=10).topics
    assert len(described["t"].partitions) == 3 and "u" not in described


def test_if_exists_on_a_missing_topic(
    broker: RunningBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    b = ("--bootstrap-server", broker.bootstrap_servers)
    assert topics(capsys, *b, "--delete", "--topic", "nope", "--if-exists") == (0, "", "")
    code, _, err = topics(capsys, *b, "--delete", "--topic", "nope")
    assert (code, err) == (
        1, "Error while executing topic command : Topic 'nope' does not exist as expected\n"
    )
