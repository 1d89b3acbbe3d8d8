"""MetadataStore: a ZooKeeper-shaped tree of znodes, and its embedded implementation.

The embedded store keeps the tree in memory and persists every persistent node under
``log.dirs`` so topics, configs and the cluster id survive a restart. Ephemeral nodes
live as long as the store (the broker process).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field

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
    def close(self) -> None:
        """Release the store; ephemeral nodes of this session disappear."""

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


def _split(path: str) -> list[str]:
    if not path.startswith("/"):
        raise ValueError(f"store paths are absolute: {path!r}")
    return [p for p in path.split("/") if p]


class EmbeddedMetadataStore(MetadataStore):
    """In-process store; persistent nodes are saved to ``<dir>/kplane-metadata.json``."""

    FILE_NAME = "kplane-metadata.json"

    def __init__(self, directory: str | None) -> None:
        self._root = _Node(b"", Stat())
        self._lock = threading.RLock()
        self._child_watchers: dict[str, list[Watcher]] = {}
        self._data_watchers: dict[str, list[Watcher]] = {}
        self._file = os.path.join(directory, self.FILE_NAME) if directory else None
        if self._file and os.path.exists(self._file):
            self._load()

    # persistence -------------------------------------------------------------------
    def _load(self) -> None:
        assert self._file is not None
        with open(self._file, encoding="utf-8") as fh:
            nodes = json.load(fh)["nodes"]
        for path in sorted(nodes, key=lambda p: p.count("/")):
            entry = nodes[path]
            node = self._root
            for part in _split(path):
                node = node.children.setdefault(part, _Node(b"", Stat()))
            node.data = base64.b64decode(entry["data"])
            node.stat = Stat(
                entry["version"], False, entry["ctime"], entry["mtime"], entry.get("cversion", 0)
            )

    def _save(self) -> None:
        if self._file is None:
            return
        nodes: dict[str, dict[str, object]] = {}

        def walk(node: _Node, path: str) -> None:
            for name, child in node.children.items():
                child_path = f"{path}/{name}"
                if child.stat.ephemeral:
                    continue
                nodes[child_path] = {
                    "data": base64.b64encode(child.data).decode(),
                    "version": child.stat.version,
                    "ctime": child.stat.ctime_ms,
                    "mtime": child.stat.mtime_ms,
                    "cversion": child.stat.cversion,
                }
                walk(child, child_path)

        walk(self._root, "")
        os.makedirs(os.path.dirname(self._file), exist_ok=True)
        tmp = self._file + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"version": 1, "nodes": nodes}, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self._file)

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
        parts = _split(path)
        if not parts:
            raise NodeExistsError(path)
        fired: list[tuple[dict[str, list[Watcher]], str]] = []
        with self._lock:
            node = self._root
            walked = ""
            for part in parts[:-1]:
                child = node.children.get(part)
                if child is None:
                    if not makepath:
                        raise NoNodeError(path)
                    now = _now_ms()
                    child = _Node(b"", Stat(0, False, now, now))
                    node.children[part] = child
                    node.stat.cversion += 1
                    fired.append((self._child_watchers, walked or "/"))
                node = child
                walked += "/" + part
            if sequential:
                parts[-1] += f"{node.stat.cversion:010d}"
                path = walked + "/" + parts[-1]
            if parts[-1] in node.children:
                raise NodeExistsError(path)
            now = _now_ms()
            node.children[parts[-1]] = _Node(data, Stat(0, ephemeral, now, now))
            node.stat.cversion += 1
            fired.append((self._child_watchers, walked or "/"))
            fired.append((self._data_watchers, path))
            if not ephemeral:
                self._save()
        self._fire(fired)
        return path

    def get(self, path: str) -> tuple[bytes, Stat]:
        with self._lock:
            node = self._find(path)
            return node.data, dataclasses.replace(node.stat)

    def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        with self._lock:
            node = self._find(path)
            if version >= 0 and node.stat.version != version:
                raise BadVersionError(path)
            node.data = data
            node.stat.version += 1
            node.stat.mtime_ms = _now_ms()
            if not node.stat.ephemeral:
                self._save()
            stat = dataclasses.replace(node.stat)
        self._fire([(self._data_watchers, path)])
        return stat

    def delete(self, path: str, recursive: bool = False) -> None:
        parts = _split(path)
        with self._lock:
            parent = self._find("/" + "/".join(parts[:-1])) if len(parts) > 1 else self._root
            node = parent.children.get(parts[-1])
            if node is None:
                raise NoNodeError(path)
            if node.children and not recursive:
                raise NotEmptyError(path)
            del parent.children[parts[-1]]
            parent.stat.cversion += 1
            self._save()
        parent_path = "/" + "/".join(parts[:-1])
        self._fire([(self._child_watchers, parent_path), (self._data_watchers, path)])

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

    def _drop_ephemeral(self, node: _Node) -> None:
        for name in [n for n, c in node.children.items() if c.stat.ephemeral]:
            del node.children[name]
        for child in node.children.values():
            self._drop_ephemeral(child)


def _now_ms() -> int:
    return int(time.time() * 1000)
