"""ConfigChangeListener: follows ``/config/changes`` (Kafka's config change notifications).

Each notification names an entity path — ``brokers/<id>``, ``brokers/<default>``,
``topics/<name>``, ``users/<name>`` — whose config changed; every subscriber is called with
the paths of notifications it has not seen yet.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable

from kplane.broker.metadata.store import MetadataStore, NodeExistsError, StoreError

CHANGES = "/config/changes"


class ConfigChangeListener:
    """Calls subscribers with the entity path of each new change notification."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self._subscribers: list[Callable[[str], None]] = []
        self._seen: set[str] = set()

    def subscribe(self, callback: Callable[[str], None]) -> None:
        self._subscribers.append(callback)

    def start(self) -> None:
        """Remember the notifications already there, then follow new ones."""
        with contextlib.suppress(NodeExistsError):
            self.store.create(CHANGES, makepath=True)
        self._seen = set(self.store.get_children(CHANGES))
        self.store.watch_children(CHANGES, lambda _path: self._on_changes())

    def _on_changes(self) -> None:
        children = set(self.store.get_children(CHANGES))
        fresh, self._seen = sorted(children - self._seen), children
        for child in fresh:
            try:
                data = self.store.get(f"{CHANGES}/{child}")[0]
                entity_path = str(json.loads(data)["entity_path"])
            except (StoreError, ValueError, KeyError):
                continue  # purged meanwhile, or not a notification
            for callback in self._subscribers:
                callback(entity_path)
