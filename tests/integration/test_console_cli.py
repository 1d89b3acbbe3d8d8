"""``kplane console-consumer`` as a user runs it: stopped by SIGTERM quietly, and reading one
partition from an offset (round trips are covered in test_kafka_cli.py)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from confluent_kafka import Consumer
from kafka import KafkaProducer

from kplane.testing.plugin import RunningBroker
from tests.repo import REPO_ROOT

from .test_kafka_cli import ok


def _produce(broker: RunningBroker, topic: str, values: list[bytes]) -> None:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers)
    for value in values:
        producer.send(topic, value, partition=0)
    producer.flush(10)
    producer.close()


def test_sigterm_stops_the_console_consumer_quietly(broker: RunningBroker) -> None:
    broker.create_topic("lines")
    _produce(broker, "lines", [b"a", b"b", b"c"])
    process = subprocess.Popen(
        [sys.executable, "-m", "kplane", "console-consumer", "--bootstrap-server",
         broker.bootstrap_servers, "--topic", "lines", "--from-beginning"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT,
    )
    assert process.stdout is not None
    got = [process.stdout.readline() for _ in range(3)]
    assert got == ["a\n", "b\n", "c\n"]
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == "Processed a total of 3 messages"


def test_one_partition_from_an_offset(broker: RunningBroker) -> None:
    broker.create_topic("lines", partitions=2)
    _produce(broker, "lines", [b"a", b"b", b"c"])
    out = ok("console-consumer", "--bootstrap-server", broker.bootstrap_servers, "--topic",
             "lines", "--partition", "0", "--offset", "1", "--max-messages", "2",
             "--property", "print.partition=true", "--property", "print.offset=true")
    assert out.splitlines() == ["Partition:0\tOffset:1\tb", "Partition:0\tOffset:2\tc"]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compression_codec_round_trip(broker: RunningBroker, codec: str) -> None:
    broker.create_topic("packed")
    lines = "".join(f"k{i}\tvalue {i} " + "x" * 200 + "\n" for i in range(20))
    ok("console-producer", "--bootstrap-server", broker.bootstrap_servers, "--topic", "packed",
       "--property", "parse.key=true", "--compression-codec", codec, stdin=lines)
    consumer = Consumer({
        "bootstrap.servers": broker.bootstrap_servers, "group.id": "check",
        "auto.offset.reset": "earliest",
    })
    consumer.subscribe(["packed"])
    got = []
    while len(got) < 20:
        message = consumer.poll(10)
        assert message is not None and message.error() is None
        got.append(f"{message.key().decode()}\t{message.value().decode()}\n")
    consumer.close()
    assert "".join(got) == lines
