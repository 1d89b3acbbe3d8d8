"""DescribeLogDirs (API 35, KIP-113): a broker with two log dirs described by kafka-python's
admin, by @platformatic/kafka's (Node.js, installed with npm) and by ``kplane log-dirs``
(kafka-log-dirs.sh's options and JSON): sizes, offset lag, the volume's bytes, a failed dir
answering KAFKA_STORAGE_ERROR, and the cluster ACL."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from kafka.admin import KafkaAdminClient

from kplane.protocol.errors import ErrorCode
from kplane.testing.plugin import RunningBroker
from kplane.tools.cli import main
from tests.integration.helpers import (
    command_config,
    produce_all,
    secured_broker_overrides,
    wait_until,
)


def _two_dirs(broker_factory: Any, tmp_path: Path) -> tuple[RunningBroker, Path, Path]:
    first, second = tmp_path / "disk-a", tmp_path / "disk-b"
    broker = broker_factory({"kplane.log.storage": "file", "log.dirs": f"{first},{second}"})
    return broker, first, second


def _fill(broker: RunningBroker, topic: str, partitions: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap(), "linger.ms": 5})
    messages = [{"value": b"v" * 100, "partition": i % partitions} for i in range(count)]
    produce_all(producer, topic, messages, partitions)


def _dirs_of(topic: str, partitions: int, dirs: list[Path]) -> dict[int, Path]:
    return {p: next(d for d in dirs if (d / f"{topic}-{p}").is_dir()) for p in range(partitions)}


def test_kafka_python_describes_every_log_dir(broker_factory: Any, tmp_path: Path) -> None:
    broker, first, second = _two_dirs(broker_factory, tmp_path)
    broker.create_topic("spread", 4)
    broker.create_topic("other", 1)
    _fill(broker, "spread", 4, 200)
    placed = _dirs_of("spread", 4, [first, second])
    assert set(placed.values()) == {first, second}  # new logs go to the emptier dir
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap())
    try:
        (everything,) = admin.describe_log_dirs()
        (asked,) = admin.describe_log_dirs({"spread": [1]})
    finally:
        admin.close()
    assert everything["broker"] == broker.broker_id
    by_dir = {d["log_dir"]: d for d in everything["log_dirs"]}
    assert set(by_dir) == {str(first), str(second)}
    seen = {}
    for path, d in by_dir.items():
        assert d["error_code"] == 0
        assert 0 < d["usable_bytes"] <= d["total_bytes"]
        for topic in d["topics"]:
            for p in topic["partitions"]:
                seen[(topic["name"], p["partition_index"])] = (path, p)
    assert set(seen) == {("spread", p) for p in range(4)} | {("other", 0)}
    for p in range(4):
        path, described = seen[("spread", p)]
        replica = broker.replica("spread", p)
        assert replica is not None and replica.log_end_offset == 50
        assert path == str(placed[p])
        assert described["partition_size"] == replica.size_bytes > 0
        assert (described["offset_lag"], described["is_future_key"]) == (0, False)
    only = [
        (d["log_dir"], t["name"], p["partition_index"])
        for d in asked["log_dirs"]
        for t in d["topics"]
        for p in t["partitions"]
    ]
    assert only == [(str(placed[1]), "spread", 1)]


PLATFORMATIC = "@platformatic/kafka@2.12.1"
DESCRIBE_JS = """
// Node.js 20 lacks Promise.withResolvers (22 has it), which the client uses.
Promise.withResolvers ??= () => {
  const out = {}
  out.promise = new Promise((resolve, reject) => Object.assign(out, { resolve, reject }))
  return out
}
const { Admin } = await import('@platformatic/kafka')
const [bootstrap, topic] = process.argv.slice(2)
const admin = new Admin({ clientId: 'log-dirs-test', bootstrapBrokers: [bootstrap] })
const described = await admin.describeLogDirs({ topics: [{ name: topic, partitions: [0, 1] }] })
await admin.close()
console.log(JSON.stringify(described, (_k, v) => (typeof v === 'bigint' ? Number(v) : v)))
"""


@pytest.fixture(scope="session")
def platformatic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with @platformatic/kafka installed by npm (skipped without Node.js)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("Node.js and npm are needed")
    where = tmp_path_factory.mktemp("npm")
    done = subprocess.run(
        ["npm", "install", "--silent", "--no-audit", "--no-fund", PLATFORMATIC],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    (where / "describe.mjs").write_text(DESCRIBE_JS)
    return where


def test_platformatic_kafka_describes_log_dirs(
    broker_factory: Any, tmp_path: Path, platformatic: Path
) -> None:
    broker, first, second = _two_dirs(broker_factory, tmp_path)
    broker.create_topic("node", 2)
    _fill(broker, "node", 2, 40)
    placed = _dirs_of("node", 2, [first, second])
    done = subprocess.run(
        ["node", "describe.mjs", broker.bootstrap(), "node"],
        cwd=platformatic,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    (described,) = json.loads(done.stdout)
    assert described["broker"] == broker.broker_id
    seen = {
        (d["logDir"], p["partitionIndex"]): p
        for d in described["results"]
        for t in d["topics"]
        for p in t["partitions"]
    }
    for partition in range(2):
        replica = broker.replica("node", partition)
        assert replica is not None
        found = seen[(str(placed[partition]), partition)]
        assert (found["partitionSize"], found["offsetLag"]) == (replica.size_bytes, 0)
    assert all(0 < d["usableBytes"] <= d["totalBytes"] for d in described["results"])


def log_dirs(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["log-dirs", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_kplane_log_dirs_and_a_failed_dir(
    broker_factory: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broker, first, second = _two_dirs(broker_factory, tmp_path)
    broker.create_topic("t", 2, config={"segment.bytes": "1024"})
    broker.create_topic("u", 1)
    placed = _dirs_of("t", 2, [first, second])
    b = ("--bootstrap-server", broker.bootstrap())

    code, out, err = log_dirs(capsys, *b, "--describe", "--topic-list", "t")
    assert (code, err) == (0, "")
    head, received, document = out.splitlines()
    assert head == "Querying brokers for log directories information"
    assert received == f"Received log directory information from brokers {broker.broker_id}"
    parsed = json.loads(document)
    assert parsed["version"] == 1
    (described,) = parsed["brokers"]
    assert described["broker"] == broker.broker_id
    assert sorted(
        (d["logDir"], d["error"], [p["partition"] for p in d["partitions"]])
        for d in described["logDirs"]
    ) == sorted((str(placed[p]), None, [f"t-{p}"]) for p in range(2))
    assert list(described["logDirs"][0]["partitions"][0]) == [
        "partition",
        "size",
        "offsetLag",
        "isFuture",
    ]

    code, out, err = log_dirs(capsys, *b, "--describe", "--broker-list", "0,7")
    assert (code, out) == (1, "")
    assert err == (
        "ERROR: The given brokers do not exist from --broker-list: 7. "
        f"Current existent brokers: {broker.broker_id}\n"
    )

    # t-1's files go: its next roll fails, and its log dir goes offline as a whole.
    failing = placed[1]
    shutil.rmtree(failing / "t-1")
    producer = Producer({"bootstrap.servers": broker.bootstrap(), "message.timeout.ms": 5000})
    errors: list[Any] = []
    for _ in range(40):
        producer.produce("t", b"x" * 200, partition=1, on_delivery=lambda e, _m: errors.append(e))
        producer.flush(10)
        if errors[-1] is not None:
            break
    assert errors[-1] is not None

    def failed_dir() -> Any:
        _code, out, _err = log_dirs(capsys, *b, "--describe")
        (only,) = json.loads(out.splitlines()[-1])["brokers"]
        return {d["logDir"]: d for d in only["logDirs"]}[str(failing)]["error"]

    assert wait_until(failed_dir, what="the failed dir described") == (
        "org.apache.kafka.common.errors.KafkaStorageException"
    )
    _code, out, _err = log_dirs(capsys, *b, "--describe", "--topic-list", "t")
    healthy = [
        d
        for d in json.loads(out.splitlines()[-1])["brokers"][0]["logDirs"]
        if d["logDir"] != str(failing)
    ]
    assert [p["partition"] for d in healthy for p in d["partitions"]] == ["t-0"]


def test_describing_log_dirs_needs_describe_on_the_cluster(
    broker_factory: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broker = broker_factory(secured_broker_overrides(**{"kplane.log.storage": "file"}))
    b = ("--bootstrap-server", broker.bootstrap("SASL_PLAINTEXT"))
    alice = str(command_config(tmp_path / "alice.properties", "alice"))
    admin = str(command_config(tmp_path / "admin.properties", "admin"))
    code, out, err = log_dirs(capsys, *b, "--command-config", alice, "--describe")
    assert code == 1 and err.count("\n") == 1
    assert ErrorCode.cluster_authorization_failed.name in err
    code, out, err = log_dirs(capsys, *b, "--command-config", admin, "--describe")
    assert code == 0 and json.loads(out.splitlines()[-1])["brokers"][0]["logDirs"]
