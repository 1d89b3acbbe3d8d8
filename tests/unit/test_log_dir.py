"""One log directory: its lock, meta.properties, clean-shutdown marker, checkpoints and
partition directories."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kplane.broker.log.checkpoint_file import OffsetCheckpointFile
from kplane.broker.log.log_dir import (
    InconsistentLogDirError,
    LogDir,
    LogDirError,
    LogDirLockedError,
    parse_partition_dir,
)

LOCKER = """
import sys, time
from kplane.broker.log.log_dir import LogDir
LogDir(sys.argv[1]).lock()
print("locked", flush=True)
time.sleep(120)
"""


def test_the_directory_is_created(tmp_path: Path) -> None:
    log_dir = LogDir(tmp_path / "a" / "b")
    assert log_dir.path.is_dir()
    assert LogDir(str(tmp_path / "a" / "b")).path == log_dir.path


def test_a_path_that_is_a_file_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    with pytest.raises(LogDirError, match=r"^log dir .*/f cannot be created: File exists$"):
        LogDir(tmp_path / "f")


# the lock ------------------------------------------------------------------------------------
def test_a_second_log_dir_in_this_process_is_refused(tmp_path: Path) -> None:
    first = LogDir(tmp_path)
    first.lock()
    first.lock()  # already held by this LogDir: a no-op
    with pytest.raises(LogDirLockedError) as info:
        LogDir(tmp_path).lock()
    assert str(info.value) == (
        f"log dir {tmp_path} is in use by another broker process (lock file "
        f"{tmp_path}/.lock); stop it or choose another log.dirs"
    )
    first.unlock()
    second = LogDir(tmp_path)
    second.lock()  # released by unlock
    second.unlock()
    second.unlock()  # not held: a no-op


def _lock_in_child(path: Path) -> subprocess.Popen[str]:
    """A child python that locks ``path`` and sleeps; returns once it holds the lock."""
    child = subprocess.Popen(
        [sys.executable, "-c", LOCKER, str(path)],
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    if child.stdout.readline() != "locked\n":
        child.kill()
        child.wait()
        pytest.fail("the child process did not lock the log dir")
    return child


def test_a_log_dir_locked_by_another_process_is_refused_until_it_is_gone(
    tmp_path: Path,
) -> None:
    child = _lock_in_child(tmp_path)
    try:
        with pytest.raises(LogDirLockedError, match="is in use by another broker process"):
            LogDir(tmp_path).lock()
    finally:
        child.kill()
        child.wait()
    log_dir = LogDir(tmp_path)
    log_dir.lock()  # the kernel released the dead process's lock
    log_dir.unlock()


# meta.properties ------------------------------------------------------------------------------
def _props(path: Path) -> dict[str, str]:
    lines = (path / "meta.properties").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if not line.startswith("#"))


def test_meta_properties_is_written_then_matched(tmp_path: Path) -> None:
    log_dir = LogDir(tmp_path)
    log_dir.check_meta_properties(3, "Zp6V3nwuQ0aYh0H7bsG6FA")
    text = (tmp_path / "meta.properties").read_text()
    assert text.startswith("#")
    assert _props(tmp_path) == {
        "version": "0",
        "broker.id": "3",
        "cluster.id": "Zp6V3nwuQ0aYh0H7bsG6FA",
    }
    log_dir.check_meta_properties(3, "Zp6V3nwuQ0aYh0H7bsG6FA")
    assert (tmp_path / "meta.properties").read_text() == text  # matched: not rewritten
    assert not (tmp_path / "meta.properties.tmp").exists()


def test_a_file_kafka_wrote_is_matched(tmp_path: Path) -> None:
    (tmp_path / "meta.properties").write_text(
        "#\n#Tue Mar 05 12:00:00 UTC 2024\ncluster.id=abc\nversion=0\nbroker.id=1\n"
    )
    LogDir(tmp_path).check_meta_properties(1, "abc")


def test_a_kraft_version_1_file_is_matched_on_node_id(tmp_path: Path) -> None:
    (tmp_path / "meta.properties").write_text(
        "version=1\nnode.id=2\ncluster.id=abc\ndirectory.id=x\n"
    )
    LogDir(tmp_path).check_meta_properties(2, "abc")
    with pytest.raises(InconsistentLogDirError, match=r"doesn't match stored node\.id 2"):
        LogDir(tmp_path).check_meta_properties(4, "abc")


def test_a_mismatched_broker_id_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "meta.properties"
    path.write_text("version=0\nbroker.id=5\ncluster.id=abc\n")
    with pytest.raises(InconsistentLogDirError) as info:
        LogDir(tmp_path).check_meta_properties(6, "abc")
    assert str(info.value).startswith(
        f"Configured broker.id 6 doesn't match stored broker.id 5 in {path}: "
    )
    assert "\n" not in str(info.value)


def test_a_mismatched_cluster_id_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "meta.properties"
    path.write_text("version=0\nbroker.id=5\ncluster.id=someone-else\n")
    with pytest.raises(InconsistentLogDirError) as info:
        LogDir(tmp_path).check_meta_properties(5, "abc")
    assert str(info.value).startswith(
        f"The Cluster ID abc doesn't match stored clusterId someone-else in {path}: "
    )


def test_missing_version_0_fields_are_filled_in(tmp_path: Path) -> None:
    (tmp_path / "meta.properties").write_text("broker.id=5\nextra=kept\n")
    LogDir(tmp_path).check_meta_properties(5, "abc")
    assert _props(tmp_path) == {
        "version": "0",
        "broker.id": "5",
        "cluster.id": "abc",
        "extra": "kept",
    }


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("version=0\nbroker.id\n", "line 2: expected key=value, got 'broker.id'"),
        ("=5\n", "line 1: expected key=value, got '=5'"),
        ("version=0\nbroker.id=five\n", "has broker.id=five, which is not an integer"),
        ("version=7\nbroker.id=1\n", "has version '7'; 0 and 1 are known"),
        ("version=1\ncluster.id=abc\n", "(version 1) needs node.id and cluster.id"),
    ],
)
def test_a_malformed_meta_properties_names_the_file(
    tmp_path: Path, text: str, problem: str
) -> None:
    path = tmp_path / "meta.properties"
    path.write_text(text)
    with pytest.raises(InconsistentLogDirError) as info:
        LogDir(tmp_path).check_meta_properties(1, "abc")
    assert str(info.value) == f"{path} {problem}"


def test_a_meta_properties_that_is_not_text_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "meta.properties"
    path.write_bytes(b"broker.id=\xff\n")
    with pytest.raises(InconsistentLogDirError) as info:
        LogDir(tmp_path).check_meta_properties(1, "abc")
    assert str(info.value) == f"{path} is not UTF-8 text"


# the clean-shutdown marker ---------------------------------------------------------------------
def test_the_clean_shutdown_marker_round_trips(tmp_path: Path) -> None:
    log_dir = LogDir(tmp_path)
    assert not log_dir.had_clean_shutdown()
    log_dir.write_clean_shutdown_marker()
    assert (tmp_path / ".kafka_cleanshutdown").is_file()
    assert LogDir(tmp_path).had_clean_shutdown()
    log_dir.remove_clean_shutdown_marker()
    assert not log_dir.had_clean_shutdown()
    log_dir.remove_clean_shutdown_marker()  # already gone: a no-op


# checkpoints ---------------------------------------------------------------------------------
def test_the_per_dir_checkpoints(tmp_path: Path) -> None:
    log_dir = LogDir(tmp_path)
    files = {
        "recovery-point-offset-checkpoint": log_dir.recovery_points,
        "log-start-offset-checkpoint": log_dir.log_start_offsets,
        "cleaner-offset-checkpoint": log_dir.cleaner_offsets,
    }
    for offset, (name, checkpoint) in enumerate(files.items()):
        assert isinstance(checkpoint, OffsetCheckpointFile)
        assert checkpoint.path == tmp_path / name
        assert checkpoint.read() == {}
        checkpoint.write({("t", 0): offset})
    assert LogDir(tmp_path).recovery_points.read() == {("t", 0): 0}
    assert LogDir(tmp_path).log_start_offsets.read() == {("t", 0): 1}
    assert LogDir(tmp_path).cleaner_offsets.read() == {("t", 0): 2}
    assert log_dir.recovery_points is log_dir.recovery_points  # one writer per file


# partition directories --------------------------------------------------------------------------
def test_partition_dirs(tmp_path: Path) -> None:
    names = [
        "my.topic-0", "a-b-c-12", "bad", "x-1-delete", "x-1.0a1b2c-delete", "x-1.0a1b2c-future",
        "x-1.0a1b2c-stray", "x-01", "x-", "-3", "sp ace-1", "t-2147483648", "t-2147483647",
    ]
    for name in names:
        (tmp_path / name).mkdir()
    (tmp_path / "file-0").write_text("")  # not a directory
    log_dir = LogDir(tmp_path)
    log_dir.lock()  # the lock file is not a partition either
    log_dir.write_clean_shutdown_marker()
    assert log_dir.partition_dirs() == [
        ("a-b-c", 12, tmp_path / "a-b-c-12"),
        ("my.topic", 0, tmp_path / "my.topic-0"),
        ("t", 2147483647, tmp_path / "t-2147483647"),
    ]
    assert [p.name for p in log_dir.unrecognized_dirs()] == [
        "-3", "bad", "sp ace-1", "t-2147483648", "x-", "x-01",
    ]
    log_dir.unlock()


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("my.topic-0", ("my.topic", 0)),
        ("a-b-c-12", ("a-b-c", 12)),
        ("x-delete-3", ("x-delete", 3)),
        ("bad", None),
        ("x-1-delete", None),
        ("x-+1", None),
        ("..-1", None),
        ("x-\uff11", None),  # a full-width digit one
        ("t" * 250 + "-0", None),
    ],
)
def test_parse_partition_dir(name: str, parsed: tuple[str, int] | None) -> None:
    assert parse_partition_dir(name) == parsed
