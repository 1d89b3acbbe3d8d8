"""``kplane serve`` as a process: start-up log lines, clients, signals, bad configs."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from kplane.testing.plugin import BrokerProcess
from kplane.tools.serve_process import ServeFailed, json_events, spawn_serve
from tests.integration.helpers import assert_one_error_line, run_cli
from tests.repo import REPO_ROOT

pytestmark = pytest.mark.slow

START_TIMEOUT_S = 30.0
SHUTDOWN_REQUIREMENT_S = 5.0  # product requirement: SIGTERM/SIGINT exit within 5 s
SHUTDOWN_WAIT_S = 20.0  # how long the test waits before declaring the process hung


def events_named(text: str, name: str) -> list[dict]:
    return [e for e in json_events(text) if e.get("event") == name]


def wait_for_event(log_text: Callable[[], str], name: str, process: subprocess.Popen[bytes],
                   timeout: float = START_TIMEOUT_S) -> dict:
    """Wait until the log holds an event ``name``; fails early if the process exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log_text()
        found = events_named(text, name)
        if found:
            return found[0]
        if process.poll() is not None:
            pytest.fail(f"process exited {process.returncode} before {name!r}:\n{text}")
        time.sleep(0.05)
    pytest.fail(f"no {name!r} line within {timeout}s:\n{log_text()}")


def started(handle: BrokerProcess) -> BrokerProcess:
    wait_for_event(handle.log_text, "started", handle.process)
    return handle


def stop_with(process: subprocess.Popen[bytes], signum: int) -> tuple[int, float]:
    """Send ``signum``; (exit code, seconds until exit). Fails if it does not exit at all."""
    begin = time.monotonic()
    process.send_signal(signum)
    try:
        code = process.wait(timeout=SHUTDOWN_WAIT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running {SHUTDOWN_WAIT_S}s after {signal.Signals(signum).name}")
    return code, time.monotonic() - begin


def produce(bootstrap: str, topic: str, count: int) -> list[int]:
    """Produce ``count`` records with acks=all; their offsets, failing on any error."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    errors: list[str] = []
    offsets: list[int] = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            offsets.append(msg.offset())

    for i in range(count):
        producer.produce(topic, key=str(i).encode(), value=b"v" * (i % 100),
                         on_delivery=on_delivery)
    assert producer.flush(30) == 0, "records still undelivered after flush"
    assert errors == []
    return offsets


# start-up --------------------------------------------------------------------------------
def test_logs_listener_bound_then_started(broker_process) -> None:
    handle = started(broker_process())
    events = json_events(handle.log_text())
    bound = [e for e in events if e.get("event") == "listener bound"]
    assert len(bound) == 1, bound
    (line,) = bound
    assert line["listener"] == "PLAINTEXT"
    assert line["security_protocol"] == "PLAINTEXT"
    assert line["bind_host"] == "127.0.0.1"
    assert line["port"] == handle.port
    assert line["advertised"] == f"PLAINTEXT://127.0.0.1:{handle.port}"
    names = [e.get("event") for e in events]
    assert names.count("started") == 1
    assert names.index("listener bound") < names.index("started")
    assert not [e for e in events if e.get("level") in ("error", "critical")]


def test_confluent_producer_works(broker_process) -> None:
    handle = started(broker_process())
    offsets = produce(handle.bootstrap, "serve-smoke", 1_000)
    assert sorted(offsets) == list(range(1_000))
    metadata = AdminClient({"bootstrap.servers": handle.bootstrap}).list_topics(timeout=10)
    assert "serve-smoke" in metadata.topics
    assert [(b.id, b.host, b.port) for b in metadata.brokers.values()] == [
        (0, "127.0.0.1", handle.port)
    ]


# signals ---------------------------------------------------------------------------------
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_stops_cleanly(broker_process, signum: int) -> None:
    handle = started(broker_process())
    code, seconds = stop_with(handle.process, signum)
    handle.stopped = True
    text = handle.log_text()
    assert code == 0, text
    assert seconds < SHUTDOWN_REQUIREMENT_S, f"exit took {seconds:.2f}s:\n{text}"
    shutting = events_named(text, "shutting down")
    assert [e.get("signal") for e in shutting] == [signal.Signals(signum).name]
    assert len(events_named(text, "stopped")) == 1, text
    assert "Traceback" not in text, text


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_stops_cleanly_with_clients_connected(broker_process, signum: int) -> None:
    """A consumer long-polling Fetch and an idle producer connection must not delay the exit."""
    handle = started(broker_process())
    produce(handle.bootstrap, "serve-busy", 100)
    consumer = Consumer({
        "bootstrap.servers": handle.bootstrap,
        "group.id": "serve-busy",
        "enable.auto.commit": False,
        "fetch.wait.max.ms": 3_000,
        "reconnect.backoff.ms": 1_000,
        "reconnect.backoff.max.ms": 5_000,
    })
    try:
        consumer.assign([TopicPartition("serve-busy", 0, OFFSET_BEGINNING)])
        got = 0
        deadline = time.monotonic() + 30
        while got < 100 and time.monotonic() < deadline:
            got += sum(1 for m in consumer.consume(100, timeout=1.0) if m.error() is None)
        assert got == 100
        time.sleep(0.5)  # the consumer is now parked in a Fetch waiting for new records
        code, seconds = stop_with(handle.process, signum)
        handle.stopped = True
    finally:
        consumer.close()
    text = handle.log_text()
    assert code == 0, text
    assert seconds < SHUTDOWN_REQUIREMENT_S, f"exit took {seconds:.2f}s:\n{text}"
    assert len(events_named(text, "stopped")) == 1, text


# several listeners -------------------------------------------------------------------------
def test_multi_listener_config_logs_both_listeners(broker_process) -> None:
    handle = broker_process(
        "configs/multi-listener.properties",
        "listeners=INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.2:0",
        "advertised.listeners=INTERNAL://localhost:0,EXTERNAL://127.0.0.2:0",
        plaintext_port=False,
    )
    process, log_text = handle.process, handle.log_text

    wait_for_event(log_text, "started", process)
    bound = {e["listener"]: e for e in events_named(log_text(), "listener bound")}
    assert sorted(bound) == ["EXTERNAL", "INTERNAL"], log_text()
    internal, external = bound["INTERNAL"], bound["EXTERNAL"]
    assert internal["bind_host"] == "127.0.0.1"
    assert external["bind_host"] == "127.0.0.2"
    for line in (internal, external):
        assert line["security_protocol"] == "PLAINTEXT"
        assert line["port"] > 0
    assert internal["advertised"] == f"INTERNAL://localhost:{internal['port']}"
    assert external["advertised"] == f"EXTERNAL://127.0.0.2:{external['port']}"

    # A client on EXTERNAL hears only of EXTERNAL's endpoint, and can produce through it.
    bootstrap = f"127.0.0.2:{external['port']}"
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    assert [(b.id, b.host, b.port) for b in metadata.brokers.values()] == [
        (0, "127.0.0.2", external["port"])
    ]
    assert sorted(produce(bootstrap, "multi-external", 50)) == list(range(50))

    code, seconds = stop_with(process, signal.SIGTERM)
    assert code == 0, log_text()
    assert seconds < SHUTDOWN_REQUIREMENT_S
    assert len(events_named(log_text(), "stopped")) == 1


# bad configs -------------------------------------------------------------------------------
MAP_EXTRA = (
    "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT,CONTROL:PLAINTEXT"
)

BAD_CONFIGS = {
    "duplicate-listener-names": (
        ["listeners=PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.2:0"],
        ["listeners", "PLAINTEXT"],
    ),
    "unmapped-listener-name": (
        ["listeners=PLAINTEXT://127.0.0.1:0,FOO://127.0.0.1:0"],
        ["listeners", "FOO"],
    ),
    "unknown-security-protocol": (
        ["listener.security.protocol.map=PLAINTEXT:PLAINTEXT,FOO:BOGUS"],
        ["listener.security.protocol.map", "BOGUS"],
    ),
    "duplicate-ports": (
        [MAP_EXTRA, "listeners=PLAINTEXT://127.0.0.1:29092,INTERNAL://127.0.0.1:29092"],
        ["listeners", "29092"],
    ),
    "advertised-name-not-in-listeners": (
        [MAP_EXTRA, "listeners=PLAINTEXT://127.0.0.1:0",
         "advertised.listeners=PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:29093"],
        ["advertised.listeners", "INTERNAL"],
    ),
    "wildcard-advertised-host": (
        ["listeners=PLAINTEXT://127.0.0.1:0", "advertised.listeners=PLAINTEXT://0.0.0.0:29094"],
        ["advertised.listeners", "0.0.0.0"],
    ),
    "wildcard-listener-advertised-implicitly": (
        ["listeners=PLAINTEXT://0.0.0.0:0"],
        ["advertised.listeners", "0.0.0.0"],
    ),
    "control-plane-is-inter-broker": (
        [MAP_EXTRA, "listeners=INTERNAL://127.0.0.1:0,CONTROL://127.0.0.1:0",
         "inter.broker.listener.name=INTERNAL", "control.plane.listener.name=INTERNAL"],
        ["control.plane.listener.name", "INTERNAL"],
    ),
    "control-plane-not-in-listeners": (
        [MAP_EXTRA, "listeners=PLAINTEXT://127.0.0.1:0", "control.plane.listener.name=CONTROL"],
        ["control.plane.listener.name", "CONTROL"],
    ),
}


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_bad_listener_config_exits_with_one_error_line(tmp_path: Path, case: str) -> None:
    overrides, mentions = BAD_CONFIGS[case]
    assert_one_error_line(run_cli(tmp_path, *overrides), *mentions)


def test_port_in_use_exits_with_one_error_line(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen(1)
        port = squatter.getsockname()[1]
        done = run_cli(tmp_path, f"listeners=PLAINTEXT://127.0.0.1:{port}")
    assert_one_error_line(done, "PLAINTEXT", f"127.0.0.1:{port}")


def test_unreachable_zookeeper_exits_with_one_error_line(tmp_path: Path) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # nothing listens there
    done = run_cli(
        tmp_path,
        f"zookeeper.connect=127.0.0.1:{port}/kplane",
        "zookeeper.connection.timeout.ms=1000",
    )
    assert_one_error_line(done, f"127.0.0.1:{port}")


def test_missing_config_file_exits_with_one_error_line(tmp_path: Path) -> None:
    done = run_cli(tmp_path, config="configs/no-such-file.properties")
    assert_one_error_line(done, "no-such-file.properties")


def test_a_restart_appending_to_its_log_waits_for_its_own_start(tmp_path: Path) -> None:
    log_path = tmp_path / "broker.log"
    log_path.write_text('{"event": "started", "level": "info"}\n')  # an earlier run's
    serve = spawn_serve(
        str(REPO_ROOT / "configs/server.properties"),
        [f"log.dirs={tmp_path / 'data'}", "listeners=PLAINTEXT://127.0.0.1:0,FOO://127.0.0.1:0"],
        log_path,
        append=True,
    )
    with pytest.raises(ServeFailed, match="exited with 1") as info:
        serve.wait_started(START_TIMEOUT_S)
    assert "FOO" in str(info.value)  # the error line of this run
    assert log_path.read_text().startswith('{"event": "started"')  # appended, not replaced
