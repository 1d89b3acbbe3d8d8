"""The embedded store on disk: a snapshot of its persistent nodes and a log of later changes.

Under the store's directory (``log.dirs``):

- ``kplane-metadata.json``, the snapshot: ``{"version": 2, "zxid": Z, "nodes": {path: node}}``,
  each node ``{"data": base64, "version", "ctime", "mtime", "cversion"}``. Version 1 (no
  ``zxid``, no log beside it) is what kplane wrote before the log existed; it is migrated to
  version 2 on first open.
- ``kplane-metadata.log``, the change log: one line per durable write, ``<crc32 hex> <json>``
  with ``{"zxid": n, "ops": [...]}``, fsynced before the write returns. An op is
  ``["put", path, node]`` (created or changed), ``["cversion", path, n]`` (its children
  changed) or ``["delete", path]`` (with its subtree).

Opening replays the log's records newer than the snapshot's ``zxid``. A record cut short
or garbled by a crash ends the log: it and what follows are dropped (one warning) and the
file is truncated there. Once the log is larger than the snapshot (and than
``snapshot_min_bytes``), the whole tree is written as a new snapshot (temp file, fsync,
rename) and the log starts again, so a change costs O(its size) amortised.
"""

from __future__ import annotations

import base64
import json
import os
import zlib
from dataclasses import dataclass, field
from typing import Any

import structlog

from kplane.broker.utils.files import fsync_dir

log = structlog.get_logger(__name__)

SNAPSHOT_FILE = "kplane-metadata.json"
LOG_FILE = "kplane-metadata.log"
SNAPSHOT_VERSION = 2
SNAPSHOT_MIN_BYTES = 1 << 20

NodeImage = dict[str, Any]
"""A persistent node as stored: data (base64), version, ctime, mtime, cversion."""
Op = list[Any]
"""One change: ``["put", path, NodeImage]``, ``["cversion", path, n]`` or ``["delete", path]``."""


def node_image(data: bytes, version: int, ctime_ms: int, mtime_ms: int, cversion: int) -> NodeImage:
    """A node's stored form."""
    return {
        "data": base64.b64encode(data).decode(),
        "version": version,
        "ctime": ctime_ms,
        "mtime": mtime_ms,
        "cversion": cversion,
    }


def image_data(image: NodeImage) -> bytes:
    """The data of a stored node."""
    return base64.b64decode(image["data"])


@dataclass
class Recovered:
    """What opening found: the snapshot's nodes, then the ops to replay in order."""

    nodes: dict[str, NodeImage] = field(default_factory=dict)
    ops: list[Op] = field(default_factory=list)


def _encode_record(zxid: int, ops: list[Op]) -> bytes:
    payload = json.dumps({"zxid": zxid, "ops": ops}, separators=(",", ":")).encode()
    return b"%08x %s\n" % (zlib.crc32(payload), payload)


def _decode_record(line: bytes) -> dict[str, Any] | None:
    """The record of one log line (without its newline), None when torn or garbled."""
    crc, _, payload = line.partition(b" ")
    try:
        if len(crc) != 8 or int(crc, 16) != zlib.crc32(payload):
            return None
        record: dict[str, Any] = json.loads(payload)
    except ValueError:
        return None
    return record


class StoreLog:
    """The snapshot and change log of one directory."""

    def __init__(self, directory: str, snapshot_min_bytes: int = SNAPSHOT_MIN_BYTES) -> None:
        self.directory = directory
        self.snapshot_path = os.path.join(directory, SNAPSHOT_FILE)
        self.log_path = os.path.join(directory, LOG_FILE)
        self._snapshot_min_bytes = snapshot_min_bytes
        self._snapshot_bytes = 0
        self._log_bytes = 0
        self._zxid = 0
        self._fd: int | None = None

    # opening -----------------------------------------------------------------------------
    def recover(self) -> Recovered:
        """Read the snapshot and the log (migrating a version 1 snapshot, truncating a torn
        log tail); the state to rebuild."""
        os.makedirs(self.directory, exist_ok=True)
        recovered = Recovered()
        snapshot: dict[str, Any] = {"version": SNAPSHOT_VERSION, "zxid": 0, "nodes": {}}
        if os.path.exists(self.snapshot_path):
            with open(self.snapshot_path, "rb") as fh:
                snapshot = json.load(fh)
            self._snapshot_bytes = os.path.getsize(self.snapshot_path)
        recovered.nodes = snapshot["nodes"]
        self._zxid = int(snapshot.get("zxid", 0))
        if snapshot.get("version", 1) < SNAPSHOT_VERSION:
            # kplane before the change log: this file is the whole store; a log beside it
            # can only be older (a downgrade wrote the file since), so it goes.
            log.info("metadata store migrated", file=self.snapshot_path, nodes=len(recovered.nodes))
            self.write_snapshot(recovered.nodes)
            return recovered
        recovered.ops = self._replay()
        return recovered

    def _replay(self) -> list[Op]:
        if not os.path.exists(self.log_path):
            return []
        with open(self.log_path, "rb") as fh:
            content = fh.read()
        ops: list[Op] = []
        position = 0
        while position < len(content):
            end = content.find(b"\n", position)
            record = _decode_record(content[position:end]) if end >= 0 else None
            if record is None:
                log.warning(
                    "metadata log tail ignored: a record was cut short or garbled",
                    file=self.log_path,
                    offset=position,
                    bytes_dropped=len(content) - position,
                )
                with open(self.log_path, "r+b") as fh:
                    fh.truncate(position)
                    os.fsync(fh.fileno())
                break
            position = end + 1
            if record["zxid"] > self._zxid:  # older ones made it into the snapshot
                self._zxid = record["zxid"]
                ops.extend(record["ops"])
        self._log_bytes = position
        return ops

    # writing -----------------------------------------------------------------------------
    def append(self, ops: list[Op]) -> None:
        """Write ``ops`` as one record and fsync it; on failure the log is cut back to
        where it was and the error raised."""
        record = _encode_record(self._zxid + 1, ops)
        fd = self._open()
        try:
            written = 0
            while written < len(record):
                written += os.write(fd, record[written:])
            os.fdatasync(fd)
        except OSError:
            os.ftruncate(fd, self._log_bytes)
            raise
        self._zxid += 1
        self._log_bytes += len(record)

    @property
    def snapshot_due(self) -> bool:
        """Whether the log has outgrown the snapshot."""
        return self._log_bytes > max(self._snapshot_min_bytes, self._snapshot_bytes)

    def write_snapshot(self, nodes: dict[str, NodeImage]) -> None:
        """Make ``nodes`` (the whole tree, as of the last record) the snapshot and start the
        log again."""
        tmp = self.snapshot_path + ".tmp"
        with open(tmp, "wb") as fh:
            fh.write(
                json.dumps(
                    {"version": SNAPSHOT_VERSION, "zxid": self._zxid, "nodes": nodes},
                    separators=(",", ":"),
                ).encode()
            )
            fh.flush()
            os.fsync(fh.fileno())
            self._snapshot_bytes = fh.tell()
        os.replace(tmp, self.snapshot_path)
        fsync_dir(self.directory)
        # Records up to zxid are in the snapshot now; a crash before this truncation leaves
        # them in the log, where replay skips them.
        fd = self._open()
        os.ftruncate(fd, 0)
        os.fsync(fd)
        self._log_bytes = 0

    def _open(self) -> int:
        if self._fd is None:
            created = not os.path.exists(self.log_path)
            self._fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            if created:
                fsync_dir(self.directory)
        return self._fd

    def close(self) -> None:
        """Close the log file (it is opened again by the next write)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
