"""The modern groups' state in the metadata store, so that it survives a restart and a
coordinator move: one document per group, consumer (KIP-848) and share (KIP-932) groups
alike (Kafka keeps both in __consumer_offsets), with the group's type, the group and
assignment epochs, the members with their epochs and assignments, the target assignment and
what the subscriptions resolved to. It is written conditionally on the version read, so a
coordinator holding an older copy is fenced instead of overwriting a newer one. A consumer
group's offsets stay where the OffsetManager keeps them; a share group's progress is its
share-partition state (:mod:`kplane.broker.share`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

import structlog

from kplane.broker.group.consumer_group import (
    ConsumerGroup,
    ConsumerGroupMember,
    assignment_from_json,
    assignment_to_json,
)
from kplane.broker.group.group import GroupType
from kplane.broker.group.group_registry import GroupRegistry
from kplane.broker.group.share_group import ShareGroup, ShareGroupMember
from kplane.broker.metadata.store import BadVersionError, NodeExistsError, StoreError
from kplane.protocol.errors import ErrorCode, KafkaError

log = structlog.get_logger(__name__)

StoredGroup = ConsumerGroup | ShareGroup
"""The group types whose state is stored here."""

_G = TypeVar("_G", ConsumerGroup, ShareGroup)


class ConsumerGroupStore(Protocol):
    """Where modern groups are durable (KafkaMetadataClient's consumer-group methods, which
    hold share groups too: group ids are unique across types)."""

    def read_consumer_group(self, group_id: str) -> tuple[bytes, int] | None: ...

    def write_consumer_group(self, group_id: str, data: bytes, version: int) -> int: ...

    def delete_consumer_group(self, group_id: str) -> None: ...

    def consumer_group_ids(self) -> list[str]: ...


def encode_group(group: StoredGroup) -> bytes:
    """The group's document (the caller holds its lock)."""
    doc: dict[str, Any] = {
        "version": 1,
        "type": group.group_type.value,
        "group_epoch": group.group_epoch,
        "assignment_epoch": group.assignment_epoch,
        "assignor": group.assignor_name,
        "members": [m.to_json() for m in group.members.values()],
        "target": {m: assignment_to_json(a) for m, a in group.target.items()},
        "subscribed": [_topic_to_json(entry) for entry in group.subscription_fingerprint],
    }
    return json.dumps(doc, sort_keys=True).encode()


def decode_group(group_id: str, data: bytes, version: int) -> StoredGroup | None:
    """A group from its document (one without a type is a consumer group's, as stored
    before share groups were); None when it does not parse (logged)."""
    try:
        doc = json.loads(data)
        group_type = GroupType(doc.get("type", GroupType.CONSUMER.value))
        if group_type is GroupType.CONSUMER:
            member = ConsumerGroupMember.from_json
            return _decode(ConsumerGroup, member, group_id, doc, data, version)
        if group_type is GroupType.SHARE:
            return _decode(ShareGroup, ShareGroupMember.from_json, group_id, doc, data, version)
        raise ValueError(f"no stored state for {group_type.value} groups")
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("stored group ignored", group=group_id, reason=str(exc))
        return None


def _decode(
    group_class: type[_G],
    member_from_json: Callable[[Mapping[str, Any]], Any],
    group_id: str,
    doc: Mapping[str, Any],
    data: bytes,
    version: int,
) -> _G:
    group = group_class(
        group_id,
        group_epoch=int(doc["group_epoch"]),
        assignment_epoch=int(doc["assignment_epoch"]),
        assignor_name=str(doc.get("assignor", "")),
        target={m: assignment_from_json(a) for m, a in doc.get("target", {}).items()},
        subscription_fingerprint=tuple(_topic_from_json(e) for e in doc.get("subscribed", [])),
        store_version=version,
        stored=data,
    )
    for member_doc in doc.get("members", []):
        group.update_member(member_from_json(member_doc))
    return group


def _topic_to_json(entry: tuple[Any, ...]) -> list[Any]:
    """A subscribed topic's name, id and partition count, and for a consumer group the
    racks by partition."""
    name, topic_id, partitions, *racks = entry
    out: list[Any] = [name, str(topic_id), partitions]
    for by_partition in racks:
        out.append([[p, sorted(r)] for p, r in by_partition])
    return out


def _topic_from_json(doc: list[Any]) -> tuple[Any, ...]:
    name, topic_id, partitions, *racks = doc
    by_partitions = (
        tuple((int(p), frozenset(r)) for p, r in by_partition) for by_partition in racks
    )
    return (str(name), uuid.UUID(topic_id), int(partitions), *by_partitions)


class StoredGroups:
    """The stored state of the modern groups registered in ``groups``, for the consumer
    and share protocols alike; ``store`` None keeps nothing."""

    def __init__(self, store: ConsumerGroupStore | None, groups: GroupRegistry) -> None:
        self._store = store
        self._groups = groups

    def read(self, group_id: str) -> StoredGroup | None:
        """The group as stored (a coordinator taking it over), not yet registered; None if
        none is stored. COORDINATOR_LOAD_IN_PROGRESS when the store cannot be read."""
        if self._store is None:
            return None
        try:
            found = self._store.read_consumer_group(group_id)
        except StoreError as exc:
            raise KafkaError(
                ErrorCode.coordinator_load_in_progress, f"group state unreadable: {exc}"
            ) from exc
        return decode_group(group_id, *found) if found is not None else None

    def group_ids(self) -> list[str]:
        """Every group with stored state ([] when the store cannot say)."""
        if self._store is None:
            return []
        try:
            return self._store.consumer_group_ids()
        except StoreError as exc:
            log.warning("stored groups not listed", reason=str(exc))
            return []

    def persist(self, group: _G, shutdown: Callable[[_G], None]) -> None:
        """Store the group's state if it changed (the caller holds its lock).
        NOT_COORDINATOR when another coordinator wrote it since (this copy is dropped, its
        timers stopped by ``shutdown``); COORDINATOR_NOT_AVAILABLE when the store fails."""
        if self._store is None:
            return
        data = encode_group(group)
        if data == group.stored:
            return
        try:
            group.store_version = self._store.write_consumer_group(
                group.group_id, data, group.store_version
            )
        except (BadVersionError, NodeExistsError) as exc:
            shutdown(group)
            group.mark_dead()
            self._groups.remove(group)
            raise KafkaError(
                ErrorCode.not_coordinator, "another coordinator wrote the group's state"
            ) from exc
        except StoreError as exc:
            raise KafkaError(
                ErrorCode.coordinator_not_available,
                f"{group.group_type.value} group state not stored: {exc}",
            ) from exc
        group.stored = data

    def forget(self, group: StoredGroup) -> None:
        """The group was deleted: its stored state goes too."""
        if self._store is not None:
            self._store.delete_consumer_group(group.group_id)
