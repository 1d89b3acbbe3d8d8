"""Durable file steps shared by the logs, their checkpoints and the metadata store."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def fsync_dir(directory: str | Path) -> None:
    """Make the directory's entries (a rename, a new or removed file) durable (Kafka's
    ``Utils.flushDir``)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` as Kafka does: write ``<name>.tmp``, fsync it, rename
    it over ``path``, fsync the directory. A failure leaves ``path`` as it was."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(path.parent)
