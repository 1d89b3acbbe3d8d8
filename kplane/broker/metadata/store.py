"""MetadataStore: a ZooKeeper-shaped tree of znodes, and its embedded implementation.

The embedded store keeps the tree in memory and persists every persistent node under
``log.dirs`` (a snapshot and a change log, see ``store_log``) so topics, configs and the
cluster id survive a restart; a change costs one appended, fsynced record. Ephemeral
nodes live as long as the store (the broker process).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import cast

import structlog

from kplane.broker.metadata.store_log import (
    SNAPSHOT_MIN_BYTES,
    NodeImage,
    Op,
    StoreLog,
    image_data,
    node_image,
)

log = structlog.get_logger(__name__)

Watcher = Callable[[str], None]


class StoreError(Exception):
    """Base of the store's errors."""


class NoNodeError(StoreError):
    """The path does not exist."""


class NodeExistsError(StoreError):
    """The path exists already."""


class NotEmptyError(StoreError):
    """The node has children."""


class BadVersionError(StoreError):
    """A conditional update saw another version."""


class MultiOpError(StoreError):
    """An op of a ``multi`` failed, so none of them was applied: ``index`` is its place in
    the list, ``error`` what it failed with (NoNodeError, BadVersionError, ...)."""

    def __init__(self, index: int, error: StoreError) -> None:
        super().__init__(f"op {index} failed: {error!r}")
        self.index = index
        self.error = error


@dataclass(frozen=True, slots=True)
class CheckOp:
    """A multi's condition: ``path`` exists at ``version`` (-1: at any version)."""

    path: str
    version: int = -1


@dataclass(frozen=True, slots=True)
class CreateOp:
    """Create ``path`` (its parent must exist: a multi makes no parents)."""

    path: str
    data: bytes = b""
    ephemeral: bool = False
    sequential: bool = False


@dataclass(frozen=True, slots=True)
class SetDataOp:
    """Replace the data of ``path``; with ``version`` >= 0 only if it still matches."""

    path: str
    data: bytes
    version: int = -1


@dataclass(frozen=True, slots=True)
class DeleteOp:
    """Delete the childless ``path``; with ``version`` >= 0 only if it still matches."""

    path: str
    version: int = -1


StoreOp = CheckOp | CreateOp | SetDataOp | DeleteOp


@dataclass(slots=True)
class Stat:
    """What ZooKeeper tells of a node: its data version and whether it is ephemeral."""

    version: int = 0
    ephemeral: bool = False
    ctime_ms: int = 0
    mtime_ms: int = 0
    cversion: int = 0


class MetadataStore(ABC):
    """A tree of paths with bytes, versions, ephemeral nodes and watches."""

    @abstractmethod
    def create(
        self,
        path: str,
        data: bytes = b"",
        ephemeral: bool = False,
        makepath: bool = False,
        sequential: bool = False,
    ) -> str:
        """Create ``path`` and return the path created; NodeExistsError if present,
        NoNodeError if the parent is missing. ``sequential`` appends ZooKeeper's
        ten-digit counter of the parent's child creations to the name."""

    @abstractmethod
    def get(self, path: str) -> tuple[bytes, Stat]:
        """Data and stat of ``path`` (NoNodeError)."""

    @abstractmethod
    def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        """Replace the data of ``path``; with ``version`` >= 0 only if it still matches."""

    @abstractmethod
    def delete(self, path: str, recursive: bool = False) -> None:
        """Delete ``path`` (and with ``recursive`` its children)."""

    @abstractmethod
    def exists(self, path: str) -> Stat | None:
        """Stat of ``path`` or None."""

    @abstractmethod
    def get_children(self, path: str) -> list[str]:
        """Names of the children of ``path`` (NoNodeError)."""

    @abstractmethod
    def watch_children(self, path: str, watcher: Watcher) -> None:
        """Call ``watcher(path)`` whenever the children of ``path`` change (persistent)."""

    @abstractmethod
    def watch_data(self, path: str, watcher: Watcher) -> None:
        """Call ``watcher(path)`` whenever ``path`` is created, changed or deleted."""

    @abstractmethod
    def multi(self, ops: Sequence[StoreOp]) -> list[str | Stat | None]:
        """Apply ``ops`` in order, all or none (ZooKeeper's multi): each op's result (the
        path created, the new Stat, None for a check or a delete), or MultiOpError naming
        the first op that failed."""

    @abstractmethod
    def close(self) -> None:
        """Release the store; ephemeral nodes of this session disappear."""

    def batch(self) -> AbstractContextManager[None]:
        """Make the changes this thread makes inside the block durable together, when it
        ends (the embedded store's one log record); each change still applies, and is
        seen, at once. ZooKeeper's writes are each durable on return: a no-op there."""
        return contextlib.nullcontext()

    def set_or_create(self, path: str, data: bytes) -> None:
        """Write ``data`` at ``path``, creating it (and its parents) when missing."""
        try:
            self.set(path, data)
        except NoNodeError:
            try:
                self.create(path, data, makepath=True)
            except NodeExistsError:
                self.set(path, data)


@dataclass(slots=True)
class _Node:
    data: bytes
    stat: Stat
    children: dict[str, _Node] = field(default_factory=dict)


@dataclass(slots=True)
class _Change:
    """A change applied to the tree under the lock: its result, the watchers it calls, its
    log records, and how to take it back (a later op of its multi failed)."""

    result: str | Stat | None
    fired: list[tuple[dict[str, list[Watcher]], str]]
    records: list[Op]
    undo: Callable[[], None]


def _nothing() -> None:
    """The undo of a change that changed nothing."""


def _join(parent: str, name: str) -> str:
    return f"{parent.rstrip('/')}/{name}"


def _child_name(parent: _Node, name: str, sequential: bool) -> str:
    """``name``, with ZooKeeper's ten-digit counter of the parent's child creations when
    ``sequential``."""
    return f"{name}{parent.stat.cversion:010d}" if sequential else name


def _split(path: str) -> list[str]:
    if not path.startswith("/"):
        raise ValueError(f"store paths are absolute: {path!r}")
    return [p for p in path.split("/") if p]


class EmbeddedMetadataStore(MetadataStore):
    """In-process store; persistent nodes are kept under ``directory`` by a StoreLog
    (a snapshot, ``kplane-metadata.json``, and a change log beside it)."""

    def __init__(self, directory: str | None, snapshot_min_bytes: int = SNAPSHOT_MIN_BYTES) -> None:
        self._root = _Node(b"", Stat())
        self._lock = threading.RLock()
        self._child_watchers: dict[str, list[Watcher]] = {}
        self._data_watchers: dict[str, list[Watcher]] = {}
        self._pending: list[Op] = []
        self._batching = threading.local()
        self._log = StoreLog(directory, snapshot_min_bytes) if directory else None
        if self._log is not None:
            recovered = self._log.recover()
            for path in sorted(recovered.nodes, key=lambda p: p.count("/")):
                self._put(path, recovered.nodes[path])
            for op in recovered.ops:
                self._redo(op)

    # persistence -------------------------------------------------------------------
    @contextmanager
    def batch(self) -> Iterator[None]:
        with self._lock:
            self._batching.depth = getattr(self._batching, "depth", 0) + 1
        try:
            yield
        finally:
            with self._lock:
                self._batching.depth -= 1
                if not self._batching.depth:
                    self._commit()

    def _changed(self, ops: list[Op]) -> None:
        """Record changes already made to the tree (under the lock); durable at once, or
        at the end of this thread's batch."""
        if not ops:  # an ephemeral node alone is not persisted
            return
        self._pending.extend(ops)
        if not getattr(self._batching, "depth", 0):
            self._commit()

    def _commit(self) -> None:
        if self._log is None or not self._pending:
            self._pending.clear()
            return
        self._log.append(self._pending)
        self._pending = []
        if self._log.snapshot_due:
            try:
                self._log.write_snapshot(self._images())
            except OSError as exc:  # the log still has every change: try again later
                log.warning("metadata snapshot failed", error=repr(exc))

    def _images(self) -> dict[str, NodeImage]:
        """Every persistent node, parents before children."""
        images: dict[str, NodeImage] = {}
        stack = [("", self._root)]
        while stack:
            path, node = stack.pop()
            for name, child in node.children.items():
                if not child.stat.ephemeral:
                    child_path = f"{path}/{name}"
                    images[child_path] = _image(child)
                    stack.append((child_path, child))
        return images

    def _put(self, path: str, image: NodeImage) -> None:
        node = self._root
        for part in _split(path):
            node = node.children.setdefault(part, _Node(b"", Stat()))
        node.data = image_data(image)
        node.stat = Stat(
            image["version"], False, image["ctime"], image["mtime"], image.get("cversion", 0)
        )

    def _redo(self, op: Op) -> None:
        """Apply one logged change again."""
        kind, path = op[0], op[1]
        if kind == "put":
            self._put(path, op[2])
            return
        try:
            if kind == "cversion":
                self._find(path).stat.cversion = op[2]
            else:
                parts = _split(path)
                del self._find("/" + "/".join(parts[:-1])).children[parts[-1]]
        except (NoNodeError, KeyError):
            log.warning("metadata log change skipped: no such node", op=kind, path=path)

    # tree --------------------------------------------------------------------------
    def _find(self, path: str) -> _Node:
        node = self._root
        for part in _split(path):
            child = node.children.get(part)
            if child is None:
                raise NoNodeError(path)
            node = child
        return node

    def create(
        self,
        path: str,
        data: bytes = b"",
        ephemeral: bool = False,
        makepath: bool = False,
        sequential: bool = False,
    ) -> str:
        with self._lock:
            change = self._apply_create(path, data, ephemeral, makepath, sequential)
            self._changed(change.records)
        self._fire(change.fired)
        return cast(str, change.result)

    def get(self, path: str) -> tuple[bytes, Stat]:
        with self._lock:
            node = self._find(path)
            return node.data, dataclasses.replace(node.stat)

    def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        with self._lock:
            change = self._apply_set(path, data, version)
            self._changed(change.records)
        self._fire(change.fired)
        return cast(Stat, change.result)

    def delete(self, path: str, recursive: bool = False) -> None:
        with self._lock:
            change = self._apply_delete(path, -1, recursive)
            self._changed(change.records)
        self._fire(change.fired)

    def multi(self, ops: Sequence[StoreOp]) -> list[str | Stat | None]:
        changes: list[_Change] = []
        with self._lock:
            for index, op in enumerate(ops):
                try:
                    changes.append(self._apply(op))
                except StoreError as exc:
                    for change in reversed(changes):
                        change.undo()
                    raise MultiOpError(index, exc) from exc
            self._changed([record for c in changes for record in c.records])
        self._fire([event for c in changes for event in c.fired])
        return [c.result for c in changes]

    # changes (under the lock) ---------------------------------------------------------
    def _apply(self, op: StoreOp) -> _Change:
        if isinstance(op, CheckOp):
            node = self._find(op.path)
            if op.version >= 0 and node.stat.version != op.version:
                raise BadVersionError(op.path)
            return _Change(None, [], [], _nothing)
        if isinstance(op, CreateOp):
            return self._apply_create(op.path, op.data, op.ephemeral, False, op.sequential)
        if isinstance(op, SetDataOp):
            return self._apply_set(op.path, op.data, op.version)
        return self._apply_delete(op.path, op.version, False)

    def _apply_create(
        self, path: str, data: bytes, ephemeral: bool, makepath: bool, sequential: bool
    ) -> _Change:
        parts = _split(path)
        if not parts:
            raise NodeExistsError(path)
        node, depth = self._root, 0
        while depth < len(parts) - 1 and (child := node.children.get(parts[depth])) is not None:
            node, depth = child, depth + 1
        if depth < len(parts) - 1 and not makepath:
            raise NoNodeError(path)
        walked = "/" + "/".join(parts[:depth])
        if depth == len(parts) - 1:  # the parent exists: the node must not
            name = _child_name(node, parts[-1], sequential)
            if name in node.children:
                raise NodeExistsError(_join(walked, name))
        anchor = walked, node  # the first node whose children change
        inserted: list[tuple[_Node, str, int]] = []  # (parent, name, its cversion before)
        fired: list[tuple[dict[str, list[Watcher]], str]] = []
        persisted: list[tuple[str, _Node]] = []  # the parents made on the way, and the node
        now = _now_ms()
        for part in parts[depth:-1]:
            parent = _Node(b"", Stat(0, False, now, now))
            inserted.append((node, part, node.stat.cversion))
            node.children[part] = parent
            node.stat.cversion += 1
            fired.append((self._child_watchers, walked))
            walked = _join(walked, part)
            persisted.append((walked, parent))
            node = parent
        name = _child_name(node, parts[-1], sequential)
        created = _join(walked, name)
        new = _Node(data, Stat(0, ephemeral, now, now))
        inserted.append((node, name, node.stat.cversion))
        node.children[name] = new
        node.stat.cversion += 1
        fired += [(self._child_watchers, walked), (self._data_watchers, created)]
        if not ephemeral:
            persisted.append((created, new))
        records: list[Op] = []
        if persisted:  # an ephemeral node alone is not persisted, nor its parent's cversion
            records = [["cversion", anchor[0], anchor[1].stat.cversion]]
            records += [["put", p, _image(n)] for p, n in persisted]

        def undo() -> None:
            for parent_node, child, cversion in reversed(inserted):
                del parent_node.children[child]
                parent_node.stat.cversion = cversion

        return _Change(created, fired, records, undo)

    def _apply_set(self, path: str, data: bytes, version: int) -> _Change:
        node = self._find(path)
        if version >= 0 and node.stat.version != version:
            raise BadVersionError(path)
        stat = node.stat
        before = node.data, stat.version, stat.mtime_ms
        node.data = data
        stat.version += 1
        stat.mtime_ms = _now_ms()
        records: list[Op] = [] if stat.ephemeral else [["put", path, _image(node)]]

        def undo() -> None:
            node.data, stat.version, stat.mtime_ms = before

        return _Change(dataclasses.replace(stat), [(self._data_watchers, path)], records, undo)

    def _apply_delete(self, path: str, version: int, recursive: bool) -> _Change:
        parts = _split(path)
        parent = self._find("/" + "/".join(parts[:-1])) if len(parts) > 1 else self._root
        node = parent.children.get(parts[-1])
        if node is None:
            raise NoNodeError(path)
        if version >= 0 and node.stat.version != version:
            raise BadVersionError(path)
        if node.children and not recursive:
            raise NotEmptyError(path)
        cversion = parent.stat.cversion
        del parent.children[parts[-1]]
        parent.stat.cversion += 1
        parent_path = "/" + "/".join(parts[:-1])
        records: list[Op] = []
        if not node.stat.ephemeral:
            records = [["delete", path], ["cversion", parent_path, parent.stat.cversion]]

        def undo() -> None:
            parent.children[parts[-1]] = node
            parent.stat.cversion = cversion

        fired = [(self._child_watchers, parent_path), (self._data_watchers, path)]
        return _Change(None, fired, records, undo)

    def exists(self, path: str) -> Stat | None:
        try:
            return self.get(path)[1]
        except NoNodeError:
            return None

    def get_children(self, path: str) -> list[str]:
        with self._lock:
            return sorted(self._find(path).children)

    def watch_children(self, path: str, watcher: Watcher) -> None:
        with self._lock:
            self._child_watchers.setdefault(path, []).append(watcher)

    def watch_data(self, path: str, watcher: Watcher) -> None:
        with self._lock:
            self._data_watchers.setdefault(path, []).append(watcher)

    def _fire(self, events: list[tuple[dict[str, list[Watcher]], str]]) -> None:
        for registry, path in events:
            for watcher in list(registry.get(path, ())):
                watcher(path)

    def close(self) -> None:
        with self._lock:
            self._drop_ephemeral(self._root)
            if self._log is not None:
                self._log.close()

    def _drop_ephemeral(self, node: _Node) -> None:
        for name in [n for n, c in node.children.items() if c.stat.ephemeral]:
            del node.children[name]
        for child in node.children.values():
            self._drop_ephemeral(child)


def _image(node: _Node) -> NodeImage:
    stat = node.stat
    return node_image(node.data, stat.version, stat.ctime_ms, stat.mtime_ms, stat.cversion)


def _now_ms() -> int:
    return int(time.time() * 1000)
