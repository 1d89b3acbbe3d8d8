"""Kafka's checkpoint files: a version line, a count line, then one entry per line."""

from __future__ import annotations

import os
from pathlib import Path


class CorruptCheckpointError(ValueError):
    """A checkpoint file that does not parse."""


class OffsetCheckpointFile:
    """``topic partition offset`` entries."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> dict[tuple[str, int], int]:
        out: dict[tuple[str, int], int] = {}
        for fields in _read(self.path, 3):
            out[(fields[0], int(fields[1]))] = int(fields[2])
        return out

    def write(self, entries: dict[tuple[str, int], int]) -> None:
        _write(self.path, [f"{t} {p} {o}" for (t, p), o in entries.items()])


class LeaderEpochCheckpointFile:
    """``epoch startOffset`` entries."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> list[tuple[int, int]]:
        return [(int(f[0]), int(f[1])) for f in _read(self.path, 2)]

    def write(self, entries: list[tuple[int, int]]) -> None:
        _write(self.path, [f"{e} {o}" for e, o in entries])


def _read(path: Path, width: int) -> list[list[str]]:
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    if len(lines) < 2 or lines[0].strip() != "0":
        raise CorruptCheckpointError(f"{path}: not a version 0 checkpoint")
    try:
        count = int(lines[1])
        rows = [line.split(" ") for line in lines[2 : 2 + count]]
        if len(rows) != count or any(len(r) != width for r in rows):
            raise ValueError
        for r in rows:
            int(r[-1])
    except ValueError:
        raise CorruptCheckpointError(f"{path}: malformed entries") from None
    return rows


def _write(path: Path, lines: list[str]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write("0\n" + f"{len(lines)}\n" + "".join(line + "\n" for line in lines))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
