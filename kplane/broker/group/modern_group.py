"""ModernGroup: what KIP-848's consumer groups and KIP-932's share groups share (Kafka's
``ModernGroup``): a group epoch counting changes of the group, a target assignment computed
for one group epoch (the assignment epoch), members each at its own member epoch, and the
fingerprint of what the subscribed topics resolved to, and the version of the stored
document the copy was read from or last wrote
(:mod:`kplane.broker.group.consumer_group_store`, one mechanism for both types). Plain data;
the caller holds ``lock``.
"""

from __future__ import annotations

import abc
import enum
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import structlog

from kplane.broker.group.group import Group, OffsetsByPartition
from kplane.protocol.errors import ErrorCode

log = structlog.get_logger(__name__)

Assignment = Mapping[uuid.UUID, frozenset[int]]
"""Partitions by topic id."""

LEAVE_GROUP_MEMBER_EPOCH = -1

MemberT = TypeVar("MemberT")
DescribedMemberT = TypeVar("DescribedMemberT")


@dataclass(frozen=True, slots=True)
class ModernGroupDescription(Generic[DescribedMemberT]):
    """ConsumerGroupDescribe's or ShareGroupDescribe's view of a group."""

    group_id: str
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    state: str = "Dead"
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[DescribedMemberT, ...] = ()


@dataclass(eq=False)
class ModernGroup(Group, Generic[MemberT]):
    """A group whose members heartbeat at a member epoch towards a target assignment."""

    group_id: str
    state_timestamp_ms: int | None = None
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, MemberT] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    subscription_fingerprint: tuple[Any, ...] = ()
    """What the subscribed topics resolved to at the last group epoch: a change bumps the
    group epoch."""
    assignor_name: str = ""
    offsets: OffsetsByPartition = field(default_factory=dict)
    pending_txn_offsets: dict[int, OffsetsByPartition] = field(default_factory=dict)
    dead: bool = False
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    store_version: int = -1
    """The version of the stored document this copy was read from or last wrote (-1: none)."""
    stored: bytes | None = field(default=None, repr=False)
    """That document, so a heartbeat that changed nothing writes nothing."""

    @property
    @abc.abstractmethod
    def state(self) -> enum.Enum:
        """The group's state; its value is the name Kafka reports."""

    @abc.abstractmethod
    def update_member(self, member: MemberT) -> None:
        """Add or replace ``member``."""

    def bump_group_epoch(
        self, fingerprint: tuple[Any, ...], member_id: str, joined: bool, changed: bool
    ) -> None:
        """A member's heartbeat was handled: the group epoch goes up (logged) when the
        member ``joined`` or ``changed`` its subscription, or the subscribed topics now
        resolve to another ``fingerprint`` (kept)."""
        if fingerprint != self.subscription_fingerprint:
            self.subscription_fingerprint = fingerprint
            changed = True
        if joined or changed:
            self.group_epoch += 1
            log.info(
                f"{self.group_type.value} group epoch bumped",
                group=self.group_id,
                group_epoch=self.group_epoch,
                member=member_id,
                joined=joined,
            )

    def install_target(self, target: dict[str, Assignment], assignor_name: str) -> None:
        """The target assignment ``assignor_name`` computed for the current group epoch."""
        self.target = target
        self.assignment_epoch = self.group_epoch
        self.assignor_name = assignor_name

    # -- Group ----------------------------------------------------------------------------

    @property
    def state_name(self) -> str:
        return str(self.state.value)

    @property
    def is_dead(self) -> bool:
        return self.dead

    @property
    def is_empty(self) -> bool:
        return not self.members

    def mark_dead(self) -> None:
        self.dead = True

    def validate_delete_group(self) -> ErrorCode | None:
        if self.dead:
            return ErrorCode.group_id_not_found
        return None if not self.members else ErrorCode.non_empty_group
