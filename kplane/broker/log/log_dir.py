"""One log directory (a ``log.dirs`` entry): its lock, ``meta.properties``, clean-shutdown
marker, per-dir checkpoints and partition directories, as Kafka's LogManager keeps them."""

from __future__ import annotations

import fcntl
import os
import re
import time
import uuid
from pathlib import Path

from kplane.broker.log.checkpoint_file import OffsetCheckpointFile, parse_int
from kplane.broker.utils.files import fsync_dir, write_atomically
from kplane.protocol.errors import KafkaError
from kplane.protocol.topic_names import validate_topic_name

LOCK_FILE = ".lock"
META_PROPERTIES = "meta.properties"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
DELETE_SUFFIX = "-delete"
FUTURE_SUFFIX = "-future"
# Kafka's partition directories being deleted, moved between log dirs, or left stray.
SPECIAL_DIR_SUFFIXES = (DELETE_SUFFIX, FUTURE_SUFFIX, "-stray")
_UNIQUE_ID = re.compile(r"[0-9a-f]{32}")
_PARTITION = re.compile(r"0|[1-9][0-9]*")  # as Kafka names it: no sign, no leading zeros


class LogDirError(Exception):
    """A log dir that cannot be used; the message says why in one sentence."""


class LogDirLockedError(LogDirError):
    """Another broker process (or another LogDir in this one) holds the log dir's lock."""


class InconsistentLogDirError(LogDirError):
    """``meta.properties`` is malformed or names another broker or cluster (Kafka's
    InconsistentBrokerIdException / InconsistentClusterIdException)."""


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``(topic, partition)`` for a ``<topic>-<partition>`` directory name, or None (a name
    that does not parse, or one of Kafka's ``-delete``/``-future``/``-stray`` directories)."""
    if name.endswith(SPECIAL_DIR_SUFFIXES):
        return None
    topic, _, partition = name.rpartition("-")
    if not _PARTITION.fullmatch(partition) or int(partition) >= 2**31:
        return None
    try:
        validate_topic_name(topic)
    except KafkaError:
        return None
    return topic, int(partition)


def special_dir_name(topic: str, partition: int, suffix: str) -> str:
    """Kafka's name for a partition directory being moved in (``FUTURE_SUFFIX``) or deleted
    (``DELETE_SUFFIX``): ``<topic>-<partition>.<unique id><suffix>``."""
    return f"{topic}-{partition}.{uuid.uuid4().hex}{suffix}"


def parse_future_dir(name: str) -> tuple[str, int] | None:
    """``(topic, partition)`` for a future log's directory (``special_dir_name`` with
    ``FUTURE_SUFFIX``), or None."""
    if not name.endswith(FUTURE_SUFFIX):
        return None
    base, _, unique = name[: -len(FUTURE_SUFFIX)].rpartition(".")
    return parse_partition_dir(base) if _UNIQUE_ID.fullmatch(unique) else None


class LogDir:
    """One log directory; created if missing."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LogDirError(f"log dir {self.path} cannot be created: {exc.strerror}") from None
        self._lock_fd: int | None = None
        self._recovery_points = OffsetCheckpointFile(self.path / RECOVERY_POINT_CHECKPOINT)
        self._log_start_offsets = OffsetCheckpointFile(self.path / LOG_START_OFFSET_CHECKPOINT)
        self._cleaner_offsets = OffsetCheckpointFile(self.path / CLEANER_OFFSET_CHECKPOINT)

    # the lock ------------------------------------------------------------------------------
    def lock(self) -> None:
        """Take an exclusive ``flock`` on ``<dir>/.lock``, held until :meth:`unlock` (a no-op
        when this LogDir already holds it). LogDirLockedError when another holds it."""
        if self._lock_fd is not None:
            return
        lock_path = self.path / LOCK_FILE
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise LogDirError(f"cannot open the lock file {lock_path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LogDirLockedError(
                f"log dir {self.path} is in use by another broker process "
                f"(lock file {lock_path}); stop it or choose another log.dirs"
            ) from None
        except OSError as exc:
            os.close(fd)
            raise LogDirError(f"cannot lock {lock_path}: {exc.strerror}") from None
        self._lock_fd = fd

    def unlock(self) -> None:
        """Release the lock and close its file (a no-op when not held)."""
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    # meta.properties -----------------------------------------------------------------------
    def check_meta_properties(self, broker_id: int, cluster_id: str) -> None:
        """Kafka's start-up check: write ``meta.properties`` (version 0) when missing, fill
        in a version-0 file's missing broker.id or cluster.id, and raise
        InconsistentLogDirError when the stored ids differ or the file is malformed."""
        path = self.path / META_PROPERTIES
        try:
            props = self._read_properties(path)
        except FileNotFoundError:
            props = {}
        version = props.get("version", "0")
        if version not in ("0", "1"):
            raise InconsistentLogDirError(f"{path} has version {version!r}; 0 and 1 are known")
        id_key = "broker.id" if version == "0" else "node.id"  # version 1 is KRaft's
        if version == "1" and not (id_key in props and "cluster.id" in props):
            raise InconsistentLogDirError(f"{path} (version 1) needs node.id and cluster.id")
        if id_key in props:
            try:
                stored_id = parse_int(props[id_key], 32)
            except ValueError:
                raise InconsistentLogDirError(
                    f"{path} has {id_key}={props[id_key]}, which is not an integer"
                ) from None
            if stored_id != broker_id:
                raise InconsistentLogDirError(
                    f"Configured broker.id {broker_id} doesn't match stored {id_key} "
                    f"{stored_id} in {path}: configure broker.id={stored_id} if this data "
                    "moved here, or empty the log dir to start a new broker"
                )
        stored_cluster = props.get("cluster.id")
        if stored_cluster is not None and stored_cluster != cluster_id:
            raise InconsistentLogDirError(
                f"The Cluster ID {cluster_id} doesn't match stored clusterId {stored_cluster} "
                f"in {path}: the broker is trying to join the wrong cluster "
                "(check zookeeper.connect)"
            )
        if id_key not in props or stored_cluster is None:
            props = {"version": "0", "broker.id": str(broker_id), "cluster.id": cluster_id,
                     **props}
            stamp = time.strftime("%a %b %d %H:%M:%S %Z %Y")
            lines = [f"#{stamp}", *(f"{key}={value}" for key, value in props.items())]
            write_atomically(path, "".join(f"{line}\n" for line in lines).encode())

    @staticmethod
    def _read_properties(path: Path) -> dict[str, str]:
        """``key=value`` lines; blank lines and ``#``/``!`` comments skipped (the part of
        Java's Properties format Kafka writes)."""
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            raise InconsistentLogDirError(f"{path} is not UTF-8 text") from None
        props = {}
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line or line[0] in "#!":
                continue
            key, sep, value = line.partition("=")
            if not sep or not key.strip():
                raise InconsistentLogDirError(
                    f"{path} line {number}: expected key=value, got {raw!r}"
                )
            props[key.strip()] = value.strip()
        return props

    # the clean-shutdown marker -------------------------------------------------------------
    def had_clean_shutdown(self) -> bool:
        """Whether ``.kafka_cleanshutdown`` is present: the last stop was clean."""
        return (self.path / CLEAN_SHUTDOWN_FILE).is_file()

    def write_clean_shutdown_marker(self) -> None:
        """Mark a clean stop (after every log is flushed and the checkpoints are written)."""
        (self.path / CLEAN_SHUTDOWN_FILE).touch()
        fsync_dir(self.path)

    def remove_clean_shutdown_marker(self) -> None:
        """Remove the marker (after loading), durably, so a later crash is seen as unclean."""
        try:
            (self.path / CLEAN_SHUTDOWN_FILE).unlink()
        except FileNotFoundError:
            return
        fsync_dir(self.path)

    # checkpoints ---------------------------------------------------------------------------
    @property
    def recovery_points(self) -> OffsetCheckpointFile:
        """``recovery-point-offset-checkpoint``."""
        return self._recovery_points

    @property
    def log_start_offsets(self) -> OffsetCheckpointFile:
        """``log-start-offset-checkpoint``."""
        return self._log_start_offsets

    @property
    def cleaner_offsets(self) -> OffsetCheckpointFile:
        """``cleaner-offset-checkpoint``."""
        return self._cleaner_offsets

    # partition directories -----------------------------------------------------------------
    def partition_dirs(self) -> list[tuple[str, int, Path]]:
        """``(topic, partition, path)`` of each ``<topic>-<partition>`` directory, sorted."""
        found = []
        for path in self._subdirs():
            parsed = parse_partition_dir(path.name)
            if parsed is not None:
                found.append((*parsed, path))
        return sorted(found)

    def future_dirs(self) -> list[tuple[str, int, Path]]:
        """``(topic, partition, path)`` of each future log's directory (a move into this dir
        under way, KIP-113), sorted."""
        found = []
        for path in self._subdirs():
            parsed = parse_future_dir(path.name)
            if parsed is not None:
                found.append((*parsed, path))
        return sorted(found)

    def unrecognized_dirs(self) -> list[Path]:
        """Directories that are neither partitions nor Kafka's ``-delete``/``-future``/
        ``-stray`` ones (Kafka refuses to start on these; the caller decides), sorted."""
        return [
            path
            for path in self._subdirs()
            if not path.name.endswith(SPECIAL_DIR_SUFFIXES)
            and parse_partition_dir(path.name) is None
        ]

    def _subdirs(self) -> list[Path]:
        return sorted(p for p in self.path.iterdir() if p.is_dir())
