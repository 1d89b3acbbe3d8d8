"""Where share-partition state lives: one JSON document per (share group, partition) in the
metadata store, ``/share_groups/<group>/<topic>/<partition>`` (the group id quoted as one
znode name), in place of Kafka's ``__share_group_state`` topic. A leader reads it when it
first serves the partition to the group and writes it whenever a request settled records;
a group's documents go when the group is deleted, every group's of a topic when the topic
is.

The group's node holds its **state epoch** (Kafka's stateEpoch of the share-partition
state), ``{"state_epoch": N}``: AlterShareGroupOffsets and DeleteShareGroupOffsets (Kafka's
InitializeShareGroupState) move it on in the same multi that changes the documents. A
leader's write carries the epoch it loaded under, as a check of the node's version in the
same multi: a write under an older epoch is refused (:class:`FencedStateEpochError`) and
changes nothing, so an altered start offset is never overwritten by a leader that had the
partition in memory before. Leaders watch the group's node to load such partitions again
before they hand out more records."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, overload
from urllib.parse import quote, unquote

from kplane.broker.log.partition import TopicPartition
from kplane.broker.metadata.store import (
    BadVersionError,
    CheckOp,
    CreateOp,
    DeleteOp,
    MetadataStore,
    MultiOpError,
    NodeExistsError,
    NoNodeError,
    SetDataOp,
    StoreOp,
)

ROOT = "/share_groups"


def _group_path(group_id: str) -> str:
    return f"{ROOT}/{quote(group_id, safe='')}"


def _path(group_id: str, tp: TopicPartition) -> str:
    return f"{_group_path(group_id)}/{tp.topic}/{tp.partition}"


def _group_of(path: str) -> str:
    return unquote(path[len(ROOT) + 1 :].split("/", 1)[0])


def _json(doc: Mapping[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class StateEpoch:
    """A group's state epoch as a leader loaded it: the epoch, and the version and
    creation time of the node that holds it (what a write checks)."""

    epoch: int
    version: int
    ctime_ms: int


class FencedStateEpochError(Exception):
    """A write under a state epoch that has moved on (FENCED_STATE_EPOCH)."""

    def __init__(self, group_id: str) -> None:
        super().__init__(f"the state epoch of share group {group_id} moved on")
        self.group_id = group_id


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

    @overload
    def state_epoch(self, group_id: str) -> StateEpoch: ...
    @overload
    def state_epoch(self, group_id: str, create: bool) -> StateEpoch | None: ...

    def state_epoch(self, group_id: str, create: bool = True) -> StateEpoch | None:
        """The group's state epoch, its node made (at epoch 0) when missing (else None
        without ``create``)."""
        path = _group_path(group_id)
        while True:
            try:
                data, stat = self._store.get(path)
            except NoNodeError:
                if not create:
                    return None
                with contextlib.suppress(NodeExistsError):
                    self._store.create(path, _json({"state_epoch": 0}), makepath=True)
                continue
            doc = json.loads(data) if data else {}
            epoch = int(doc.get("state_epoch", 0)) if isinstance(doc, dict) else 0
            return StateEpoch(epoch, stat.version, stat.ctime_ms)

    def watch_group(self, group_id: str, watcher: Callable[[str], None]) -> None:
        """Call ``watcher(group_id)`` whenever the group's state epoch moves on or its
        state is deleted."""
        self._store.watch_data(_group_path(group_id), lambda _path: watcher(group_id))

    def write(
        self,
        states: Mapping[tuple[str, TopicPartition], Mapping[str, Any]],
        epochs: Mapping[tuple[str, TopicPartition], StateEpoch],
        new: Iterable[tuple[str, TopicPartition]] = (),
    ) -> None:
        """Write several documents, all or none, each under the state epoch of its group
        it was loaded under (``epochs``; ``new``: documents the store did not hold);
        FencedStateEpochError names a group whose epoch moved on."""
        checks = sorted({(key[0], epochs[key].version) for key in states})
        groups = [g for g, _version in checks]
        ops: list[StoreOp] = [CheckOp(_group_path(g), version) for g, version in checks]
        made = set(new)
        for key, doc in states.items():
            path = _path(*key)
            if key in made:
                self._topic_node(key[0], key[1].topic)
                ops.append(CreateOp(path, _json(doc)))
            else:
                ops.append(SetDataOp(path, _json(doc)))
        try:
            self._store.multi(ops)
        except MultiOpError as exc:
            if exc.index < len(groups) or isinstance(exc.error, (NoNodeError, NodeExistsError)):
                op = ops[exc.index]
                group_id = groups[exc.index] if exc.index < len(groups) else _group_of(op.path)
                raise FencedStateEpochError(group_id) from exc
            raise exc.error from exc

    def _topic_node(self, group_id: str, topic: str) -> None:
        """Make the group's node of ``topic`` (not the group's node: a group whose state
        was deleted has no node, and the write that follows is fenced)."""
        with contextlib.suppress(NodeExistsError, NoNodeError):
            self._store.create(f"{_group_path(group_id)}/{topic}")

    def initialize(self, group_id: str, starts: Mapping[TopicPartition, int | None]) -> int:
        """Kafka's InitializeShareGroupState for AlterShareGroupOffsets and
        DeleteShareGroupOffsets: each partition starts afresh at its offset (None: its
        state is deleted, the next leader starts at share.auto.offset.reset), and the
        group's state epoch moves on, in one multi. Returns the new epoch."""
        while True:
            current = self.state_epoch(group_id)
            epoch = current.epoch + 1
            ops: list[StoreOp] = [
                SetDataOp(_group_path(group_id), _json({"state_epoch": epoch}), current.version)
            ]
            for tp, start in starts.items():
                path = _path(group_id, tp)
                exists = self._store.exists(path) is not None
                if start is None:
                    if exists:
                        ops.append(DeleteOp(path))
                    continue
                doc = _json(
                    {"version": 1, "state_epoch": epoch, "start_offset": start, "state_batches": []}
                )
                if exists:
                    ops.append(SetDataOp(path, doc))
                else:
                    self._topic_node(group_id, tp.topic)
                    ops.append(CreateOp(path, doc))
            try:
                self._store.multi(ops)
            except MultiOpError as exc:
                if isinstance(exc.error, (BadVersionError, NoNodeError, NodeExistsError)):
                    continue  # a leader wrote or made a node meanwhile: again
                raise exc.error from exc
            return epoch

    def delete(self, group_id: str) -> None:
        """Remove a group's documents and its state epoch."""
        with contextlib.suppress(NoNodeError):
            self._store.delete(_group_path(group_id), recursive=True)

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
