"""The log side of transactions (KIP-98) under a real broker: transactional batches and
markers written through the ReplicaManager, read by confluent-kafka consumers with
read_committed and read_uncommitted and by raw Fetch requests (the LSO, aborted transactions,
a read_committed fetch parked until a marker); the LSO and the aborted transactions across a
restart of a file-log broker; and a FileLog recovered after an unclean stop rebuilding its
``.txnindex``."""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CkTopicPartition
from kio.static.primitive import i8

from kplane.broker.log.file_log import FileLog
from kplane.broker.log.log_config import LogSettings
from kplane.broker.log.partition import Partition, TopicPartition
from kplane.broker.log.transaction_index import AbortedTxn
from kplane.broker.server.replica_manager import ReplicaManager
from kplane.protocol.errors import ErrorCode
from kplane.protocol.records import Record, build_batch, iter_all_records, scan_batches
from kplane.testing.plugin import RunningBroker
from tests.integration.helpers import fetch_partition, fetch_request

TOPIC = "txn-log"
TP = TopicPartition(TOPIC, 0)
P1, P2, P3 = 1000, 2000, 3000


class Writer:
    """Batches and markers straight into a ReplicaManager (the coordinator's part done by
    hand), with each producer's next sequence."""

    def __init__(self, rm: ReplicaManager) -> None:
        self.rm = rm
        self.seqs: dict[int, int] = {}

    def data(self, pid: int, *values: bytes, epoch: int = 0, txn: bool = True) -> ErrorCode:
        seq = self.seqs.get(pid, 0)
        raw = build_batch(
            [Record(key=v, value=v) for v in values],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            is_transactional=txn,
        )
        result = self.rm.append(TP, raw, -1, 9)
        if result.error == ErrorCode.none:
            self.seqs[pid] = seq + len(values)
        return result.error

    def plain(self, value: bytes) -> None:
        assert self.rm.append(TP, build_batch([Record(key=value, value=value)]), -1, 9).error == 0

    def marker(
        self, pid: int, commit: bool, epoch: int = 0, coordinator_epoch: int = 0
    ) -> ErrorCode:
        return self.rm.write_txn_marker(TP, pid, epoch, coordinator_epoch, commit)


def scenario(w: Writer) -> None:
    """Offsets: 0-1 P1 (committed at 4), 2 plain, 3 P2, 5 P2 (aborted at 6), 7 plain,
    8 P3 (ongoing), 9 plain: high watermark 10, LSO 8."""
    assert w.data(P1, b"a1", b"a2") == ErrorCode.none
    w.plain(b"plain0")
    assert w.data(P2, b"b1") == ErrorCode.none
    assert w.marker(P1, commit=True) == ErrorCode.none
    assert w.data(P2, b"b2") == ErrorCode.none
    assert w.marker(P2, commit=False) == ErrorCode.none
    w.plain(b"plain1")
    assert w.data(P3, b"c1") == ErrorCode.none
    w.plain(b"plain2")


def consume(bootstrap: str, isolation: str, expected: int) -> list[bytes]:
    """Every value ``isolation`` lets through: until ``expected`` came, then 0.5 s more."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"txn-log-{uuid.uuid4()}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([CkTopicPartition(TOPIC, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 15
    settle = None
    try:
        while time.monotonic() < deadline and (settle is None or time.monotonic() < settle):
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
            if len(values) >= expected and settle is None:
                settle = time.monotonic() + 0.5
    finally:
        consumer.close()
    return values


def watermarks(bootstrap: str, isolation: str) -> tuple[int, int]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "w", "isolation.level": isolation}
    )
    try:
        low, high = consumer.get_watermark_offsets(CkTopicPartition(TOPIC, 0), 10, False)
        return low, high
    finally:
        consumer.close()


def fetch(broker: RunningBroker, offset: int, committed: bool, **kwargs: int) -> Any:
    request = dataclasses.replace(
        fetch_request(TOPIC, offset, **kwargs), isolation_level=i8(int(committed))
    )
    with broker.wire() as client:
        return fetch_partition(client, request)


def offsets_in(part: Any) -> list[int]:
    return [r.offset for r in iter_all_records(part.records or b"")]


def aborted(part: Any) -> list[tuple[int, int]] | None:
    if part.aborted_transactions is None:
        return None
    return [(int(t.producer_id), int(t.first_offset)) for t in part.aborted_transactions]


def start(broker_factory, tmp_path: Path, storage: str = "memory") -> RunningBroker:  # type: ignore[no-untyped-def]
    broker = broker_factory(
        {"kplane.log.storage": storage, "log.dirs": str(tmp_path / "data")}
    )
    if broker.replica(TOPIC, 0) is None:
        broker.create_topic(TOPIC)
    return broker


def test_read_committed_sees_committed_and_plain_records_below_the_lso(
    broker_factory, tmp_path: Path  # type: ignore[no-untyped-def]
) -> None:
    broker = start(broker_factory, tmp_path)
    w = Writer(broker.replica_manager())
    scenario(w)
    bootstrap = broker.bootstrap()

    assert consume(bootstrap, "read_uncommitted", 8) == [
        b"a1", b"a2", b"plain0", b"b1", b"b2", b"plain1", b"c1", b"plain2",
    ]
    assert consume(bootstrap, "read_committed", 4) == [b"a1", b"a2", b"plain0", b"plain1"]
    assert watermarks(bootstrap, "read_uncommitted") == (0, 10)
    assert watermarks(bootstrap, "read_committed") == (0, 8)

    assert w.marker(P3, commit=True) == ErrorCode.none  # offset 10
    assert consume(bootstrap, "read_committed", 6) == [
        b"a1", b"a2", b"plain0", b"plain1", b"c1", b"plain2",
    ]
    assert watermarks(bootstrap, "read_committed") == (0, 11)


def test_fetch_answers_the_lso_and_the_aborted_transactions(
    broker_factory, tmp_path: Path  # type: ignore[no-untyped-def]
) -> None:
    broker = start(broker_factory, tmp_path)
    scenario(Writer(broker.replica_manager()))

    uncommitted = fetch(broker, 0, committed=False)
    assert (uncommitted.high_watermark, uncommitted.last_stable_offset) == (10, 8)
    assert aborted(uncommitted) is None
    assert offsets_in(uncommitted) == list(range(10))

    committed = fetch(broker, 0, committed=True)
    assert (committed.high_watermark, committed.last_stable_offset) == (10, 8)
    assert offsets_in(committed) == list(range(8))
    assert aborted(committed) == [(P2, 3)]

    assert aborted(fetch(broker, 7, committed=True)) == []  # P2's marker is below 7
    assert aborted(fetch(broker, 6, committed=True)) == [(P2, 3)]
    between = fetch(broker, 9, committed=True)  # between the LSO and the high watermark
    assert (between.error_code, offsets_in(between), aborted(between)) == (0, [], [])
    assert fetch(broker, 11, committed=True).error_code == ErrorCode.offset_out_of_range

    # a small fetch lists only what the records it returns may hold
    first_batch = fetch(broker, 0, committed=True, partition_max_bytes=1)
    assert offsets_in(first_batch) == [0, 1]
    assert aborted(first_batch) == []


def test_markers_and_batches_refused_as_kafka_refuses_them(
    broker_factory, tmp_path: Path  # type: ignore[no-untyped-def]
) -> None:
    broker = start(broker_factory, tmp_path)
    rm = broker.replica_manager()
    w = Writer(rm)
    assert w.data(P1, b"x", epoch=3) == ErrorCode.none
    assert w.data(P1, b"y", epoch=3, txn=False) == ErrorCode.invalid_txn_state
    assert w.data(P1, b"z", epoch=2) == ErrorCode.invalid_producer_epoch
    assert w.marker(P1, commit=False, epoch=2) == ErrorCode.invalid_producer_epoch
    assert w.marker(P1, commit=False, epoch=3, coordinator_epoch=5) == ErrorCode.none
    assert (
        w.marker(P1, commit=True, epoch=3, coordinator_epoch=4)
        == ErrorCode.transaction_coordinator_fenced
    )
    assert w.marker(P2, commit=True) == ErrorCode.none  # never seen here: an empty txn
    assert rm.write_txn_marker(TopicPartition("nope", 0), P1, 3, 5, True) == (
        ErrorCode.unknown_topic_or_partition
    )
    assert rm.write_txn_marker(TopicPartition(TOPIC, 7), P1, 3, 5, True) == (
        ErrorCode.unknown_topic_or_partition
    )
    assert rm.write_txn_marker(TP, -1, 0, 0, True) == ErrorCode.invalid_request
    states = {s.producer_id: s for s in rm.producer_states(TP)}
    assert (states[P1].producer_epoch, states[P1].coordinator_epoch) == (3, 5)
    assert (states[P1].last_sequence, states[P1].current_txn_start_offset) == (0, -1)
    assert states[P2].last_sequence == -1
    assert fetch(broker, 0, committed=True).last_stable_offset == 3


def test_a_read_committed_fetch_waits_for_the_marker(
    broker_factory, tmp_path: Path  # type: ignore[no-untyped-def]
) -> None:
    broker = start(broker_factory, tmp_path)
    w = Writer(broker.replica_manager())
    assert w.data(P1, b"t1", b"t2") == ErrorCode.none
    answers: list[Any] = []
    waiting = threading.Thread(
        target=lambda: answers.append(
            fetch(broker, 0, committed=True, max_wait_ms=10_000, min_bytes=1)
        )
    )
    began = time.monotonic()
    waiting.start()
    time.sleep(0.5)
    assert not answers, "records of an ongoing transaction do not complete the fetch"
    assert w.marker(P1, commit=True) == ErrorCode.none
    waiting.join(10)
    assert time.monotonic() - began < 5
    (answer,) = answers
    assert offsets_in(answer) == [0, 1, 2] and answer.last_stable_offset == 3  # 2: the marker


def test_the_lso_and_aborted_transactions_survive_a_restart(
    broker_factory, tmp_path: Path  # type: ignore[no-untyped-def]
) -> None:
    first = start(broker_factory, tmp_path, "file")
    scenario(Writer(first.replica_manager()))
    first.stop()
    assert list((tmp_path / "data" / f"{TOPIC}-0").glob("*.txnindex"))

    second = start(broker_factory, tmp_path, "file")
    committed = fetch(second, 0, committed=True)
    assert (committed.high_watermark, committed.last_stable_offset) == (10, 8)
    assert aborted(committed) == [(P2, 3)]
    assert consume(second.bootstrap(), "read_committed", 4) == [
        b"a1", b"a2", b"plain0", b"plain1",
    ]
    w = Writer(second.replica_manager())
    w.seqs[P3] = 1
    assert w.data(P3, b"c2", txn=False) == ErrorCode.invalid_txn_state
    assert w.marker(P3, commit=False) == ErrorCode.none
    committed = fetch(second, 0, committed=True)
    assert committed.last_stable_offset == 11
    assert aborted(committed) == [(P2, 3), (P3, 8)]
    assert consume(second.bootstrap(), "read_committed", 5) == [
        b"a1", b"a2", b"plain0", b"plain1", b"plain2",
    ]


# --------------------------------------------------------------------------- FileLog recovery


def _file_log(directory: Path, clean: bool = True) -> FileLog:
    settings = LogSettings(segment_bytes=300)
    return FileLog(directory, lambda: settings, lambda seg, delay: None, clean=clean)


def _append(partition: Partition, pid: int, seq: int, value: bytes) -> None:
    raw = build_batch([Record(key=value, value=value)], producer_id=pid, producer_epoch=0,
                      base_sequence=seq, is_transactional=True)
    partition.append_records_as_leader(raw, scan_batches(raw))


def test_recovery_rebuilds_the_txnindex_of_the_segments_it_scans(tmp_path: Path) -> None:
    partition = Partition(TP, _file_log(tmp_path))
    for i in range(6):  # P1 aborted, P2 committed, over several segments
        _append(partition, P1 if i % 2 == 0 else P2, i // 2, b"v%d" % i)
    partition.append_txn_marker(P1, 0, 0, commit=False)  # offset 6
    partition.append_txn_marker(P2, 0, 0, commit=True)  # offset 7
    _append(partition, P1, 3, b"open")  # 8: P1's next transaction, left open
    log = partition.log
    assert log.collect_aborted_transactions(0, 9) == [AbortedTxn(P1, 0, 6, 1)]
    assert len(log.segments) > 1
    for segment in log.segments:
        segment.close()
        segment.txn_index.path.unlink(missing_ok=True)  # type: ignore[union-attr]
    for snapshot in tmp_path.glob("*.snapshot"):
        snapshot.unlink()  # replay every batch from the start
    (tmp_path / f"{0:020d}.index").write_bytes(b"\xff" * 7)  # fails its sanity check

    reopened = Partition(TP, _file_log(tmp_path, clean=False))
    assert reopened.log.collect_aborted_transactions(0, 9) == [AbortedTxn(P1, 0, 6, 1)]
    assert (reopened.high_watermark, reopened.last_stable_offset) == (9, 8)


def test_recovery_drops_the_entry_of_a_marker_that_did_not_survive(tmp_path: Path) -> None:
    partition = Partition(TP, _file_log(tmp_path))
    _append(partition, P1, 0, b"x")
    partition.append_txn_marker(P1, 0, 0, commit=False)
    segment = partition.log.segments[-1]
    marker_at = segment.find(1)
    assert marker_at is not None
    partition.log.flush()
    for s in partition.log.segments:
        s.close()
    with open(segment.log_path, "r+b") as fh:  # the marker was lost, its index entry kept
        fh.truncate(marker_at.position)
    assert segment.txn_index.path is not None and segment.txn_index.path.stat().st_size == 34

    reopened = Partition(TP, _file_log(tmp_path, clean=False))
    assert reopened.log.log_end_offset == 1
    assert reopened.log.collect_aborted_transactions(0, 10) == []
    assert segment.txn_index.path.stat().st_size == 0
    assert reopened.last_stable_offset == 0  # the transaction is open again


# --------------------------------------------------------------------------- compaction


class CleanerHost:
    """The LogManager's part the cleaner sees, over one FileLog."""

    def __init__(self, file_log: FileLog) -> None:
        self.file_log = file_log
        self.offsets: dict[TopicPartition, int] = {}

    def compacted_logs(self) -> list[tuple[TopicPartition, FileLog]]:
        return [(TP, self.file_log)]

    def cleaner_offsets(self) -> dict[TopicPartition, int]:
        return dict(self.offsets)

    def update_cleaner_offset(self, tp: TopicPartition, offset: int) -> None:
        self.offsets[tp] = offset

    def checkpoint_log_start_offsets(self) -> None:
        pass


def _stored(log: FileLog) -> list[tuple[int, bytes | None, bool]]:
    """(offset, key, is a marker) of every record, segment by segment."""
    out = []
    for segment in log.segments:
        for header in segment.batches():
            for r in iter_all_records(segment.read(header.position, header.size)):
                out.append((r.offset, None if header.is_control else r.key, header.is_control))
    return out


def test_compaction_drops_aborted_records_and_then_the_markers(tmp_path: Path) -> None:
    """Kafka's cleaner rules: an aborted record never survives (nor hides a committed value
    of its key); a producer's last batch stays, emptied; a marker stays while a batch of its
    transaction does, then gets a delete horizon, then goes."""
    from kplane.broker.log.log_cleaner import CleanerConfig, LogCleaner

    settings = LogSettings(
        cleanup_policy=("compact",), min_cleanable_dirty_ratio=0.01, delete_retention_ms=0
    )
    log = FileLog(tmp_path, lambda: settings, lambda seg, delay: None)
    partition = Partition(TP, log)

    def put(key: bytes, pid: int = -1, seq: int = -1) -> None:
        raw = build_batch([Record(key=key, value=b"%s@%d" % (key, log.log_end_offset))],
                          producer_id=pid, producer_epoch=0, base_sequence=seq,
                          is_transactional=pid >= 0)
        partition.append_records_as_leader(raw, scan_batches(raw))

    put(b"k")  # 0: the committed value of k
    put(b"k", P1, 0)  # 1: aborted
    partition.append_txn_marker(P1, 0, 0, commit=False)  # 2
    put(b"j", P2, 0)  # 3: committed
    partition.append_txn_marker(P2, 0, 0, commit=True)  # 4
    put(b"z")  # 5
    log._roll(settings)
    put(b"k", P3, 0)  # 6: ongoing, in a segment the cleaner could otherwise clean
    put(b"z")  # 7
    log._roll(settings)
    put(b"tail")  # 8: the active segment
    host = CleanerHost(log)
    now = [int(time.time() * 1000)]
    cleaner = LogCleaner(CleanerConfig(dedupe_buffer_size=1 << 20), host, clock=lambda: now[0])

    def clean_all() -> list[tuple[int, bytes | None, bool]]:
        now[0] += 1
        host.offsets.clear()
        assert cleaner.clean_filthiest_log()
        return _stored(log)

    assert cleaner.clean_filthiest_log()
    assert host.offsets[TP] == 6, "cleaning stops at the first unstable offset"
    assert [(o, k, m) for o, k, m in _stored(log) if o < 6] == [
        (0, b"k", False), (2, None, True), (3, b"j", False), (4, None, True), (5, b"z", False),
    ], "the aborted record is gone, both markers stay while their batches are there"
    assert log.collect_aborted_transactions(0, 9) == [AbortedTxn(P1, 1, 2, 3)]
    assert list(tmp_path.glob("*.txnindex"))

    put(b"x", P1, 1)  # 9: P1's next transaction, so its aborted batch is not its last
    partition.append_txn_marker(P1, 0, 0, commit=True)  # 10
    put(b"j", P2, 1)  # 11
    partition.append_txn_marker(P2, 0, 0, commit=True)  # 12
    partition.append_txn_marker(P3, 0, 0, commit=False)  # 13: P3's k goes too
    log._roll(settings)
    put(b"tail")  # 14
    stored = clean_all()
    assert [(o, k) for o, k, m in stored if not m] == [
        (0, b"k"), (7, b"z"), (8, b"tail"), (9, b"x"), (11, b"j"), (14, b"tail"),
    ], "P3's k went with its abort, so k's committed value is still the latest"
    assert [o for o, _, m in stored if m] == [2, 4, 10, 12, 13]
    clean_all()  # the markers of the emptied transactions get their delete horizon
    stored = clean_all()  # and go after it
    assert [o for o, _, m in stored if m] == [10, 12, 13]
    assert log.collect_aborted_transactions(0, 15) == [AbortedTxn(P3, 6, 13, 14)]
    log.close()
    reopened = Partition(TP, _file_log(tmp_path))
    assert reopened.last_stable_offset == reopened.high_watermark == 15
    assert reopened.log.collect_aborted_transactions(0, 15) == [AbortedTxn(P3, 6, 13, 14)]
