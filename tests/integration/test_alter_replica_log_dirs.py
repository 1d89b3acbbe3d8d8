"""AlterReplicaLogDirs (API 34, KIP-113) with kafka-python's admin: a replica moves to the
broker's other log dir while confluent-kafka produces to it (acks=all), and every
acknowledged record is read back from the new dir; a move cut short by a stop resumes at
the next start; Kafka's errors. The copy is held back with
``replica.alter.log.dirs.io.max.bytes.per.second`` so that the move is under way while the
test looks."""

from __future__ import annotations

import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from kafka import TopicPartitionReplica
from kafka.admin import KafkaAdminClient
from kafka.errors import (
    ClusterAuthorizationFailedError,
    KafkaStorageError,
    LogDirNotFoundError,
    NoError,
    ReplicaNotAvailableError,
)

from kplane.testing.plugin import CLUSTER_DEFAULTS, BrokerProcess, KafkaCluster, RunningBroker
from tests.integration.helpers import (
    produce_all,
    read_from_beginning,
    secured_broker_overrides,
    wait_until,
)

RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
VALUE = b"x" * 1000


class _Broker(Protocol):
    """What the helpers use of a broker: an in-process one, or :class:`_Served`."""

    @property
    def broker_id(self) -> int: ...

    def bootstrap(self) -> str: ...


@dataclass
class _Served:
    """A ``kplane serve`` process (broker 0) as the helpers use a broker."""

    handle: BrokerProcess
    broker_id: int = 0

    def bootstrap(self) -> str:
        return self.handle.bootstrap


def _start(broker_factory: Any, dirs: tuple[Path, Path]) -> RunningBroker:
    return broker_factory({"kplane.log.storage": "file", "log.dirs": ",".join(map(str, dirs))})


def _throttle(broker: _Broker, rate: int | None) -> None:
    """Set (or, with None, delete) this broker's copy rate limit, dynamically."""
    op = AlterConfigOpType.DELETE if rate is None else AlterConfigOpType.SET
    entry = ConfigEntry(RATE, "" if rate is None else str(rate), incremental_operation=op)
    resource = ConfigResource(
        ResourceType.BROKER, str(broker.broker_id), incremental_configs=[entry]
    )
    admin = AdminClient({"bootstrap.servers": broker.bootstrap()})
    (future,) = admin.incremental_alter_configs([resource]).values()
    future.result(timeout=15)


def _fill(broker: _Broker, topic: str, count: int) -> list[bytes]:
    producer = Producer({"bootstrap.servers": broker.bootstrap(), "linger.ms": 5})
    values = [b"%d:" % i + VALUE for i in range(count)]
    produce_all(producer, topic, [{"value": v} for v in values], 1)
    return values


def _replica_dirs(broker: _Broker, topic: str) -> dict[tuple[str, bool], int]:
    """(log dir, is future) -> offset lag of ``topic``-0's logs on ``broker``, from
    DescribeLogDirs."""
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap())
    try:
        (described,) = admin.describe_log_dirs({topic: [0]}, brokers=[broker.broker_id])
    finally:
        admin.close()
    return {
        (d["log_dir"], p["is_future_key"]): p["offset_lag"]
        for d in described["log_dirs"]
        for t in d["topics"]
        for p in t["partitions"]
    }


def _move(broker: _Broker, topic: str, target: Path) -> Any:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap())
    try:
        replica = TopicPartitionReplica(topic, 0, broker.broker_id)
        return admin.alter_replica_log_dirs({replica: str(target)})[replica]
    finally:
        admin.close()


def _read_all(broker: _Broker, topic: str, count: int) -> list[bytes]:
    got = read_from_beginning(
        broker.bootstrap(), "check", topic, {0: count}, batch=1000, timeout=60
    )
    assert [m.offset() for m in got[0]] == list(range(len(got[0])))
    return [m.value() for m in got[0]]


def _source_and_target(dirs: tuple[Path, Path], topic: str) -> tuple[Path, Path]:
    source = next(d for d in dirs if (d / f"{topic}-0").is_dir())
    return source, next(d for d in dirs if d != source)


class _Writer(threading.Thread):
    """Produces numbered records one at a time (idempotent, so acks=all, and its sequences
    must be known to the moved log too) until stopped; keeps the values acknowledged."""

    def __init__(self, broker: RunningBroker, topic: str) -> None:
        super().__init__(daemon=True)
        self.producer = Producer(
            {"bootstrap.servers": broker.bootstrap(), "enable.idempotence": True}
        )
        self.topic = topic
        self.acked: list[bytes] = []
        self.errors: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            self.producer.produce(self.topic, b"live-%d:" % i + VALUE, on_delivery=self._done)
            self.producer.flush(30)
            i += 1

    def _done(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked.append(msg.value())

    def wait_for(self, more: int, what: str) -> None:
        count = len(self.acked)
        wait_until(lambda: len(self.acked) >= count + more, what=what)


def test_a_replica_moves_while_it_is_written(broker_factory: Any, tmp_path: Path) -> None:
    dirs = (tmp_path / "disk-a", tmp_path / "disk-b")
    broker = _start(broker_factory, dirs)
    broker.create_topic("moving")
    source, target = _source_and_target(dirs, "moving")
    before = _fill(broker, "moving", 6000)  # 6 MB to copy
    _throttle(broker, 500_000)  # 12 s of copying at least, unless lifted

    writer = _Writer(broker, "moving")
    writer.start()
    try:
        writer.wait_for(20, "writes before the move")
        assert _move(broker, "moving", target) is NoError
        writer.wait_for(50, "writes during the move")
        during = _replica_dirs(broker, "moving")
        assert set(during) == {(str(source), False), (str(target), True)}
        assert during[(str(target), True)] > 0  # the future log is behind
        _throttle(broker, None)
        wait_until(
            lambda: set(_replica_dirs(broker, "moving")) == {(str(target), False)},
            what="the replica in the new dir, without a future log",
        )
        writer.wait_for(50, "writes after the move")
    finally:
        writer.stop.set()
        writer.join(60)
    assert writer.errors == []
    assert (target / "moving-0").is_dir() and not (source / "moving-0").exists()
    total = len(before) + len(writer.acked)
    assert _read_all(broker, "moving", total) == before + writer.acked


def test_a_move_cut_short_by_a_stop_resumes(broker_factory: Any, tmp_path: Path) -> None:
    dirs = (tmp_path / "disk-a", tmp_path / "disk-b")
    broker = _start(broker_factory, dirs)
    broker.create_topic("resumed")
    source, target = _source_and_target(dirs, "resumed")
    values = _fill(broker, "resumed", 3000)  # 3 MB: more than the first chunk copied
    _throttle(broker, 1)
    assert _move(broker, "resumed", target) is NoError
    lags = wait_until(
        lambda: _replica_dirs(broker, "resumed").get((str(target), True)),
        what="the future log copying",
    )
    assert lags > 0
    broker.stop()
    (future_dir,) = target.glob("resumed-0.*-future")

    again = _start(broker_factory, dirs)
    assert (str(target), True) in _replica_dirs(again, "resumed")  # found and resumed
    _throttle(again, None)
    wait_until(
        lambda: set(_replica_dirs(again, "resumed")) == {(str(target), False)},
        what="the resumed move done",
    )
    assert not future_dir.exists() and not (source / "resumed-0").exists()
    more = [b"after:" + VALUE] * 10
    producer = Producer({"bootstrap.servers": again.bootstrap()})
    produce_all(producer, "resumed", [{"value": v} for v in more], 1)
    assert _read_all(again, "resumed", len(values) + 10) == values + more

    # A stop between the swap's two renames (the current dir renamed -delete, the future
    # dir not yet renamed) leaves only the whole future log: the next start takes it.
    again.stop()
    (target / "resumed-0").rename(target / f"resumed-0.{'f' * 32}-future")
    third = _start(broker_factory, dirs)
    assert set(_replica_dirs(third, "resumed")) == {(str(target), False)}
    assert _read_all(third, "resumed", len(values) + 10) == values + more


def test_kafka_errors(broker_factory: Any, tmp_path: Path) -> None:
    dirs = (tmp_path / "disk-a", tmp_path / "disk-b")
    broker = _start(broker_factory, dirs)
    broker.create_topic("here")
    source, target = _source_and_target(dirs, "here")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap())
    try:
        b = broker.broker_id
        answers = admin.alter_replica_log_dirs(
            {
                TopicPartitionReplica("here", 0, b): str(tmp_path / "elsewhere"),
                TopicPartitionReplica("absent", 0, b): str(target),
                TopicPartitionReplica("here", 7, b): str(target),
            }
        )
        # Moving to the dir it is in is nothing to do.
        same = admin.alter_replica_log_dirs({TopicPartitionReplica("here", 0, b): str(source)})
    finally:
        admin.close()
    assert answers == {
        TopicPartitionReplica("here", 0, b): LogDirNotFoundError,
        TopicPartitionReplica("absent", 0, b): ReplicaNotAvailableError,
        TopicPartitionReplica("here", 7, b): ReplicaNotAvailableError,
    }
    assert list(same.values()) == [NoError]
    assert set(_replica_dirs(broker, "here")) == {(str(source), False)}

    # The target dir fails (a partition's files gone, its next roll fails): no move there.
    broker.create_topic("there", config={"segment.bytes": "1024"})
    assert (target / "there-0").is_dir()
    shutil.rmtree(target / "there-0")
    producer = Producer({"bootstrap.servers": broker.bootstrap(), "message.timeout.ms": 5000})
    failed: list[Any] = []
    while not failed or failed[-1] is None:
        assert len(failed) < 40, "the roll never failed"
        producer.produce("there", b"x" * 200, on_delivery=lambda e, _m: failed.append(e))
        producer.flush(10)
    wait_until(
        lambda: _move(broker, "here", target) is KafkaStorageError,
        what="KAFKA_STORAGE_ERROR for a move to the failed dir",
    )


def test_memory_storage_and_the_cluster_acl(broker_factory: Any) -> None:
    in_memory = broker_factory()
    in_memory.create_topic("m")
    (log_dir,) = in_memory.current_config("log.dirs").split(",")
    assert _move(in_memory, "m", Path(log_dir)) is LogDirNotFoundError

    secured = broker_factory(secured_broker_overrides(**{"kplane.log.storage": "file"}))
    alice = KafkaAdminClient(
        bootstrap_servers=secured.bootstrap("SASL_PLAINTEXT"),
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="alice",
        sasl_plain_password="alice-secret",
    )
    try:
        replica = TopicPartitionReplica("any", 0, secured.broker_id)
        answer = alice.alter_replica_log_dirs({replica: "/nowhere"})
    finally:
        alice.close()
    assert answer == {replica: ClusterAuthorizationFailedError}


def test_a_move_survives_a_killed_broker(broker_process: Any, tmp_path: Path) -> None:
    dirs = (tmp_path / "disk-a", tmp_path / "disk-b")
    serve = [f"log.dirs={dirs[0]},{dirs[1]}", "num.partitions=1"]
    first = _Served(broker_process(None, *serve))
    values = _fill(first, "killed", 3000)  # auto-created; 3 MB to copy
    source, target = _source_and_target(dirs, "killed")
    _throttle(first, 1)
    assert _move(first, "killed", target) is NoError
    wait_until(
        lambda: _replica_dirs(first, "killed").get((str(target), True)),
        what="the future log copying",
    )
    first.handle.kill()  # no clean stop: the future log is recovered as the current one is

    again = _Served(broker_process(None, *serve))
    wait_until(
        lambda: (str(target), True) in _replica_dirs(again, "killed"), what="the move resumed"
    )
    _throttle(again, None)
    wait_until(
        lambda: set(_replica_dirs(again, "killed")) == {(str(target), False)},
        what="the resumed move done",
    )
    assert _read_all(again, "killed", len(values)) == values
    assert not (source / "killed-0").exists()
    assert "Traceback" not in again.handle.log_text()


def test_a_follower_moves_while_it_replicates(
    broker_factory: Any, zookeeper: str, tmp_path: Path
) -> None:
    brokers: list[RunningBroker] = [
        broker_factory(
            {
                **CLUSTER_DEFAULTS,
                "zookeeper.connect": zookeeper,
                "broker.id": str(i),
                "kplane.log.storage": "file",
                "log.dirs": f"{tmp_path / f'b{i}-a'},{tmp_path / f'b{i}-b'}",
            }
        )
        for i in range(2)
    ]
    wait_until(lambda: all(len(b.alive_brokers()) == 2 for b in brokers), what="two brokers")
    cluster = KafkaCluster(brokers, zookeeper)
    admin = AdminClient({"bootstrap.servers": brokers[0].bootstrap()})
    admin.create_topics([NewTopic("replicated", 1, 2)])["replicated"].result(timeout=30)
    state = wait_until(lambda: brokers[0].partitions("replicated").get(0), what="the topic")
    follower = next(b for b in brokers if b.broker_id != state.leader)
    dirs = (tmp_path / f"b{follower.broker_id}-a", tmp_path / f"b{follower.broker_id}-b")
    wait_until(lambda: follower.replica("replicated", 0), what="the follower's replica")
    source, target = _source_and_target(dirs, "replicated")
    before = _fill(follower, "replicated", 3000)
    _throttle(follower, 500_000)

    writer = _Writer(follower, "replicated")
    writer.start()
    try:
        writer.wait_for(20, "writes before the move")
        assert _move(follower, "replicated", target) is NoError
        writer.wait_for(50, "writes while the follower's replica moves")
        assert (str(target), True) in _replica_dirs(follower, "replicated")
        _throttle(follower, None)
        wait_until(
            lambda: set(_replica_dirs(follower, "replicated")) == {(str(target), False)},
            what="the follower's replica in its new dir",
        )
        writer.wait_for(50, "writes after the move")
    finally:
        writer.stop.set()
        writer.join(60)
    assert writer.errors == []
    wait_until(
        lambda: len(brokers[0].partitions("replicated")[0].isr) == 2, what="the follower in sync"
    )
    # The moved replica leads and serves every acknowledged record.
    cluster.move_leader("replicated", 0, follower.broker_id)
    total = len(before) + len(writer.acked)
    assert _read_all(follower, "replicated", total) == before + writer.acked
    assert not (source / "replicated-0").exists()
