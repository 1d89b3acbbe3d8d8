"""ClassicGroup: the state of one classic consumer group, as Kafka's coordinator keeps it.

Plain data and state transitions only: no timers, no callbacks run here. The coordinator
holds ``group.lock`` around every read and write, takes the parked join/sync callbacks out
with ``take_join_callback`` / ``take_sync_callback`` and runs them after releasing the lock.
"""

from __future__ import annotations

import enum
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from kplane.broker.group.embedded_protocol import MalformedProtocol, decode_subscription
from kplane.broker.group.group import (
    Group,
    GroupOverview,
    GroupType,
    OffsetExpiration,
    OffsetsByPartition,
    now_ms,
)
from kplane.protocol.errors import ErrorCode

log = structlog.get_logger(__name__)

CONSUMER_PROTOCOL_TYPE = "consumer"
NO_PROTOCOL = ""
NO_LEADER = ""
UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1


class ClassicGroupState(enum.Enum):
    """The five states of a classic group; the value is the name Kafka reports."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS: dict[ClassicGroupState, frozenset[ClassicGroupState]] = {
    ClassicGroupState.EMPTY: frozenset({ClassicGroupState.PREPARING_REBALANCE}),
    ClassicGroupState.PREPARING_REBALANCE: frozenset(
        {ClassicGroupState.STABLE, ClassicGroupState.COMPLETING_REBALANCE, ClassicGroupState.EMPTY}
    ),
    ClassicGroupState.COMPLETING_REBALANCE: frozenset({ClassicGroupState.PREPARING_REBALANCE}),
    ClassicGroupState.STABLE: frozenset({ClassicGroupState.COMPLETING_REBALANCE}),
    ClassicGroupState.DEAD: frozenset(
        {
            ClassicGroupState.STABLE,
            ClassicGroupState.PREPARING_REBALANCE,
            ClassicGroupState.COMPLETING_REBALANCE,
            ClassicGroupState.EMPTY,
            ClassicGroupState.DEAD,
        }
    ),
}


@dataclass(frozen=True, slots=True)
class JoinGroupMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResult:
    """What a JoinGroup answers; ``members`` is non-empty for the leader only."""

    member_id: str
    error: ErrorCode = ErrorCode.none
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = NO_LEADER
    skip_assignment: bool = False
    members: tuple[JoinGroupMember, ...] = ()


@dataclass(frozen=True, slots=True)
class SyncGroupResult:
    error: ErrorCode = ErrorCode.none
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


JoinCallback = Callable[[JoinGroupResult], None]
SyncCallback = Callable[[SyncGroupResult], None]


@dataclass(eq=False)
class ClassicGroupMember:
    """One member of a group. ``protocols`` keeps the member's order of preference."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    awaiting_join: JoinCallback | None = None
    awaiting_sync: SyncCallback | None = None
    is_new: bool = False
    # Session timer bookkeeping (owned by the coordinator).
    heartbeat_task: Any = None
    heartbeat_epoch: int = 0

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.awaiting_join is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.awaiting_sync is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        raise ValueError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: Sequence[tuple[str, bytes]]) -> bool:
        """Same protocols with the same metadata, in the same order."""
        return list(protocols) == self.protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among ``candidates``."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """DescribeGroups' view of a group (metadata and assignments only when Stable)."""

    group_id: str
    state: str
    protocol_type: str
    protocol_data: str
    members: tuple[MemberDescription, ...] = ()
    error: ErrorCode = ErrorCode.none
    error_message: str | None = None


def parse_subscribed_topics(metadata: bytes) -> set[str] | None:
    """Topics of a ConsumerProtocolSubscription (any version), or None if it does not parse."""
    try:
        return set(decode_subscription(metadata).topics)
    except MalformedProtocol:
        return None


@dataclass(eq=False)
class ClassicGroup(Group):
    """A classic group: members, generation, selected protocol, leader and offsets."""

    group_id: str
    state: ClassicGroupState = ClassicGroupState.EMPTY
    state_timestamp_ms: int | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    members: dict[str, ClassicGroupMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    pending_members: set[str] = field(default_factory=set)
    pending_sync_members: set[str] = field(default_factory=set)
    num_members_awaiting_join: int = 0
    new_member_added: bool = False
    offsets: OffsetsByPartition = field(default_factory=dict)
    pending_txn_offsets: dict[int, OffsetsByPartition] = field(default_factory=dict)
    subscribed_topics: set[str] | None = None
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    # Timer bookkeeping owned by the coordinator.
    pending_member_tasks: dict[str, Any] = field(default_factory=dict, repr=False)
    sync_task: Any = field(default=None, repr=False)
    _supported_protocols: Counter[str] = field(default_factory=Counter, repr=False)

    # -- state --------------------------------------------------------------------------

    def is_(self, state: ClassicGroupState) -> bool:
        return self.state is state

    def transition_to(self, state: ClassicGroupState) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise RuntimeError(
                f"group {self.group_id}: cannot move from {self.state.value} to {state.value}"
            )
        self.state = state
        self.state_timestamp_ms = now_ms()

    @property
    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[ClassicGroupState.PREPARING_REBALANCE]

    # -- membership ---------------------------------------------------------------------

    @property
    def size(self) -> int:
        return len(self.members)

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def get(self, member_id: str) -> ClassicGroupMember:
        return self.members[member_id]

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_members

    def current_static_member_id(self, group_instance_id: str) -> str | None:
        return self.static_members.get(group_instance_id)

    @staticmethod
    def generate_member_id(client_id: str, group_instance_id: str | None) -> str:
        prefix = group_instance_id if group_instance_id is not None else client_id
        return f"{prefix}-{uuid.uuid4()}"

    def add(self, member: ClassicGroupMember, callback: JoinCallback | None = None) -> None:
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self._supported_protocols.update(set(member.protocol_names()))
        member.awaiting_join = callback
        if callback is not None:
            self.num_members_awaiting_join += 1
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> ClassicGroupMember | None:
        """Drop a member (or a pending member); parked callbacks are the caller's to answer."""
        member = self.members.pop(member_id, None)
        if member is not None:
            self._supported_protocols.subtract(set(member.protocol_names()))
            self._supported_protocols += Counter()  # drop zero counts
            if member.is_awaiting_join:
                self.num_members_awaiting_join -= 1
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        self.pending_sync_members.discard(member_id)
        return member

    def update_member(
        self,
        member: ClassicGroupMember,
        protocols: Sequence[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        callback: JoinCallback | None,
    ) -> JoinCallback | None:
        """Update a member's protocols and park its join; returns a replaced parked callback."""
        self._supported_protocols.subtract(set(member.protocol_names()))
        member.protocols = list(protocols)
        self._supported_protocols.update(set(member.protocol_names()))
        self._supported_protocols += Counter()
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        previous = member.awaiting_join
        if callback is not None and previous is None:
            self.num_members_awaiting_join += 1
        elif callback is None and previous is not None:
            self.num_members_awaiting_join -= 1
        member.awaiting_join = callback
        return previous

    def take_join_callback(self, member: ClassicGroupMember) -> JoinCallback | None:
        """Clear the member's parked JoinGroup and return its callback (None if not parked)."""
        callback = member.awaiting_join
        if callback is not None:
            member.awaiting_join = None
            self.num_members_awaiting_join -= 1
        return callback

    def take_sync_callback(self, member: ClassicGroupMember) -> SyncCallback | None:
        callback = member.awaiting_sync
        member.awaiting_sync = None
        return callback

    def replace_static_member(
        self, group_instance_id: str, old_member_id: str, new_member_id: str
    ) -> tuple[ClassicGroupMember, JoinCallback | None, SyncCallback | None]:
        """Give a static member a new member id; returns it and the old id's parked callbacks."""
        member = self.members.pop(old_member_id)
        join_cb = self.take_join_callback(member)
        sync_cb = self.take_sync_callback(member)
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        self.static_members[group_instance_id] = new_member_id
        if old_member_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_member_id)
            self.pending_sync_members.add(new_member_id)
        return member, join_cb, sync_cb

    def all_members(self) -> list[ClassicGroupMember]:
        return list(self.members.values())

    @property
    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_members_awaiting_join and not self.pending_members

    def not_yet_rejoined_members(self) -> list[ClassicGroupMember]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep a leader that rejoined, or pick any member that did; False if none did."""
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.is_awaiting_join:
            return True
        for member_id, member in self.members.items():
            if member.is_awaiting_join:
                self.leader_id = member_id
                return True
        return False

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- protocols ----------------------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, count in self._supported_protocols.items() if count == n}

    def supports_protocols(self, protocol_type: str, protocols: Iterable[str]) -> bool:
        names = set(protocols)
        if self.is_(ClassicGroupState.EMPTY):
            return bool(protocol_type) and bool(names)
        n = len(self.members)
        return self.protocol_type == protocol_type and any(
            self._supported_protocols.get(name, 0) == n for name in names
        )

    def select_protocol(self) -> str:
        """The protocol all members support that gets the most first-choice votes."""
        if not self.members:
            raise RuntimeError(f"cannot select a protocol for empty group {self.group_id}")
        candidates = self.candidate_protocols()
        votes = Counter(m.vote(candidates) for m in self.members.values())
        best = max(votes.values())
        # Ties go to the protocol voted first, so the choice does not depend on hashing.
        for member in self.members.values():
            choice = member.vote(candidates)
            if votes[choice] == best:
                return choice
        raise AssertionError("unreachable")

    def init_next_generation(self) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(ClassicGroupState.COMPLETING_REBALANCE)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(ClassicGroupState.EMPTY)
        self.pending_sync_members.clear()

    def compute_subscribed_topics(self) -> set[str] | None:
        """The topics the members' subscriptions name (None: some cannot be read)."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None if self.members else set()
        topics: set[str] = set()
        for member in self.members.values():
            parsed = parse_subscribed_topics(member.metadata(self.protocol_name))
            if parsed is None:
                return None
            topics |= parsed
        return topics

    def is_subscribed_to_topic(self, topic: str) -> bool:
        if self.subscribed_topics is None:
            return True
        return topic in self.subscribed_topics

    def current_member_metadata(self) -> tuple[JoinGroupMember, ...]:
        if self.protocol_name is None:
            raise RuntimeError(f"no protocol selected for group {self.group_id}")
        protocol = self.protocol_name
        return tuple(
            JoinGroupMember(m.member_id, m.group_instance_id, m.metadata(protocol))
            for m in self.members.values()
        )

    # -- views --------------------------------------------------------------------------

    def describe(self) -> GroupDescription:
        stable = self.is_(ClassicGroupState.STABLE) and self.protocol_name is not None
        members = tuple(
            MemberDescription(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                metadata=m.metadata(self.protocol_name) if stable and self.protocol_name else b"",
                assignment=m.assignment if stable else b"",
            )
            for m in self.members.values()
        )
        return GroupDescription(
            group_id=self.group_id,
            state=self.state.value,
            protocol_type=self.protocol_type or "",
            protocol_data=(self.protocol_name or NO_PROTOCOL) if stable else NO_PROTOCOL,
            members=members,
        )

    def overview(self) -> GroupOverview:
        return GroupOverview(self.group_id, self.protocol_type or "", self.state.value)

    # -- Group ----------------------------------------------------------------------------

    @property
    def group_type(self) -> GroupType:
        return GroupType.CLASSIC

    @property
    def state_name(self) -> str:
        return self.state.value

    @property
    def is_dead(self) -> bool:
        return self.state is ClassicGroupState.DEAD

    @property
    def is_empty(self) -> bool:
        return (
            self.state is ClassicGroupState.EMPTY and not self.members and not self.pending_members
        )

    def mark_dead(self) -> None:
        self.transition_to(ClassicGroupState.DEAD)

    def validate_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode | None:
        """UNKNOWN_MEMBER_ID or FENCED_INSTANCE_ID unless ``member_id`` is the current member
        (of ``group_instance_id``, for a static member)."""
        if group_instance_id is not None:
            current = self.current_static_member_id(group_instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            if current != member_id:
                log.info(
                    "fenced static member",
                    group=self.group_id,
                    group_instance_id=group_instance_id,
                    member=member_id,
                    current_member=current,
                )
                return ErrorCode.fenced_instance_id
            return None
        if not self.has(member_id):
            return ErrorCode.unknown_member_id
        return None

    def validate_offset_commit(
        self,
        member_id: str,
        group_instance_id: str | None,
        generation_or_member_epoch: int,
        transactional: bool,
        api_version: int | None = None,
    ) -> ErrorCode | None:
        """Generation -1 with no member id is a standalone commit, allowed while the group
        has no members (and always for a transaction, KIP-447)."""
        if self.is_dead:
            return ErrorCode.coordinator_not_available
        if (
            generation_or_member_epoch >= 0
            or member_id != UNKNOWN_MEMBER_ID
            or (group_instance_id is not None and not transactional)
        ):
            error = self.validate_member(member_id, group_instance_id)
            if error is None and generation_or_member_epoch != self.generation_id:
                error = ErrorCode.illegal_generation
            if (
                error is None
                and not transactional
                and self.is_(ClassicGroupState.COMPLETING_REBALANCE)
            ):
                error = ErrorCode.rebalance_in_progress
            return error
        if not transactional and not self.is_(ClassicGroupState.EMPTY):
            return ErrorCode.unknown_member_id  # only members commit for a group with members
        return None

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> ErrorCode | None:
        return None

    def validate_offset_delete(self) -> ErrorCode | None:
        if self.is_dead:
            return ErrorCode.group_id_not_found
        if not self.is_(ClassicGroupState.EMPTY) and self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return ErrorCode.non_empty_group
        return None

    def validate_delete_group(self) -> ErrorCode | None:
        if self.is_dead:
            return ErrorCode.group_id_not_found
        if not self.is_(ClassicGroupState.EMPTY):
            return ErrorCode.non_empty_group
        return None

    def offset_expiration(self) -> OffsetExpiration | None:
        if not self.protocol_type:
            return OffsetExpiration(lambda om: om.commit_timestamp_ms)
        if self.is_(ClassicGroupState.EMPTY):
            state_ts = self.state_timestamp_ms
            return OffsetExpiration(
                lambda om: state_ts if state_ts is not None else om.commit_timestamp_ms
            )
        if (
            self.protocol_type == CONSUMER_PROTOCOL_TYPE
            and self.subscribed_topics is not None
            and self.is_(ClassicGroupState.STABLE)
        ):
            return OffsetExpiration(
                lambda om: om.commit_timestamp_ms, frozenset(self.subscribed_topics)
            )
        return None
