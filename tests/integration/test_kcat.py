"""kcat (librdkafka's command-line client) against an in-process broker."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Sequence

import pytest

from kplane.testing.plugin import RunningBroker

KCAT = shutil.which("kcat")

pytestmark = pytest.mark.skipif(
    KCAT is None, reason="kcat is not on PATH (install it with `make setup`: apt package kcat)"
)


def kcat(
    broker: RunningBroker, *args: str, stdin: str | None = None, listener: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run kcat against ``broker`` and fail with its stderr when it exits non-zero."""
    assert KCAT is not None
    command: Sequence[str] = [KCAT, "-b", broker.bootstrap(listener), *args]
    done = subprocess.run(
        command, input=stdin, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, f"{' '.join(command)} exited {done.returncode}: {done.stderr}"
    return done


def consume_json(broker: RunningBroker, topic: str, *args: str) -> list[dict]:
    out = kcat(broker, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-J", *args).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_produce_lines_then_consume_from_beginning(broker: RunningBroker) -> None:
    lines = [f"line {i} " + "x" * (i % 300) for i in range(2_000)]
    kcat(broker, "-P", "-t", "kcat-lines", stdin="\n".join(lines) + "\n")
    done = kcat(broker, "-C", "-t", "kcat-lines", "-o", "beginning", "-e", "-q")
    assert done.stdout.splitlines() == lines


def test_keys_headers_and_offsets_survive(broker: RunningBroker) -> None:
    lines = [f"key-{i}:value {i}" for i in range(100)]
    kcat(broker, "-P", "-t", "kcat-keyed", "-K", ":", "-H", "trace=abc", "-H", "empty=",
         stdin="\n".join(lines) + "\n")
    messages = consume_json(broker, "kcat-keyed")
    assert [(m["key"], m["payload"]) for m in messages] == [
        (f"key-{i}", f"value {i}") for i in range(100)
    ]
    assert [m["offset"] for m in messages] == list(range(100))
    assert {m["partition"] for m in messages} == {0}
    assert all(m["headers"] == ["trace", "abc", "empty", ""] for m in messages)


def test_explicit_partition_of_a_three_partition_topic(broker_factory) -> None:
    broker = broker_factory({"num.partitions": "3"})
    for partition in (2, 0):
        kcat(broker, "-P", "-t", "kcat-parts", "-p", str(partition),
             stdin="".join(f"p{partition}-{i}\n" for i in range(10)))
    only_two = consume_json(broker, "kcat-parts", "-p", "2")
    assert [(m["partition"], m["payload"]) for m in only_two] == [
        (2, f"p2-{i}") for i in range(10)
    ]
    everything = consume_json(broker, "kcat-parts")
    assert sorted((m["partition"], m["offset"]) for m in everything) == sorted(
        [(0, i) for i in range(10)] + [(2, i) for i in range(10)]
    )
    listing = json.loads(kcat(broker, "-L", "-J", "-t", "kcat-parts").stdout)
    (topic,) = listing["topics"]
    assert sorted(p["partition"] for p in topic["partitions"]) == [0, 1, 2]
    assert all(p["leader"] == 0 for p in topic["partitions"])


def test_metadata_list_shows_advertised_endpoint(broker: RunningBroker) -> None:
    host, port = broker.address()
    text = kcat(broker, "-L").stdout
    assert "1 brokers:" in text
    assert f"broker 0 at {host}:{port}" in text, text
    listing = json.loads(kcat(broker, "-L", "-J").stdout)
    assert listing["brokers"] == [{"id": 0, "name": f"{host}:{port}"}]
    assert listing["controllerid"] == 0


def test_metadata_list_shows_only_the_listener_connected_to(broker_factory) -> None:
    """Two listener names on two loopback addresses, each advertising the port it bound."""
    broker = broker_factory({
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
        "listeners": "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.2:0",
        "advertised.listeners": "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.2:0",
        "inter.broker.listener.name": "INTERNAL",
    })
    for listener in ("INTERNAL", "EXTERNAL"):
        host, port = broker.address(listener)
        listing = json.loads(kcat(broker, "-L", "-J", listener=listener).stdout)
        assert listing["brokers"] == [{"id": 0, "name": f"{host}:{port}"}], listener
    assert broker.address("INTERNAL")[0] == "127.0.0.1"
    assert broker.address("EXTERNAL")[0] == "127.0.0.2"
