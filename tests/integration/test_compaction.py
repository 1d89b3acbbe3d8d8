"""Log compaction end to end: a broker on file storage with its log cleaner, confluent-kafka
producing many updates to a few keys of a ``cleanup.policy=compact`` topic, and a consumer
from the beginning that sees, once the cleaner has run, only each key's last value, and no
tombstoned key after ``delete.retention.ms``; ``compact,delete`` applies retention too; and
``log.cleaner.threads`` changed at runtime (KIP-226) through ``kplane configs``.

Nothing waits on the wall clock: each test polls, within a bounded deadline, for the state
it asserts, producing a few more records meanwhile so the cleaner keeps finding dirt."""

from __future__ import annotations

import argparse
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition

from kplane.testing.plugin import RunningBroker
from kplane.tools import configs

pytestmark = pytest.mark.slow

FILE_BROKER = {
    "kplane.log.storage": "file",
    "log.cleaner.backoff.ms": "50",
    "log.segment.delete.delay.ms": "100",
    "log.retention.check.interval.ms": "100",
}
DEADLINE_S = 60.0
FILLER = b"filler"


def _producer(broker: RunningBroker) -> Producer:
    return Producer({"bootstrap.servers": broker.bootstrap(), "linger.ms": 0, "acks": "all"})


def _send(producer: Producer, topic: str, items: list[tuple[bytes, bytes | None]]) -> None:
    errors: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    for key, value in items:
        producer.produce(topic, key=key, value=value, partition=0, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors, errors


def _read_all(broker: RunningBroker, topic: str) -> tuple[int, list[tuple[int, bytes, Any]]]:
    """(low watermark, every (offset, key, value) from the beginning to the high mark)."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap(),
            "group.id": f"reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        low, high = consumer.get_watermark_offsets(CkTopicPartition(topic, 0), timeout=10)
        consumer.assign([CkTopicPartition(topic, 0, OFFSET_BEGINNING)])
        out: list[tuple[int, bytes, Any]] = []
        deadline = time.monotonic() + 30
        while (not out or out[-1][0] < high - 1) and high > low:
            assert time.monotonic() < deadline, f"read stalled at {out[-1:]} of {high}"
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            out.append((msg.offset(), msg.key(), msg.value()))
        return low, out
    finally:
        consumer.close()


def _eventually(
    check: Callable[[], tuple[bool, object]], nudge: Callable[[], None], what: str
) -> None:
    """Poll ``check`` until it holds, calling ``nudge`` between tries; fail with the last
    observation after DEADLINE_S."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        ok, seen = check()
        if ok:
            return
        assert time.monotonic() < deadline, f"{what}: last seen {seen}"
        nudge()
        time.sleep(0.2)


def test_a_compacted_topic_keeps_the_last_value_per_key_and_drops_tombstones(
    broker_factory: Callable[..., RunningBroker],
) -> None:
    broker = broker_factory(FILE_BROKER)
    topic = "compacted"
    broker.create_topic(
        topic,
        config={
            "cleanup.policy": "compact",
            "segment.bytes": "2048",
            "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": "1000",
        },
    )
    producer = _producer(broker)
    last: dict[bytes, bytes] = {}
    updates = []
    for r in range(40):
        for k in range(5):
            key, value = b"key-%d" % k, b"value-%d-%03d" % (k, r) + b"." * 40
            updates.append((key, value))
            last[key] = value
    for k in range(3):
        updates += [(b"dead-%d" % k, b"soon gone"), (b"dead-%d" % k, None)]
    _send(producer, topic, updates)
    total = len(updates)
    filler = iter(range(10**6))

    def nudge() -> None:  # new dirt past the active segment, so the cleaner runs again
        _send(producer, topic, [(FILLER, b"%08d" % next(filler) + b"-" * 300) for _ in range(3)])

    def compacted() -> tuple[bool, object]:
        _, records = _read_all(broker, topic)
        keyed = [(k, v) for _, k, v in records if k != FILLER]
        values = {k: v for k, v in keyed}
        done = len(keyed) == len(last) and values == last
        return done, (len(records), total, sorted({k for k, _ in keyed}))

    nudge()
    nudge()
    _eventually(compacted, nudge, "only the last value per key, tombstoned keys gone")
    _, records = _read_all(broker, topic)
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(set(offsets)), "offsets kept, in order"
    assert records[-1][0] >= total, "the log end did not move back"
    checkpoint = Path(broker.config.log_dirs[0], "cleaner-offset-checkpoint").read_text()
    entries = [line.split()[:2] for line in checkpoint.splitlines()[2:]]  # Kafka's layout
    assert [topic, "0"] in entries, "cleaner-offset-checkpoint has the topic"


def test_compact_delete_also_applies_retention(
    broker_factory: Callable[..., RunningBroker],
) -> None:
    broker = broker_factory(FILE_BROKER)
    topic = "compact-delete"
    broker.create_topic(
        topic,
        config={
            "cleanup.policy": "compact,delete",
            "segment.bytes": "1024",
            "retention.bytes": "3072",
            "min.cleanable.dirty.ratio": "0.01",
        },
    )
    producer = _producer(broker)
    _send(producer, topic, [(b"k%04d" % i, b"v" * 100) for i in range(60)])
    sent = iter(range(60, 10**6))

    def nudge() -> None:
        _send(producer, topic, [(b"k%04d" % next(sent), b"v" * 100)])

    def retained() -> tuple[bool, object]:
        low, records = _read_all(broker, topic)
        replica = broker.replica(topic, 0)
        assert replica is not None
        size = replica.size_bytes
        moved = low > 0 and records[0][0] >= low and records[0][1] != b"k0000"
        return moved and size <= 3072 + 1024 + 200, (low, records[:1], size)

    _eventually(retained, nudge, "retention moved the log start of a compact,delete topic")


def test_log_cleaner_threads_change_at_runtime(
    broker_factory: Callable[..., RunningBroker], capsys: pytest.CaptureFixture[str]
) -> None:
    broker = broker_factory(FILE_BROKER)
    assert len(_cleaner_threads()) == 1

    parser = argparse.ArgumentParser(prog="kplane")
    configs.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(
        [
            "configs", "--bootstrap-server", broker.bootstrap(), "--alter",
            "--entity-type", "brokers", "--entity-default",
            "--add-config", "log.cleaner.threads=2",
        ]
    )  # fmt: skip
    assert int(args.func(args)) == 0, capsys.readouterr()

    def two_threads() -> tuple[bool, object]:
        names = _cleaner_threads()
        return len(names) == 2, names

    _eventually(two_threads, lambda: None, "log.cleaner.threads=2 took effect")
    assert broker.current_config("log.cleaner.threads") == 2
    # More than double the current count is refused, as Kafka refuses it.
    args = parser.parse_args(
        [
            "configs", "--bootstrap-server", broker.bootstrap(), "--alter",
            "--entity-type", "brokers", "--entity-default",
            "--add-config", "log.cleaner.threads=5",
        ]
    )  # fmt: skip
    assert int(args.func(args)) != 0
    assert "double" in capsys.readouterr().err
    assert len(_cleaner_threads()) == 2


def _cleaner_threads() -> list[str]:
    """Names of the log cleaner threads running in this process."""
    return sorted(t.name for t in threading.enumerate() if "log-cleaner" in t.name)
