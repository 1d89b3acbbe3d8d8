"""What every group type shares (Kafka's ``Group`` interface): an id, a lock, committed
offsets, and the checks the coordinator asks of a group before it commits, fetches or
deletes offsets or deletes the group. Each type (classic, consumer, share) implements them in
its own module.
"""

from __future__ import annotations

import abc
import enum
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from kplane.protocol.errors import ErrorCode


class GroupType(enum.Enum):
    """A group's type; the value is the name ListGroups v5 and DescribeGroups report."""

    CLASSIC = "classic"
    CONSUMER = "consumer"
    SHARE = "share"


class TopicPartition(NamedTuple):
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed offset. ``expire_timestamp_ms`` is set only by OffsetCommit v2-v4 retention."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp_ms: int = 0
    expire_timestamp_ms: int | None = None


@dataclass(frozen=True, slots=True)
class GroupOverview:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = GroupType.CLASSIC.value


def now_ms() -> int:
    return int(time.time() * 1000)


OffsetsByPartition = dict[TopicPartition, OffsetAndMetadata]


@dataclass(frozen=True, slots=True)
class OffsetExpiration:
    """From when a committed offset's retention runs, and the topics whose offsets are kept
    whatever their age (those the group consumes)."""

    base: Callable[[OffsetAndMetadata], int]
    kept_topics: frozenset[str] = frozenset()


class Group(abc.ABC):
    """One group of any type. Callers hold ``lock`` around every read and write."""

    group_id: str
    lock: threading.RLock
    offsets: OffsetsByPartition
    pending_txn_offsets: dict[int, OffsetsByPartition]
    """Offsets committed in transactions not yet completed, by producer id (KIP-98)."""
    state_timestamp_ms: int | None

    @property
    @abc.abstractmethod
    def group_type(self) -> GroupType: ...

    @property
    @abc.abstractmethod
    def state_name(self) -> str:
        """The state as Kafka names it (ListGroups, DescribeGroups)."""

    @property
    @abc.abstractmethod
    def is_dead(self) -> bool: ...

    @property
    @abc.abstractmethod
    def is_empty(self) -> bool:
        """No members, nor members on their way in."""

    @abc.abstractmethod
    def mark_dead(self) -> None:
        """The group is being removed (deleted, or expired with no offsets)."""

    @abc.abstractmethod
    def validate_offset_commit(
        self,
        member_id: str,
        group_instance_id: str | None,
        generation_or_member_epoch: int,
        transactional: bool,
        api_version: int | None = None,
    ) -> ErrorCode | None:
        """Whether this member may commit (None: it may); ``api_version`` is OffsetCommit's
        (None: not from an OffsetCommit)."""

    @abc.abstractmethod
    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> ErrorCode | None:
        """Whether this member may fetch (OffsetFetch v9+ names one; None: anyone may)."""

    @abc.abstractmethod
    def validate_offset_delete(self) -> ErrorCode | None:
        """Whether offsets may be deleted now (topics still subscribed to are checked apart)."""

    @abc.abstractmethod
    def validate_delete_group(self) -> ErrorCode | None: ...

    @abc.abstractmethod
    def is_subscribed_to_topic(self, topic: str) -> bool: ...

    @abc.abstractmethod
    def offset_expiration(self) -> OffsetExpiration | None:
        """How committed offsets expire now (None: they do not)."""

    @abc.abstractmethod
    def overview(self) -> GroupOverview: ...
