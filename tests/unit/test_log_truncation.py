"""What replication needs of a log, on both engines: appends as a follower (a leader's
batches with their offsets and epochs), truncation to an offset and starting over at one,
with the producer state, the transaction index and the leader epochs following; the file
log's segments and indexes after a truncation and a reopen; Kafka's OffsetForLeaderEpoch
answers from the leader epoch cache."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kplane.broker.log.file_log import FileLog
from kplane.broker.log.leader_epoch_cache import CHECKPOINT, LeaderEpochCache
from kplane.broker.log.log import Log, MemoryLog, UnexpectedAppendOffsetError, next_offset_after
from kplane.broker.log.log_cleaner import CleanerConfig
from kplane.broker.log.log_config import LogSettings
from kplane.broker.log.log_manager import LogManager, LogManagerConfig
from kplane.broker.log.partition import TopicPartition
from kplane.broker.log.producer_state import list_snapshots
from kplane.broker.log.segment import LogSegment
from kplane.broker.log.transaction_index import AbortedTxn
from kplane.broker.utils.file_region import materialize
from kplane.protocol.records import (
    EndTxnMarker,
    Record,
    build_batch,
    build_control_batch,
    iter_all_records,
    number_batches,
    scan_batches,
)

NOW = int(time.time() * 1000)


# building logs -------------------------------------------------------------------------------
def data(
    values: list[bytes],
    producer: tuple[int, int, int] | None = None,
    transactional: bool = False,
    base_offset: int = 0,
    epoch: int = -1,
    key: bytes = b"k",
) -> bytes:
    records = [Record(key=key, value=v, timestamp=NOW + i) for i, v in enumerate(values)]
    pid, producer_epoch, seq = producer if producer is not None else (-1, -1, -1)
    return build_batch(
        records,
        producer_id=pid,
        producer_epoch=producer_epoch,
        base_sequence=seq,
        is_transactional=transactional,
        base_offset=base_offset,
        partition_leader_epoch=epoch,
    )


def lead(log: Log, raw: bytes, epoch: int, marker: EndTxnMarker | None = None) -> int:
    """Append as a leader (a Partition) does; returns the first offset."""
    batches = scan_batches(raw)
    with log.lock:
        first = log.log_end_offset
        number_batches(batches, first, epoch)
        log.append(raw, batches)
        for batch in batches:
            log.update_producer_state(batch, marker)
    return first


def lead_marker(log: Log, pid: int, commit: bool, epoch: int) -> int:
    raw = build_control_batch(pid, 0, commit, 0, NOW)
    return lead(log, raw, epoch, EndTxnMarker(commit, 0))


def fetched(leader: Log, offset: int) -> bytes:
    """The leader's batches from ``offset`` on, as fetch responses carry them (a file
    log's read stops at the end of a segment)."""
    out = b""
    while offset < leader.log_end_offset:
        pieces = leader.read(offset, 1 << 30, True)
        following = next_offset_after(pieces)
        if following is None:
            break
        out += b"".join(materialize(pieces))
        offset = following
    return out


def follow(follower: Log, raw: bytes) -> None:
    follower.append_as_follower(raw, scan_batches(raw))


def follow_each(follower: Log, leader: Log) -> None:
    """Fetch from the leader one batch per append (a file log rolls between appends)."""
    while follower.log_end_offset < leader.log_end_offset:
        raw = b"".join(materialize(leader.read(follower.log_end_offset, 1, True)))
        follow(follower, raw)


def values(log: Log, offset: int = 0) -> list[tuple[int, bytes | None]]:
    return [
        (r.offset, r.value) for r in iter_all_records(fetched(log, offset)) if r.offset >= offset
    ]


def producers(log: Log) -> list[tuple[int, int, int, int]]:
    return sorted(
        (p.producer_id, p.producer_epoch, p.last_sequence, p.current_txn_start_offset)
        for p in log.producer_state.active_producers()
    )


class Engine:
    """Opens the log under test: a MemoryLog, or a FileLog with small segments and a dense
    index (so truncations cross segments and index entries)."""

    def __init__(self, kind: str, directory: Path) -> None:
        self.kind = kind
        self.directory = directory
        self.settings = LogSettings(segment_bytes=600, index_interval_bytes=120)
        self.retired: list[LogSegment] = []

    def open(self, clean: bool = True, recovery_point: int = 0) -> Log:
        if self.kind == "memory":
            return MemoryLog()
        return FileLog(
            self.directory,
            lambda: self.settings,
            lambda segment, delay: self.retired.append(segment),
            clean=clean,
            recovery_point=recovery_point,
        )


@pytest.fixture(params=["memory", "file"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    yield Engine(request.param, tmp_path / "follower")


def leader_with(batches: int, records: int = 2, epoch_at: dict[int, int] | None = None) -> Log:
    """A memory leader of ``batches`` batches of ``records`` records each; the batch index
    at which each leader epoch begins in ``epoch_at`` (default: all epoch 0)."""
    leader = MemoryLog()
    epoch = 0
    for i in range(batches):
        epoch = (epoch_at or {}).get(i, epoch)
        lead(leader, data([b"v%d.%d" % (i, j) for j in range(records)]), epoch)
    return leader


# appending as a follower ---------------------------------------------------------------------
def test_a_follower_copies_the_leader_byte_for_byte(engine: Engine) -> None:
    leader = leader_with(12, epoch_at={0: 0, 4: 2, 9: 5})
    lead(leader, data([b"idem"], producer=(7, 1, 0)), 5)
    follower = engine.open()
    follow(follower, fetched(leader, 0))
    assert follower.log_end_offset == leader.log_end_offset == 25
    assert fetched(follower, 0) == fetched(leader, 0)
    assert follower.leader_epochs.entries == leader.leader_epochs.entries == [
        (0, 0), (2, 8), (5, 18)
    ]
    assert follower.latest_epoch == 5
    assert producers(follower) == producers(leader) == [(7, 1, 0, -1)]


def test_batches_fetched_again_are_skipped(engine: Engine) -> None:
    leader = leader_with(6)
    follower = engine.open()
    follow(follower, fetched(leader, 0))
    follow(follower, fetched(leader, 0))  # the whole range again
    follow(follower, fetched(leader, 4))  # a part of it
    assert follower.log_end_offset == 12
    assert fetched(follower, 0) == fetched(leader, 0)
    lead(leader, data([b"new"]), 0)
    follow(follower, fetched(leader, 8))  # old batches, then one new
    assert values(follower, 11) == [(11, b"v5.1"), (12, b"new")]


def test_batches_that_do_not_continue_the_log_are_refused_whole(engine: Engine) -> None:
    follower = engine.open()
    follow(follower, data([b"a", b"b"], base_offset=0, epoch=0))
    before = fetched(follower, 0)
    straddling = data([b"x", b"y", b"z"], base_offset=1, epoch=0)  # offsets 1-3, end is 2
    with pytest.raises(UnexpectedAppendOffsetError) as caught:
        follow(follower, straddling)
    assert (caught.value.first_offset, caught.value.last_offset) == (1, 3)
    out_of_order = data([b"c"], base_offset=5, epoch=0) + data([b"d"], base_offset=4, epoch=0)
    with pytest.raises(UnexpectedAppendOffsetError):
        follow(follower, out_of_order)
    assert follower.log_end_offset == 2
    assert fetched(follower, 0) == before
    # a gap (compaction removed whole batches on the leader) is kept
    follow(follower, data([b"after gap"], base_offset=10, epoch=1))
    assert follower.log_end_offset == 11
    assert values(follower) == [(0, b"a"), (1, b"b"), (10, b"after gap")]
    assert follower.leader_epochs.entries == [(0, 0), (1, 10)]


def test_a_follower_replays_transactions_and_indexes_aborts(engine: Engine) -> None:
    leader = MemoryLog()
    lead(leader, data([b"t1", b"t2"], producer=(5, 0, 0), transactional=True), 0)  # 0-1
    lead(leader, data([b"plain"]), 0)  # 2
    lead_marker(leader, 5, commit=False, epoch=0)  # 3
    lead(leader, data([b"t3"], producer=(6, 0, 0), transactional=True), 1)  # 4
    follower = engine.open()
    follow_each(follower, leader)
    assert follower.collect_aborted_transactions(0, 100) == [AbortedTxn(5, 0, 3, 4)]
    assert follower.first_unstable_offset == 4
    assert producers(follower) == [(5, 0, 1, -1), (6, 0, 0, 4)]
    lead_marker(leader, 6, commit=True, epoch=1)  # 5
    follow(follower, fetched(leader, 5))
    assert follower.first_unstable_offset is None
    assert follower.collect_aborted_transactions(0, 100) == [AbortedTxn(5, 0, 3, 4)]


# truncation ----------------------------------------------------------------------------------
def test_truncate_to_a_batch_boundary(engine: Engine) -> None:
    leader = leader_with(10, epoch_at={0: 0, 5: 1})  # epoch 1 from offset 10
    follower = engine.open()
    follow_each(follower, leader)
    assert follower.truncate_to(14) is True
    assert follower.log_end_offset == 14
    assert values(follower) == values(leader)[:14]
    assert follower.leader_epochs.entries == [(0, 0), (1, 10)]
    assert follower.truncate_to(14) is False
    assert follower.truncate_to(99) is False
    assert follower.truncate_to(10) is True
    assert follower.leader_epochs.entries == [(0, 0)]
    follow(follower, fetched(leader, 10))  # fetching again from the new end
    assert fetched(follower, 0) == fetched(leader, 0)
    assert follower.leader_epochs.entries == [(0, 0), (1, 10)]


def test_truncate_inside_a_batch_cuts_before_it(engine: Engine) -> None:
    leader = leader_with(4, records=3)  # batches at 0, 3, 6, 9
    follower = engine.open()
    follow(follower, fetched(leader, 0))
    assert follower.truncate_to(7) is True
    assert follower.log_end_offset == 6
    assert [o for o, _ in values(follower)] == list(range(6))
    follow(follower, fetched(leader, 6))
    assert fetched(follower, 0) == fetched(leader, 0)


def test_truncate_with_nothing_to_cut_still_cuts_the_epochs_at_the_end(engine: Engine) -> None:
    follower = engine.open()
    follow(follower, fetched(leader_with(2), 0))
    follower.maybe_assign_epoch_start_offset(3, 4)  # a leader that wrote nothing at 3
    assert follower.leader_epochs.entries == [(0, 0), (3, 4)]
    assert follower.truncate_to(4) is False
    assert follower.leader_epochs.entries == [(0, 0)]


def test_truncate_fully_and_start_at(engine: Engine) -> None:
    leader = leader_with(6, epoch_at={0: 0, 3: 4})
    follower = engine.open()
    follow(follower, fetched(leader, 0))
    lead(leader, data([b"p"], producer=(9, 0, 0)), 4)
    follow(follower, fetched(leader, 12))
    follower.truncate_fully_and_start_at(100)
    assert (follower.log_start_offset, follower.log_end_offset) == (100, 100)
    assert fetched(follower, 0) == b""
    assert follower.leader_epochs.entries == []
    assert producers(follower) == []
    assert follower.producer_state.map_end_offset == 100
    later = MemoryLog(start_offset=100)
    lead(later, data([b"x", b"y"]), 6)
    follow(follower, fetched(later, 100))
    assert values(follower) == [(100, b"x"), (101, b"y")]
    assert follower.leader_epochs.entries == [(6, 100)]


def test_truncate_below_the_first_batch_starts_over_there(engine: Engine) -> None:
    follower = engine.open()
    follower.truncate_fully_and_start_at(100)
    follow(follower, data([b"a", b"b"], base_offset=100, epoch=2))
    assert follower.truncate_to(50) is True
    assert (follower.log_start_offset, follower.log_end_offset) == (50, 50)
    assert fetched(follower, 0) == b""
    assert follower.leader_epochs.entries == []


def test_truncate_below_the_log_start_moves_it_back(engine: Engine) -> None:
    follower = engine.open()
    follow(follower, fetched(leader_with(5), 0))
    assert follower.maybe_increment_log_start_offset(7)
    assert follower.truncate_to(4) is True
    assert (follower.log_start_offset, follower.log_end_offset) == (4, 4)


def test_producer_state_is_rebuilt_at_the_new_end(engine: Engine) -> None:
    leader = MemoryLog()
    for seq in range(6):  # producer 7: one record per batch, offsets 0-5
        lead(leader, data([b"s%d" % seq + b"." * 150], producer=(7, 0, seq)), 0)
    lead(leader, data([b"only after"], producer=(8, 0, 0)), 0)  # 6
    follower = engine.open()
    follow_each(follower, leader)
    assert producers(follower) == [(7, 0, 5, -1), (8, 0, 0, -1)]
    follower.truncate_to(3)
    assert producers(follower) == [(7, 0, 2, -1)]
    assert follower.producer_state.map_end_offset == 3
    (retry_of_2,) = scan_batches(data([b"s2"], producer=(7, 0, 2)))
    assert follower.producer_state.find_duplicate(retry_of_2) is not None
    (next_one,) = scan_batches(data([b"s3"], producer=(7, 0, 3)))
    assert follower.producer_state.find_duplicate(next_one) is None  # no longer a duplicate
    follow(follower, fetched(leader, 3))
    assert producers(follower) == producers(leader)


def test_an_abort_marker_past_the_cut_reopens_its_transaction(engine: Engine) -> None:
    leader = MemoryLog()
    lead(leader, data([b"t1", b"t2"], producer=(5, 0, 0), transactional=True), 0)  # 0-1
    lead(leader, data([b"plain"]), 0)  # 2
    lead_marker(leader, 5, commit=False, epoch=0)  # 3
    lead(leader, data([b"t3"], producer=(6, 0, 0), transactional=True), 0)  # 4
    lead_marker(leader, 6, commit=False, epoch=0)  # 5
    follower = engine.open()
    follow_each(follower, leader)
    assert follower.first_unstable_offset is None
    assert [t.last_offset for t in follower.collect_aborted_transactions(0, 100)] == [3, 5]
    follower.truncate_to(5)  # the second abort goes; the first stays
    assert follower.collect_aborted_transactions(0, 100) == [AbortedTxn(5, 0, 3, 4)]
    assert follower.first_unstable_offset == 4
    assert producers(follower) == [(5, 0, 1, -1), (6, 0, 0, 4)]
    follower.truncate_to(3)  # the first abort goes too: its transaction is open again
    assert follower.collect_aborted_transactions(0, 100) == []
    assert follower.first_unstable_offset == 0
    assert producers(follower) == [(5, 0, 1, 0)]
    # the new leader committed it instead
    new_leader = MemoryLog()
    follow(new_leader, fetched(follower, 0))
    lead_marker(new_leader, 5, commit=True, epoch=1)
    follow(follower, fetched(new_leader, 3))
    assert follower.first_unstable_offset is None
    assert follower.collect_aborted_transactions(0, 100) == []
    assert follower.leader_epochs.entries == [(0, 0), (1, 3)]


def test_negative_offsets_are_refused(engine: Engine) -> None:
    follower = engine.open()
    with pytest.raises(ValueError):
        follower.truncate_to(-1)


# the file log on disk ------------------------------------------------------------------------
def file_engine(tmp_path: Path) -> Engine:
    return Engine("file", tmp_path / "follower")


def index_files(directory: Path) -> dict[str, bytes]:
    """The segment files' bytes (an emptied transaction index is as good as none)."""
    return {
        p.name: p.read_bytes()
        for p in sorted(directory.iterdir())
        if p.suffix in (".index", ".timeindex", ".txnindex", ".log")
        and (p.suffix != ".txnindex" or p.stat().st_size)
    }


def test_file_truncation_removes_later_segments_and_snapshots(tmp_path: Path) -> None:
    engine = file_engine(tmp_path)
    leader = leader_with(30, epoch_at={0: 0, 10: 1, 20: 2})  # epochs from 0, 20, 40
    for batch in range(30):  # a producer's batch now and then, for the snapshots
        if batch % 7 == 3:
            lead(leader, data([b"p%d" % batch], producer=(3, 0, batch // 7)), 2)
    follower = engine.open()
    assert isinstance(follower, FileLog)
    follow_each(follower, leader)
    assert len(follower.segments) > 4
    cut = follower.segments[2].base_offset + 3  # inside the third segment
    assert any(offset > cut for offset, _ in list_snapshots(engine.directory))
    later = [s.base_offset for s in follower.segments[3:]]
    follower.truncate_to(cut)
    assert [s.base_offset for s in follower.segments][-1] <= cut
    assert [s.base_offset for s in engine.retired] == later
    assert all(not s.log_path.exists() for s in engine.retired)
    assert all(
        (engine.directory / (s.log_path.name + ".deleted")).exists() for s in engine.retired
    )
    end = follower.log_end_offset
    assert end <= cut
    assert max(offset for offset, _ in list_snapshots(engine.directory)) == end
    assert follower.recovery_point <= end
    epochs = (engine.directory / CHECKPOINT).read_text().split("\n")
    assert epochs[:2] == ["0", str(len(follower.leader_epochs.entries))]


@pytest.mark.parametrize("clean", [True, False])
def test_file_truncation_survives_a_reopen_with_its_indexes(tmp_path: Path, clean: bool) -> None:
    engine = file_engine(tmp_path)
    leader = MemoryLog()
    for i in range(40):
        if i % 9 == 4:
            lead(leader, data([b"t%d" % i], producer=(i, 0, 0), transactional=True), i // 10)
            lead_marker(leader, i, commit=i % 2 == 0, epoch=i // 10)
        else:
            lead(leader, data([b"v%d" % i, b"w%d" % i], producer=(1000, 0, 2 * i)), i // 10)
    follower = engine.open()
    follow_each(follower, leader)
    follower.truncate_to(31)
    follow_each(follower, leader)  # and the leader's tail again
    follower.truncate_to(44)
    state = (
        follower.log_end_offset,
        values(follower),
        producers(follower),
        follower.collect_aborted_transactions(0, 1000),
        follower.leader_epochs.entries,
        follower.first_unstable_offset,
    )
    # what recovery would rebuild from the .log files alone
    rebuilt = tmp_path / "rebuilt"
    shutil.copytree(engine.directory, rebuilt)
    for path in rebuilt.iterdir():
        if path.suffix in (".index", ".timeindex", ".txnindex", ".snapshot"):
            path.unlink()
    recovered = Engine("file", rebuilt).open(clean=False)
    recovered.close()
    if clean:
        follower.close()
    reopened = engine.open(clean=clean, recovery_point=follower.recovery_point)
    assert (
        reopened.log_end_offset,
        values(reopened),
        producers(reopened),
        reopened.collect_aborted_transactions(0, 1000),
        reopened.leader_epochs.entries,
        reopened.first_unstable_offset,
    ) == state
    assert isinstance(reopened, FileLog)
    for segment in reopened.segments:  # the indexes as truncation left them pass load
        fresh = LogSegment(
            engine.directory,
            segment.base_offset,
            index_interval_bytes=engine.settings.index_interval_bytes,
            max_index_bytes=engine.settings.segment_index_bytes,
            created_ms=NOW,
        )
        assert fresh.load()
        assert fresh.next_offset == segment.next_offset
        fresh.close()
    reopened.close()
    assert index_files(engine.directory) == index_files(rebuilt)


def test_appends_after_a_truncation_index_as_a_fresh_segment_would(tmp_path: Path) -> None:
    engine = file_engine(tmp_path)
    leader = leader_with(40)
    follower = engine.open()
    follow_each(follower, leader)
    for cut in (57, 33, 12):
        follower.truncate_to(cut)
        follow_each(follower, leader)
    follower.close()
    rebuilt = tmp_path / "rebuilt"
    shutil.copytree(engine.directory, rebuilt)
    for path in rebuilt.iterdir():
        if path.suffix in (".index", ".timeindex"):
            path.unlink()
    Engine("file", rebuilt).open(clean=False).close()
    assert index_files(engine.directory) == index_files(rebuilt)


def test_file_truncate_fully_and_start_at_leaves_one_segment(tmp_path: Path) -> None:
    engine = file_engine(tmp_path)
    follower = engine.open()
    follow(follower, fetched(leader_with(20), 0))
    assert isinstance(follower, FileLog)
    old = [s.base_offset for s in follower.segments]
    assert 0 in old
    follower.truncate_fully_and_start_at(0)  # an old segment's base offset, taken again
    assert [s.base_offset for s in follower.segments] == [0]
    assert [s.base_offset for s in engine.retired] == old
    assert list_snapshots(engine.directory) == []
    follow(follower, data([b"x"], base_offset=0, epoch=3))
    follower.close()
    reopened = engine.open()
    assert (reopened.log_start_offset, reopened.log_end_offset) == (0, 1)
    assert values(reopened) == [(0, b"x")]
    assert reopened.leader_epochs.entries == [(3, 0)]


def test_file_truncate_fully_and_reopen_at_the_new_start(tmp_path: Path) -> None:
    engine = file_engine(tmp_path)
    follower = engine.open()
    follow(follower, fetched(leader_with(5), 0))
    follower.truncate_fully_and_start_at(500)
    follower.close()
    reopened = engine.open()
    assert (reopened.log_start_offset, reopened.log_end_offset) == (500, 500)
    assert reopened.leader_epochs.entries == []
    assert [p.name for p in engine.directory.glob("*.log")] == [f"{500:020d}.log"]


# leader epochs -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("requested", "answer"),
    [
        (-1, (-1, -1)),  # undefined
        (0, (0, 10)),  # below the first entry: the first entry's start
        (1, (1, 25)),
        (2, (1, 25)),  # between: the largest epoch below and where the next begins
        (3, (3, 40)),
        (4, (3, 40)),
        (5, (5, 77)),  # the latest: the log end
        (6, (-1, -1)),  # newer than any
    ],
)
def test_end_offset_for_epoch_is_kafkas(requested: int, answer: tuple[int, int]) -> None:
    cache = LeaderEpochCache(None)
    for epoch, start in [(1, 10), (3, 25), (5, 40)]:
        cache.assign(epoch, start)
    assert cache.end_offset_for(requested, 77) == answer


def test_an_empty_cache_knows_no_epoch() -> None:
    assert LeaderEpochCache(None).end_offset_for(0, 5) == (-1, -1)
    log = MemoryLog()
    assert log.latest_epoch == -1
    assert log.end_offset_for_epoch(0) == (-1, -1)


def test_the_log_answers_for_its_epochs(engine: Engine) -> None:
    follower = engine.open()
    follow(follower, fetched(leader_with(6, epoch_at={0: 1, 2: 3, 4: 4}), 0))
    assert follower.end_offset_for_epoch(2) == (1, 4)
    assert follower.end_offset_for_epoch(4) == (4, 12)
    assert follower.end_offset_for_epoch(7) == (-1, -1)
    assert follower.latest_epoch == 4


def test_assign_drops_the_entries_a_new_one_contradicts() -> None:
    cache = LeaderEpochCache(None)
    cache.assign(1, 0)
    cache.assign(1, 5)  # same epoch, later start: nothing
    cache.assign(3, 10)
    assert cache.entries == [(1, 0), (3, 10)]
    cache.assign(2, 10)  # an older epoch at the same offset: the newer one goes
    assert cache.entries == [(1, 0), (2, 10)]
    cache.assign(4, 8)  # a start before the latest: the latest goes
    assert cache.entries == [(1, 0), (4, 8)]
    cache.assign(-1, 20)  # unstamped
    assert cache.entries == [(1, 0), (4, 8)]


def test_the_log_start_moving_trims_the_epochs(engine: Engine) -> None:
    follower = engine.open()
    follow(follower, fetched(leader_with(6, epoch_at={0: 0, 2: 1, 4: 2}), 0))
    assert follower.leader_epochs.entries == [(0, 0), (1, 4), (2, 8)]
    follower.maybe_increment_log_start_offset(5)
    assert follower.leader_epochs.entries == [(1, 5), (2, 8)]
    assert follower.end_offset_for_epoch(0) == (0, 5)


def test_the_checkpoint_follows_truncation(tmp_path: Path) -> None:
    engine = file_engine(tmp_path)
    follower = engine.open()
    follow(follower, fetched(leader_with(6, epoch_at={0: 0, 2: 1, 4: 2}), 0))
    follower.truncate_to(6)
    assert (engine.directory / CHECKPOINT).read_text() == "0\n2\n0 0\n1 4\n"
    follower.close()
    assert engine.open().leader_epochs.entries == [(0, 0), (1, 4)]


# through the log manager ---------------------------------------------------------------------
def test_the_log_manager_truncates_with_the_cleaner_paused(tmp_path: Path) -> None:
    settings = LogSettings(
        cleanup_policy=("compact",), min_cleanable_dirty_ratio=0.01, segment_bytes=400
    )
    directory = tmp_path / "d0"
    manager = LogManager(
        LogManagerConfig(storage="file", log_dirs=(str(directory),)), lambda topic: settings
    )
    manager.startup(CleanerConfig(enable=True, threads=0))
    assert manager.cleaner is not None
    tp = TopicPartition("compacted", 0)
    partition = manager.get_or_create(tp)
    for r in range(10):
        for k in range(3):
            lead(partition.log, data([b"%d" % r + b"x" * 30], key=b"k%d" % k), 0)
    assert manager.cleaner.clean_filthiest_log()
    assert isinstance(partition.log, FileLog)
    dirty = manager.cleaner_offsets()[tp]
    assert dirty == partition.log.segments[-1].base_offset > 0
    assert manager.truncate_to(tp, dirty - 4) is True
    base = partition.log.segments[-1].base_offset
    assert base < dirty
    assert manager.cleaner_offsets() == {tp: base}
    recovery = (directory / "recovery-point-offset-checkpoint").read_text().split("\n")
    assert recovery[2] == f"compacted 0 {partition.log.recovery_point}"
    assert partition.log.recovery_point <= partition.log.log_end_offset
    assert manager.truncate_to(tp, 10_000) is False
    manager.truncate_fully_and_start_at(tp, 1000)
    assert manager.cleaner_offsets() == {tp: base}  # below the start: the cleaner moves it
    assert (partition.log.log_start_offset, partition.log.log_end_offset) == (1000, 1000)
    start = (directory / "log-start-offset-checkpoint").read_text().split("\n")
    assert start[2] == "compacted 0 1000"
    assert manager.truncate_to(TopicPartition("absent", 0), 0) is False
    manager.shutdown()
