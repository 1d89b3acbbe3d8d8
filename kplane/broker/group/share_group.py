"""ShareGroup: the state of one KIP-932 share group, as Kafka's coordinator keeps it.

Membership is KIP-848's (a group epoch, a target assignment computed for it, a member epoch
per member), but partitions are shared: several members may be assigned one partition, so
a member takes its target at once, with nothing to revoke first. The membership is stored
as a consumer group's is (:mod:`kplane.broker.group.consumer_group_store`). Share groups
commit no offsets; their progress is the share-partition state kept beside each partition
leader (:mod:`kplane.broker.share`). Plain data; the caller holds ``lock``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kplane.broker.group.consumer_group import assignment_from_json, assignment_to_json
from kplane.broker.group.group import GroupOverview, GroupType, OffsetExpiration
from kplane.broker.group.modern_group import Assignment, ModernGroup, ModernGroupDescription
from kplane.protocol.errors import ErrorCode

SHARE_PROTOCOL_TYPE = "share"


class ShareGroupState(enum.Enum):
    """The group's state; the value is the name Kafka reports."""

    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class ShareGroupMember:
    """One member; replaced whole on every change."""

    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = 0
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    assigned: Assignment = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """What is stored of the member (Kafka's ShareGroupMemberMetadata and
        ShareGroupCurrentMemberAssignment records)."""
        return {
            "member_id": self.member_id,
            "member_epoch": self.member_epoch,
            "previous_member_epoch": self.previous_member_epoch,
            "rack_id": self.rack_id,
            "client_id": self.client_id,
            "client_host": self.client_host,
            "subscribed_topic_names": list(self.subscribed_topic_names),
            "assigned": assignment_to_json(self.assigned),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ShareGroupMember:
        return cls(
            member_id=str(doc["member_id"]),
            member_epoch=int(doc["member_epoch"]),
            previous_member_epoch=int(doc["previous_member_epoch"]),
            rack_id=doc.get("rack_id"),
            client_id=str(doc.get("client_id", "")),
            client_host=str(doc.get("client_host", "")),
            subscribed_topic_names=tuple(str(n) for n in doc.get("subscribed_topic_names", ())),
            assigned=assignment_from_json(doc.get("assigned", {})),
        )


@dataclass(frozen=True, slots=True)
class ShareGroupDescription(ModernGroupDescription[ShareGroupMember]):
    """ShareGroupDescribe's view of a group."""


@dataclass(eq=False)
class ShareGroup(ModernGroup[ShareGroupMember]):
    """A share group: members, epochs and the target assignment."""

    timers: dict[str, Any] = field(default_factory=dict, repr=False)
    """member id -> the member's session timer task."""

    @property
    def state(self) -> ShareGroupState:
        if self.dead:
            return ShareGroupState.DEAD
        return ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY

    def update_member(self, member: ShareGroupMember) -> None:
        self.members[member.member_id] = member

    def describe(self) -> ShareGroupDescription:
        return ShareGroupDescription(
            self.group_id,
            state=self.state.value,
            group_epoch=self.group_epoch,
            assignment_epoch=self.assignment_epoch,
            assignor_name=self.assignor_name,
            members=tuple(self.members.values()),
        )

    def subscribed_topics(self) -> frozenset[str]:
        return frozenset(n for m in self.members.values() for n in m.subscribed_topic_names)

    # -- Group ----------------------------------------------------------------------------

    @property
    def group_type(self) -> GroupType:
        return GroupType.SHARE

    def validate_offset_commit(
        self,
        member_id: str,
        group_instance_id: str | None,
        generation_or_member_epoch: int,
        transactional: bool,
        api_version: int | None = None,
    ) -> ErrorCode | None:
        """A share group commits no offsets (Kafka: GROUP_ID_NOT_FOUND for its id)."""
        return ErrorCode.group_id_not_found

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> ErrorCode | None:
        return ErrorCode.group_id_not_found

    def validate_offset_delete(self) -> ErrorCode | None:
        return ErrorCode.group_id_not_found

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return topic in self.subscribed_topics()

    def offset_expiration(self) -> OffsetExpiration | None:
        return None

    def overview(self) -> GroupOverview:
        return GroupOverview(
            self.group_id, SHARE_PROTOCOL_TYPE, self.state_name, GroupType.SHARE.value
        )
