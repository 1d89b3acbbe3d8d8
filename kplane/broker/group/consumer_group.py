"""ConsumerGroup: the state of one KIP-848 consumer group, as Kafka's coordinator keeps it.

The group epoch counts changes of the group (members, subscriptions, the topics they
resolve to); the target assignment is computed for one group epoch (the assignment epoch);
each member reconciles towards it at its own member epoch. A partition is held by at most
one member at a time: ``partition_epochs`` names the epoch of the member that has it
assigned or still has to revoke it. Plain data; the caller holds ``lock``.
"""

from __future__ import annotations

import base64
import enum
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kplane.broker.group.group import GroupOverview, GroupType, OffsetExpiration
from kplane.broker.group.modern_group import Assignment, ModernGroup, ModernGroupDescription
from kplane.protocol.errors import ErrorCode

LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
CONSUMER_PROTOCOL_TYPE = "consumer"


class MemberState(enum.Enum):
    """Where a member is in its reconciliation (Kafka's MemberState)."""

    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


class ConsumerGroupState(enum.Enum):
    """The group's state; the value is the name Kafka reports."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


def assignment_of(
    pairs: Iterable[tuple[uuid.UUID, Iterable[int]]],
) -> dict[uuid.UUID, frozenset[int]]:
    """An assignment from (topic id, partitions) pairs, without empty topics."""
    out: dict[uuid.UUID, frozenset[int]] = {}
    for topic_id, partitions in pairs:
        merged = out.get(topic_id, frozenset()) | frozenset(int(p) for p in partitions)
        if merged:
            out[topic_id] = merged
    return out


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """What a member that speaks the classic protocol in a consumer group gave in its
    JoinGroup (KIP-848's online migration): its session timeout and its protocols (name,
    embedded ConsumerProtocolSubscription), in its order of preference."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "session_timeout_ms": self.session_timeout_ms,
            "protocols": [[name, base64.b64encode(data).decode()] for name, data in self.protocols],
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ClassicMemberMetadata:
        return cls(
            int(doc["session_timeout_ms"]),
            tuple((str(name), base64.b64decode(data)) for name, data in doc["protocols"]),
        )


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    """One member; replaced whole on every change (Kafka's immutable member). ``classic``
    is set for a member that speaks the classic protocol (JoinGroup, SyncGroup, Heartbeat)."""

    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    classic: ClassicMemberMetadata | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "classic": self.classic.to_json() if self.classic is not None else None,
            "member_id": self.member_id,
            "member_epoch": self.member_epoch,
            "previous_member_epoch": self.previous_member_epoch,
            "state": self.state.value,
            "instance_id": self.instance_id,
            "rack_id": self.rack_id,
            "client_id": self.client_id,
            "client_host": self.client_host,
            "rebalance_timeout_ms": self.rebalance_timeout_ms,
            "subscribed_topic_names": list(self.subscribed_topic_names),
            "subscribed_topic_regex": self.subscribed_topic_regex,
            "server_assignor": self.server_assignor,
            "assigned": assignment_to_json(self.assigned),
            "pending_revocation": assignment_to_json(self.pending_revocation),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ConsumerGroupMember:
        return cls(
            member_id=str(doc["member_id"]),
            member_epoch=int(doc["member_epoch"]),
            previous_member_epoch=int(doc["previous_member_epoch"]),
            state=MemberState(doc["state"]),
            instance_id=doc.get("instance_id"),
            rack_id=doc.get("rack_id"),
            client_id=str(doc.get("client_id", "")),
            client_host=str(doc.get("client_host", "")),
            rebalance_timeout_ms=int(doc.get("rebalance_timeout_ms", -1)),
            subscribed_topic_names=tuple(doc.get("subscribed_topic_names", ())),
            subscribed_topic_regex=doc.get("subscribed_topic_regex"),
            server_assignor=doc.get("server_assignor"),
            assigned=assignment_from_json(doc.get("assigned", {})),
            pending_revocation=assignment_from_json(doc.get("pending_revocation", {})),
            classic=(
                ClassicMemberMetadata.from_json(doc["classic"]) if doc.get("classic") else None
            ),
        )


def assignment_to_json(assignment: Assignment) -> dict[str, list[int]]:
    return {str(topic_id): sorted(parts) for topic_id, parts in assignment.items()}


def assignment_from_json(doc: Mapping[str, Iterable[int]]) -> dict[uuid.UUID, frozenset[int]]:
    return assignment_of((uuid.UUID(topic_id), parts) for topic_id, parts in doc.items())


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescription(ModernGroupDescription[tuple[ConsumerGroupMember, Assignment]]):
    """ConsumerGroupDescribe's view of a group: each member with its target assignment."""


@dataclass(eq=False)
class ConsumerGroup(ModernGroup[ConsumerGroupMember]):
    """A consumer group: members, epochs, the target assignment and committed offsets.
    Its subscription fingerprint holds the topics' names, ids, partitions and racks."""

    static_members: dict[str, str] = field(default_factory=dict)
    partition_epochs: dict[tuple[uuid.UUID, int], int] = field(default_factory=dict)
    timers: dict[tuple[str, str], Any] = field(default_factory=dict, repr=False)
    """(kind, member id) -> the member's session or revocation timer task."""

    # -- members ------------------------------------------------------------------------

    def update_member(self, member: ConsumerGroupMember) -> None:
        """Add or replace ``member`` (keeping the partition epochs and static ids true)."""
        old = self.members.get(member.member_id)
        if old is not None:
            self._release(old)
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        for assignment in (member.assigned, member.pending_revocation):
            for topic_id, partitions in assignment.items():
                for p in partitions:
                    self.partition_epochs[(topic_id, p)] = member.member_epoch

    def remove_member(self, member_id: str) -> ConsumerGroupMember | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self._release(member)
            if member.instance_id is not None and (
                self.static_members.get(member.instance_id) == member_id
            ):
                del self.static_members[member.instance_id]
        self.target.pop(member_id, None)
        return member

    def _release(self, member: ConsumerGroupMember) -> None:
        for assignment in (member.assigned, member.pending_revocation):
            for topic_id, partitions in assignment.items():
                for p in partitions:
                    self.partition_epochs.pop((topic_id, p), None)

    def static_member(self, instance_id: str) -> ConsumerGroupMember | None:
        member_id = self.static_members.get(instance_id)
        return self.members.get(member_id) if member_id is not None else None

    def current_partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        """The epoch of the member holding the partition, -1 when none does."""
        return self.partition_epochs.get((topic_id, partition), -1)

    # -- state --------------------------------------------------------------------------

    @property
    def state(self) -> ConsumerGroupState:
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch != self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(
            m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE
            for m in self.members.values()
        ):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def describe(self) -> ConsumerGroupDescription:
        return ConsumerGroupDescription(
            self.group_id,
            state=self.state.value,
            group_epoch=self.group_epoch,
            assignment_epoch=self.assignment_epoch,
            assignor_name=self.assignor_name,
            members=tuple((m, self.target.get(m.member_id, {})) for m in self.members.values()),
        )

    # -- Group ----------------------------------------------------------------------------

    @property
    def group_type(self) -> GroupType:
        return GroupType.CONSUMER

    def _validate_member_epoch(self, member_id: str, member_epoch: int) -> ErrorCode | None:
        """A classic member names its generation (ILLEGAL_GENERATION when it is not the
        member's epoch), a consumer-protocol member its epoch (STALE_MEMBER_EPOCH)."""
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if member_epoch != member.member_epoch:
            if member.classic is not None:
                return ErrorCode.illegal_generation
            return ErrorCode.stale_member_epoch
        return None

    def waiting_on_unreleased_partition(self, member: ConsumerGroupMember) -> bool:
        """Whether a partition of the member's target is still held by another member."""
        for topic_id, parts in self.target.get(member.member_id, {}).items():
            mine = member.assigned.get(topic_id, frozenset())
            if any(self.current_partition_epoch(topic_id, p) != -1 for p in parts - mine):
                return True
        return False

    def validate_offset_commit(
        self,
        member_id: str,
        group_instance_id: str | None,
        generation_or_member_epoch: int,
        transactional: bool,
        api_version: int | None = None,
    ) -> ErrorCode | None:
        """An epoch below zero commits for an empty group (an admin, a standalone consumer);
        a member names its current epoch."""
        if self.dead:
            return ErrorCode.coordinator_not_available
        if generation_or_member_epoch < 0 and not self.members:
            return None
        member = self.members.get(member_id)
        if (
            member is not None
            and member.classic is None
            and not transactional
            and api_version is not None
            and api_version < 9
        ):
            return ErrorCode.unsupported_version  # members name their epoch from v9 on
        return self._validate_member_epoch(member_id, generation_or_member_epoch)

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> ErrorCode | None:
        if member_id is None and member_epoch < 0:
            return None
        return self._validate_member_epoch(member_id or "", member_epoch)

    def validate_offset_delete(self) -> ErrorCode | None:
        return ErrorCode.group_id_not_found if self.dead else None

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return topic in self.subscription_fingerprint_topics()

    def subscription_fingerprint_topics(self) -> frozenset[str]:
        """The topic names the members' subscriptions resolved to at the last group epoch."""
        return frozenset(entry[0] for entry in self.subscription_fingerprint)

    def offset_expiration(self) -> OffsetExpiration | None:
        return OffsetExpiration(
            lambda om: om.commit_timestamp_ms, self.subscription_fingerprint_topics()
        )

    def overview(self) -> GroupOverview:
        return GroupOverview(
            self.group_id, CONSUMER_PROTOCOL_TYPE, self.state_name, GroupType.CONSUMER.value
        )
