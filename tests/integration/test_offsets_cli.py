"""``kplane get-offsets`` at a timestamp and with bad input, run as a user runs it."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from kplane.testing.plugin import RunningBroker
from kplane.tools.cli import main


@pytest.mark.parametrize("time", ["x", "-4", "1.5"])
def test_a_bad_time_is_one_line_naming_it(time: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["get-offsets", "--bootstrap-server", "127.0.0.1:1", "--time", time]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"kplane get-offsets: Malformed time argument {time}. Please use -1 or latest / "
        "-2 or earliest / -3 or max-timestamp, or a specified long format timestamp\n"
    )


def test_offsets_at_a_timestamp_and_by_name(
    broker: RunningBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    b = ["--bootstrap-server", broker.bootstrap_servers]
    broker.create_topic("stamped")
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for ts in (1000, 2000, 3000):
        producer.produce("stamped", b"v", partition=0, timestamp=ts)
    assert producer.flush(10) == 0

    def offsets(time: str) -> str:
        capsys.readouterr()
        assert main(["get-offsets", *b, "--topic", "stamped", "--time", time]) == 0
        return capsys.readouterr().out

    assert offsets("2000") == "stamped:0:1\n"
    assert offsets("earliest") == "stamped:0:0\n"
    assert offsets("latest") == "stamped:0:3\n"
    assert offsets("-3") == "stamped:0:2\n"
