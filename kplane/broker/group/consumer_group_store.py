"""A consumer group's state in the metadata store, so that it survives a restart and a
coordinator move: one document per group (members with their epochs and assignments, the
group and assignment epochs, the target assignment, what the subscriptions resolved to),
written conditionally on the version read, so a coordinator holding an older copy is
fenced instead of overwriting a newer one. Offsets stay where the OffsetManager keeps them.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Protocol

import structlog

from kplane.broker.group.consumer_group import (
    ConsumerGroup,
    ConsumerGroupMember,
    assignment_from_json,
    assignment_to_json,
)

log = structlog.get_logger(__name__)


class ConsumerGroupStore(Protocol):
    """Where consumer groups are durable (KafkaMetadataClient's consumer-group methods)."""

    def read_consumer_group(self, group_id: str) -> tuple[bytes, int] | None: ...

    def write_consumer_group(self, group_id: str, data: bytes, version: int) -> int: ...

    def delete_consumer_group(self, group_id: str) -> None: ...

    def consumer_group_ids(self) -> list[str]: ...


def encode_group(group: ConsumerGroup) -> bytes:
    """The group's document (the caller holds its lock)."""
    doc: dict[str, Any] = {
        "version": 1,
        "group_epoch": group.group_epoch,
        "assignment_epoch": group.assignment_epoch,
        "assignor": group.assignor_name,
        "members": [m.to_json() for m in group.members.values()],
        "target": {m: assignment_to_json(a) for m, a in group.target.items()},
        "subscribed": [
            [name, str(topic_id), partitions, [[p, sorted(r)] for p, r in racks]]
            for name, topic_id, partitions, racks in group.subscription_fingerprint
        ],
    }
    return json.dumps(doc, sort_keys=True).encode()


def decode_group(group_id: str, data: bytes, version: int) -> ConsumerGroup | None:
    """A group from its document; None when it does not parse (logged)."""
    try:
        doc = json.loads(data)
        group = ConsumerGroup(
            group_id,
            group_epoch=int(doc["group_epoch"]),
            assignment_epoch=int(doc["assignment_epoch"]),
            assignor_name=str(doc.get("assignor", "")),
            target={m: assignment_from_json(a) for m, a in doc.get("target", {}).items()},
            subscription_fingerprint=tuple(
                (
                    str(name),
                    uuid.UUID(topic_id),
                    int(partitions),
                    tuple((int(p), frozenset(r)) for p, r in racks),
                )
                for name, topic_id, partitions, racks in doc.get("subscribed", [])
            ),
            store_version=version,
            stored=data,
        )
        for member_doc in doc.get("members", []):
            group.update_member(ConsumerGroupMember.from_json(member_doc))
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("stored consumer group ignored", group=group_id, reason=str(exc))
        return None
    return group
