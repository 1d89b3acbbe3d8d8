"""Kafka's checkpoint files: round trips, atomic replacement, and every malformed form."""

from __future__ import annotations

from pathlib import Path

import pytest

from kplane.broker.log.checkpoint_file import (
    CorruptCheckpointError,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
)
from kplane.broker.utils.files import write_atomically


def test_offsets_round_trip_in_kafkas_format(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    offsets = {("my.topic", 0): 42, ("a-b_c", 12): 0, ("__consumer_offsets", 49): 2**63 - 1}
    OffsetCheckpointFile(path).write(offsets)
    assert path.read_text() == (
        "0\n3\nmy.topic 0 42\na-b_c 12 0\n__consumer_offsets 49 9223372036854775807\n"
    )
    assert OffsetCheckpointFile(path).read() == offsets


def test_leader_epochs_round_trip_in_kafkas_format(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    LeaderEpochCheckpointFile(path).write([(0, 0), (3, 120), (7, 5000)])
    assert path.read_text() == "0\n3\n0 0\n3 120\n7 5000\n"
    assert LeaderEpochCheckpointFile(path).read() == [(0, 0), (3, 120), (7, 5000)]


def test_empty_checkpoints_round_trip(tmp_path: Path) -> None:
    offsets = OffsetCheckpointFile(tmp_path / "o")
    offsets.write({})
    assert (tmp_path / "o").read_text() == "0\n0\n"
    assert offsets.read() == {}
    epochs = LeaderEpochCheckpointFile(tmp_path / "e")
    epochs.write([])
    assert epochs.read() == []


def test_a_missing_or_empty_file_reads_as_empty(tmp_path: Path) -> None:
    assert OffsetCheckpointFile(tmp_path / "absent").read() == {}
    assert LeaderEpochCheckpointFile(tmp_path / "absent").read() == []
    (tmp_path / "empty").write_text("")
    assert OffsetCheckpointFile(tmp_path / "empty").read() == {}
    (tmp_path / "version-only").write_text("0\n")  # Kafka reads this as empty too
    assert LeaderEpochCheckpointFile(tmp_path / "version-only").read() == []


def test_a_write_replaces_the_file_and_leaves_no_tmp(tmp_path: Path) -> None:
    path = tmp_path / "log-start-offset-checkpoint"
    checkpoint = OffsetCheckpointFile(path)
    checkpoint.write({("t", 0): 1, ("t", 1): 2})
    checkpoint.write({("t", 0): 5})
    assert checkpoint.read() == {("t", 0): 5}
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_a_leftover_tmp_is_ignored_and_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "cleaner-offset-checkpoint"
    checkpoint = OffsetCheckpointFile(path)
    checkpoint.write({("t", 0): 7})
    tmp = tmp_path / "cleaner-offset-checkpoint.tmp"
    tmp.write_text("0\n9\nhalf a wri")  # a crash in the middle of the next write
    assert checkpoint.read() == {("t", 0): 7}
    checkpoint.write({("t", 0): 8})
    assert not tmp.exists()
    assert checkpoint.read() == {("t", 0): 8}


def test_write_atomically(tmp_path: Path) -> None:
    path = tmp_path / "f"
    write_atomically(path, b"one\n")
    write_atomically(path, b"two\n")
    assert path.read_text() == "two\n"
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


def test_crlf_line_ends_are_read(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_bytes(b"0\r\n1\r\n4 10\r\n")
    assert LeaderEpochCheckpointFile(path).read() == [(4, 10)]


MALFORMED_OFFSETS = [
    ("1\n0\n", "line 1: expected version 0, got '1'"),
    ("zero\n0\n", "line 1: expected version 0, got 'zero'"),
    ("0\nmany\n", "line 2: expected the entry count, got 'many'"),
    ("0\n-1\n", "line 2: expected the entry count, got '-1'"),
    ("0\n1\nx y\n", "line 3: expected 'topic partition offset', got 'x y'"),
    ("0\n2\nt 0 1\nt 1 2 3\n", "line 4: expected 'topic partition offset', got 't 1 2 3'"),
    ("0\n1\nt zero 1\n", "line 3: expected 'topic partition offset', got 't zero 1'"),
    ("0\n1\nt 0 1.5\n", "line 3: expected 'topic partition offset', got 't 0 1.5'"),
    ("0\n1\nt  0 1\n", "line 3: expected 'topic partition offset', got 't  0 1'"),
    ("0\n1\nt 0 +1\n", "line 3: expected 'topic partition offset', got 't 0 +1'"),
    ("0\n1\nt 2147483648 1\n", "line 3: expected 'topic partition offset'"),
    ("0\n1\nt 0 9223372036854775808\n", "line 3: expected 'topic partition offset'"),
    ("0\n1\n\n", "line 3: expected 'topic partition offset', got ''"),
    ("0\n3\nt 0 1\n", "line 2: the count is 3 but 1 entries follow"),
    ("0\n1000000000\n", "line 2: the count is 1000000000 but 0 entries follow"),
    ("0\n0\nt 0 1\n", "line 2: the count is 0 but 1 entries follow"),
]


@pytest.mark.parametrize(("text", "problem"), MALFORMED_OFFSETS)
def test_a_malformed_offset_checkpoint_names_the_file_and_line(
    tmp_path: Path, text: str, problem: str
) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    path.write_text(text)
    with pytest.raises(CorruptCheckpointError) as info:
        OffsetCheckpointFile(path).read()
    assert str(info.value).startswith(f"{path} {problem}")
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("0\n1\n3\n", "line 3: expected 'epoch startOffset', got '3'"),
        ("0\n1\n3 x\n", "line 3: expected 'epoch startOffset', got '3 x'"),
        ("0\n1\n3 4 5\n", "line 3: expected 'epoch startOffset', got '3 4 5'"),
        ("0\n2\n3 4\n", "line 2: the count is 2 but 1 entries follow"),
    ],
)
def test_a_malformed_leader_epoch_checkpoint_names_the_file_and_line(
    tmp_path: Path, text: str, problem: str
) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text(text)
    with pytest.raises(CorruptCheckpointError) as info:
        LeaderEpochCheckpointFile(path).read()
    assert str(info.value) == f"{path} {problem}"


def test_a_file_that_is_not_utf8_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    path.write_bytes(b"0\n1\nt\xff 0 1\n")
    with pytest.raises(CorruptCheckpointError, match=r"line 3: not UTF-8 text$"):
        OffsetCheckpointFile(path).read()


@pytest.mark.parametrize(
    "offsets",
    [
        {("has space", 0): 1},
        {("new\nline", 0): 1},
        {("", 0): 1},
        {("t", 2**31): 1},
        {("t", 0): 2**63},
    ],
)
def test_an_entry_that_would_not_read_back_is_refused_and_nothing_written(
    tmp_path: Path, offsets: dict[tuple[str, int], int]
) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    checkpoint = OffsetCheckpointFile(path)
    checkpoint.write({("t", 0): 3})
    with pytest.raises(ValueError, match="is not a 'topic partition offset' entry"):
        checkpoint.write(offsets)
    assert checkpoint.read() == {("t", 0): 3}
    assert not (tmp_path / f"{path.name}.tmp").exists()
