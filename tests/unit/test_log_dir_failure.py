"""A failing log dir (KIP-112) below the broker: an I/O error takes the whole dir offline
once, in one line; its logs answer KafkaStorageError without touching the disk again; the
LogManager takes them out of service, creates new logs in the dirs left, and writes no
checkpoint or clean-shutdown marker into the failed dir."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from kplane.broker.log.log_config import LogSettings
from kplane.broker.log.log_dir import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_CHECKPOINT
from kplane.broker.log.log_dir_failure_channel import KafkaStorageError
from kplane.broker.log.log_manager import LogManager, LogManagerConfig
from kplane.broker.log.partition import Partition, TopicPartition
from kplane.protocol.errors import ErrorCode
from kplane.protocol.records import Record, build_batch, scan_batches

ON_A = TopicPartition("a", 0)
ON_B = TopicPartition("b", 0)


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[LogManager]:
    """A LogManager over dirs ``a`` and ``b``, ``a-0`` in the first and ``b-0`` in the second."""
    dirs = (str(tmp_path / "a"), str(tmp_path / "b"))
    manager = LogManager(LogManagerConfig(storage="file", log_dirs=dirs), lambda t: LogSettings())
    manager.startup()
    manager.get_or_create(ON_A)
    manager.get_or_create(ON_B)
    yield manager
    manager.shutdown()


def _append(partition: Partition) -> None:
    data = build_batch([Record(key=b"k", value=b"v")])
    partition.append_records_as_leader(data, scan_batches(data))


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every segment write fails with ENOSPC; the list counts the attempts."""
    attempts: list[int] = []

    def pwritev(fd: int, buffers: Any, offset: int) -> int:
        attempts.append(fd)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "pwritev", pwritev)
    return attempts


def test_an_io_error_takes_the_log_dir_offline_once(
    manager: LogManager, full_disk: list[int], tmp_path: Path
) -> None:
    partition = manager.get(ON_A)
    assert partition is not None
    channel = manager.log_dir_failures
    with capture_logs() as logs:
        for _ in range(3):
            with pytest.raises(KafkaStorageError) as failed:
                _append(partition)
            assert failed.value.code is ErrorCode.kafka_storage_error
    assert len(full_disk) == 1  # nothing more is written to an offline dir
    assert [e["event"] for e in logs if e["log_level"] == "error"] == [
        "log dir failed: its replicas go offline"
    ]
    assert logs[0]["error"] == "ENOSPC: No space left on device"
    assert channel.is_offline(str(tmp_path / "a"))
    assert channel.take_next_offline_log_dir(0) == str(tmp_path / "a")
    assert channel.take_next_offline_log_dir(0) is None  # queued once
    assert [d.path for d in manager.live_log_dirs] == [tmp_path / "b"]


def test_the_logs_of_a_failed_dir_go_offline_and_new_ones_go_elsewhere(
    manager: LogManager, full_disk: list[int], tmp_path: Path
) -> None:
    partition = manager.get(ON_A)
    assert partition is not None
    with pytest.raises(KafkaStorageError):
        _append(partition)
    assert manager.handle_log_dir_failure(str(tmp_path / "a")) == [ON_A]
    assert manager.get(ON_A) is None and manager.is_offline(ON_A)
    assert [p.tp for p in manager.partitions()] == [ON_B]
    with pytest.raises(KafkaStorageError):  # not created again in the dir left
        manager.get_or_create(ON_A)
    manager.get_or_create(TopicPartition("new", 0))
    assert (tmp_path / "b" / "new-0").is_dir()
    checkpoint = tmp_path / "a" / RECOVERY_POINT_CHECKPOINT
    before = checkpoint.stat().st_mtime_ns if checkpoint.exists() else None
    manager.checkpoint_recovery_points()
    manager.shutdown()
    after = checkpoint.stat().st_mtime_ns if checkpoint.exists() else None
    assert before == after  # nothing written to the failed dir
    assert not (tmp_path / "a" / CLEAN_SHUTDOWN_FILE).exists()  # it is recovered next time
    assert (tmp_path / "b" / CLEAN_SHUTDOWN_FILE).exists()
