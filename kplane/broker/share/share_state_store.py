"""Where share-partition state lives: one JSON document per (share group, partition) in the
metadata store, ``/share_groups/<group>/<topic>/<partition>`` (the group id quoted as one
znode name), in place of Kafka's ``__share_group_state`` topic. A leader reads it when it
first serves the partition to the group and writes it whenever a request settled records;
a group's documents go when the group is deleted, every group's of a topic when the topic
is."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, unquote

from kplane.broker.log.partition import TopicPartition
from kplane.broker.metadata.store import MetadataStore, NoNodeError

ROOT = "/share_groups"


def _group_path(group_id: str) -> str:
    return f"{ROOT}/{quote(group_id, safe='')}"


def _path(group_id: str, tp: TopicPartition) -> str:
    return f"{_group_path(group_id)}/{tp.topic}/{tp.partition}"


class ShareStateStore:
    """Share-partition state documents over a MetadataStore."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store

    def read(self, group_id: str, tp: TopicPartition) -> dict[str, Any] | None:
        try:
            data, _stat = self._store.get(_path(group_id, tp))
        except NoNodeError:
            return None
        doc = json.loads(data)
        return doc if isinstance(doc, dict) else None

    def write(self, states: Mapping[tuple[str, TopicPartition], Mapping[str, Any]]) -> None:
        """Write several documents, durable together."""
        with self._store.batch():
            for (group_id, tp), doc in states.items():
                self._store.set_or_create(
                    _path(group_id, tp), json.dumps(doc, separators=(",", ":")).encode()
                )

    def delete(self, group_id: str, tps: Iterable[TopicPartition] | None = None) -> None:
        """Remove a group's documents (``tps``: only those)."""
        with self._store.batch():
            if tps is None:
                with contextlib.suppress(NoNodeError):
                    self._store.delete(_group_path(group_id), recursive=True)
                return
            for tp in tps:
                with contextlib.suppress(NoNodeError):
                    self._store.delete(_path(group_id, tp))

    def delete_topic(self, topic: str) -> None:
        """Remove every group's documents of ``topic`` (the topic was deleted)."""
        with self._store.batch():
            for group_id in self.group_ids():
                with contextlib.suppress(NoNodeError):
                    self._store.delete(f"{_group_path(group_id)}/{topic}", recursive=True)

    def partitions(self, group_id: str) -> list[TopicPartition]:
        """The partitions with stored state of ``group_id``."""
        out: list[TopicPartition] = []
        try:
            topics = self._store.get_children(_group_path(group_id))
        except NoNodeError:
            return []
        for topic in topics:
            with contextlib.suppress(NoNodeError):
                out.extend(
                    TopicPartition(topic, int(p))
                    for p in self._store.get_children(f"{_group_path(group_id)}/{topic}")
                )
        return sorted(out, key=lambda tp: (tp.topic, tp.partition))

    def group_ids(self) -> list[str]:
        try:
            return sorted(unquote(n) for n in self._store.get_children(ROOT))
        except NoNodeError:
            return []
