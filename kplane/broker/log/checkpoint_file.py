"""Kafka's checkpoint files (``CheckpointFile``): a version line (0), an entry-count line,
then one entry per line with its fields separated by single spaces.

``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint`` and
``cleaner-offset-checkpoint`` hold ``topic partition offset`` entries
(:class:`OffsetCheckpointFile`); each partition's ``leader-epoch-checkpoint`` holds
``epoch startOffset`` entries (:class:`LeaderEpochCheckpointFile`). Writes are atomic and
durable: ``<name>.tmp`` is written and fsynced, renamed over the file, and the directory is
fsynced, so a crash leaves either the old checkpoint or the new one.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Generic, TypeVar

from kplane.broker.utils.files import write_atomically

VERSION = 0

T = TypeVar("T", bound=tuple[object, ...])

_INTEGER = re.compile(r"-?[0-9]+")


class CorruptCheckpointError(ValueError):
    """A checkpoint file that does not parse; the message names the file and the line."""


def parse_int(text: str, bits: int) -> int:
    """A decimal integer that fits a signed ``bits``-bit Java integer; ValueError otherwise."""
    if not _INTEGER.fullmatch(text):
        raise ValueError(text)
    value = int(text)
    limit = 2 ** (bits - 1)
    if not -limit <= value < limit:
        raise ValueError(text)
    return value


class CheckpointFile(Generic[T]):
    """A version-0 checkpoint of tuple entries. ``layout`` names the fields (``"epoch
    startOffset"``); ``parse`` turns a line's fields into an entry, raising ValueError when
    they are not one. Entries are written as their fields' ``str`` joined by spaces."""

    def __init__(self, path: Path, layout: str, parse: Callable[[list[str]], T]) -> None:
        self.path = path
        self.layout = layout
        self._width = len(layout.split())
        self._parse = parse
        self._lock = threading.Lock()

    def read(self) -> list[T]:
        """The entries; a missing or empty file (or one with only a version line, as Kafka
        allows) reads as none. CorruptCheckpointError when the file is malformed."""
        with self._lock:
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                return []
        lines = self._lines(data)
        if not lines:
            return []
        if self._int_or_none(lines[0]) != VERSION:
            raise self._error(1, f"expected version {VERSION}, got {lines[0]!r}")
        if len(lines) == 1:
            return []
        count = self._int_or_none(lines[1])
        if count is None or count < 0:
            raise self._error(2, f"expected the entry count, got {lines[1]!r}")
        entries = []
        for number, line in enumerate(lines[2:], start=3):
            entry = self._entry(line)
            if entry is None:
                raise self._error(number, f"expected {self.layout!r}, got {line!r}")
            entries.append(entry)
        if len(entries) != count:
            raise self._error(2, f"the count is {count} but {len(entries)} entries follow")
        return entries

    def write(self, entries: Iterable[T]) -> None:
        """Replace the checkpoint with ``entries`` atomically and durably. ValueError (and
        nothing written) when an entry would not read back as itself, such as a topic with
        a space."""
        lines = []
        for entry in entries:
            line = " ".join(str(field) for field in entry)
            if "\n" in line or "\r" in line or self._entry(line) != entry:
                raise ValueError(f"{self.path}: {entry!r} is not a {self.layout!r} entry")
            lines.append(line)
        text = "".join(f"{line}\n" for line in [str(VERSION), str(len(lines)), *lines])
        with self._lock:
            write_atomically(self.path, text.encode())

    def _lines(self, data: bytes) -> list[str]:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self._error(data.count(b"\n", 0, exc.start) + 1, "not UTF-8 text") from None
        lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        if lines[-1] == "":
            lines.pop()  # the newline that ends the last line
        return lines

    def _entry(self, line: str) -> T | None:
        fields = line.split(" ")
        if len(fields) != self._width:
            return None
        try:
            return self._parse(fields)
        except ValueError:
            return None

    @staticmethod
    def _int_or_none(text: str) -> int | None:
        try:
            return parse_int(text, 32)
        except ValueError:
            return None

    def _error(self, line: int, problem: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"{self.path} line {line}: {problem}")


def _offset_entry(fields: list[str]) -> tuple[str, int, int]:
    topic, partition, offset = fields
    if not topic:
        raise ValueError("empty topic")
    return topic, parse_int(partition, 32), parse_int(offset, 64)


def _epoch_entry(fields: list[str]) -> tuple[int, int]:
    epoch, start_offset = fields
    return parse_int(epoch, 32), parse_int(start_offset, 64)


class OffsetCheckpointFile:
    """``topic partition offset`` entries as ``{(topic, partition): offset}`` (Kafka's
    OffsetCheckpointFile: recovery points, log start offsets, cleaner offsets)."""

    def __init__(self, path: Path) -> None:
        self._file = CheckpointFile(path, "topic partition offset", _offset_entry)

    @property
    def path(self) -> Path:
        return self._file.path

    def read(self) -> dict[tuple[str, int], int]:
        """The offsets; empty when the file is missing. CorruptCheckpointError if malformed."""
        return {(topic, partition): offset for topic, partition, offset in self._file.read()}

    def write(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Replace the checkpoint with ``offsets`` atomically and durably."""
        self._file.write((t, p, offset) for (t, p), offset in offsets.items())


class LeaderEpochCheckpointFile(CheckpointFile[tuple[int, int]]):
    """``epoch startOffset`` entries as ``[(epoch, start_offset), ...]`` (Kafka's
    LeaderEpochCheckpointFile, one per partition directory)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, "epoch startOffset", _epoch_entry)
