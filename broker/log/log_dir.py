"""One log directory: its lock, meta.properties, clean-shutdown marker and checkpoints."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from broker.log.checkpoint_file import OffsetCheckpointFile

CLEAN_SHUTDOWN = ".kafka_cleanshutdown"


class LogDirLockedError(Exception):
    """Another broker process holds the log dir."""


class InconsistentLogDirError(Exception):
    """meta.properties names another broker or cluster."""


class LogDir:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self._fd = -1

    def lock(self) -> None:
        lock = self.path / ".lock"
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise LogDirLockedError(
                f"log dir {self.path} is in use by another broker process (lock file {lock}); "
                "stop it or choose another log.dirs"
            ) from None
        self._fd = fd

    def unlock(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def check_meta_properties(self, broker_id: int, cluster_id: str) -> None:
        path = self.path / "meta.properties"
        if not path.exists():
            path.write_text(f"version=0\nbroker.id={broker_id}\ncluster.id={cluster_id}\n")
            return
        stored = dict(
            line.split("=", 1) for line in path.read_text().splitlines() if "=" in line
        )
        if stored.get("broker.id") not in (None, str(broker_id)):
            raise InconsistentLogDirError(
                f"Configured broker.id {broker_id} doesn't match stored broker.id "
                f"{stored['broker.id']} in {path}"
            )
        if stored.get("cluster.id") not in (None, cluster_id):
            raise InconsistentLogDirError(
                f"The Cluster ID {cluster_id} doesn't match stored clusterId "
                f"{stored['cluster.id']} in {path}"
            )

    def had_clean_shutdown(self) -> bool:
        return (self.path / CLEAN_SHUTDOWN).exists()

    def write_clean_shutdown_marker(self) -> None:
        (self.path / CLEAN_SHUTDOWN).touch()

    def remove_clean_shutdown_marker(self) -> None:
        (self.path / CLEAN_SHUTDOWN).unlink(missing_ok=True)

    @property
    def recovery_points(self) -> OffsetCheckpointFile:
        return OffsetCheckpointFile(self.path / "recovery-point-offset-checkpoint")

    @property
    def log_start_offsets(self) -> OffsetCheckpointFile:
        return OffsetCheckpointFile(self.path / "log-start-offset-checkpoint")

    @property
    def cleaner_offsets(self) -> OffsetCheckpointFile:
        return OffsetCheckpointFile(self.path / "cleaner-offset-checkpoint")

    def partition_dirs(self) -> list[tuple[str, int, Path]]:
        out = []
        for p in self.path.iterdir():
            topic, sep, part = p.name.rpartition("-")
            if p.is_dir() and sep and topic and part.isdigit():
                out.append((topic, int(part), p))
        return out
