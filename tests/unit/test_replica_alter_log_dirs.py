"""A replica moving between log dirs (KIP-113) in a LogManager of two file log dirs: a
truncation of the current log during the copy reaches the future log, so the log swapped in
holds what the current log holds; asking for the dir the replica is in stops the move, and
asking again starts it over."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kplane.broker.log.log_manager import LogManager, LogManagerConfig
from kplane.broker.log.partition import Partition, TopicPartition
from kplane.broker.log.replica_alter_log_dirs import UNLIMITED
from tests.unit.test_log_truncation import data, lead, values

TP = TopicPartition("moving", 0)


class Move:
    """A LogManager over two log dirs, one replica in the first, its copy rate settable."""

    def __init__(self, tmp_path: Path) -> None:
        self.dirs = (tmp_path / "a", tmp_path / "b")
        self.rate = 0  # the first chunk is copied, then nothing until the rate is raised
        self.manager = LogManager(
            LogManagerConfig(storage="file", log_dirs=tuple(map(str, self.dirs)))
        )
        self.manager.log_dir_mover.io_max_bytes_per_second = lambda: self.rate
        self.manager.startup()
        self.partition: Partition = self.manager.get_or_create(TP)

    def where(self) -> Path:
        return Path(self.partition.log.directory).parent  # type: ignore[attr-defined]


@pytest.fixture
def move(tmp_path: Path) -> Iterator[Move]:
    moving = Move(tmp_path)
    yield moving
    moving.manager.shutdown()


def _until(condition: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_a_truncation_during_the_copy_reaches_the_future_log(move: Move) -> None:
    log = move.partition.log
    for i in range(300):  # 1.5 MB: more than the one chunk copied before the rate holds it
        lead(log, data([b"%d:" % i + b"x" * 5000]), 0)
    source = move.where()
    target = next(d for d in move.dirs if d != source)
    assert move.manager.alter_log_dir(TP, str(target))
    future = move.manager.future_log(TP)
    assert future is not None
    _until(lambda: future.log.log_end_offset > 0, "the first chunk copied")
    copied = future.log.log_end_offset
    assert copied < 300

    cut = copied // 2
    with log.lock:  # the copy, level with the cut log, would be swapped in before the appends
        move.manager.truncate_to(TP, cut)  # as a follower cuts a diverging tail
        assert future.log.log_end_offset == cut
        for i in range(20):
            lead(log, data([b"new-%d" % i]), 1)
    expected = values(log)
    move.rate = UNLIMITED
    _until(lambda: move.manager.future_log(TP) is None, "the move done")

    assert move.where() == target and move.partition.log is not log
    assert values(move.partition.log) == expected
    assert [v for _, v in expected[cut:]] == [b"new-%d" % i for i in range(20)]
    assert move.partition.log.latest_epoch == 1


def test_asking_for_the_dir_it_is_in_stops_the_move(move: Move) -> None:
    for i in range(300):
        lead(move.partition.log, data([b"%d:" % i + b"x" * 5000]), 0)
    source = move.where()
    target = next(d for d in move.dirs if d != source)
    assert move.manager.alter_log_dir(TP, str(target))
    assert list(target.glob("moving-0.*-future"))
    assert not move.manager.alter_log_dir(TP, str(source))
    assert move.manager.future_log(TP) is None
    assert not list(target.glob("moving-0.*-future")) and move.where() == source

    # Asked again, the move starts over and ends.
    expected = values(move.partition.log)
    move.rate = UNLIMITED
    assert move.manager.alter_log_dir(TP, str(target))
    _until(lambda: move.manager.future_log(TP) is None, "the second move done")
    assert move.where() == target and values(move.partition.log) == expected
