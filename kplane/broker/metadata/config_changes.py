"""Change notifications: sequential nodes under one path, as Kafka's
ZkNodeChangeNotificationListener follows them.

``ConfigChangeListener`` follows ``/config/changes`` (Kafka's config change notifications):
each notification names an entity path — ``brokers/<id>``, ``brokers/<default>``,
``topics/<name>``, ``users/<name>`` — whose config changed; every subscriber is called with
the paths of notifications it has not seen yet. Delegation tokens use the same mechanism
under ``/delegation_token/token_changes``, each notification holding a token id.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable

from kplane.broker.metadata.store import MetadataStore, NodeExistsError, NoNodeError, StoreError

CHANGES = "/config/changes"
CHANGE_RETENTION_MS = 15 * 60 * 1000
"""How long a change notification is kept (Kafka's changeExpirationMs)."""


def purge_notifications(store: MetadataStore, path: str) -> None:
    """Drop the notifications under ``path`` older than :data:`CHANGE_RETENTION_MS`."""
    horizon = time.time() * 1000 - CHANGE_RETENTION_MS
    for name in store.get_children(path):
        stat = store.exists(f"{path}/{name}")
        if stat is not None and stat.ctime_ms < horizon:
            with contextlib.suppress(NoNodeError):
                store.delete(f"{path}/{name}")


class ChangeNotificationListener:
    """Calls subscribers with what each new notification under ``path`` names (``read``
    gives it from the node's data)."""

    def __init__(self, store: MetadataStore, path: str, read: Callable[[bytes], str]) -> None:
        self.store = store
        self.path = path
        self._read = read
        self._subscribers: list[Callable[[str], None]] = []
        self._seen: set[str] = set()

    def subscribe(self, callback: Callable[[str], None]) -> None:
        self._subscribers.append(callback)

    def start(self) -> None:
        """Remember the notifications already there, then follow new ones."""
        with contextlib.suppress(NodeExistsError):
            self.store.create(self.path, makepath=True)
        self._seen = set(self.store.get_children(self.path))
        self.store.watch_children(self.path, lambda _path: self._on_changes())

    def _on_changes(self) -> None:
        children = set(self.store.get_children(self.path))
        fresh, self._seen = sorted(children - self._seen), children
        for child in fresh:
            try:
                named = self._read(self.store.get(f"{self.path}/{child}")[0])
            except (StoreError, ValueError, KeyError):
                continue  # purged meanwhile, or not a notification
            for callback in self._subscribers:
                callback(named)


class ConfigChangeListener(ChangeNotificationListener):
    """Calls subscribers with the entity path of each new config change notification."""

    def __init__(self, store: MetadataStore) -> None:
        super().__init__(store, CHANGES, _entity_path)


def _entity_path(data: bytes) -> str:
    return str(json.loads(data)["entity_path"])
