"""OffsetManager: the groups' committed offsets, as Kafka's GroupMetadataManager keeps them.

The GroupCoordinator validates who may commit or delete (membership, generation, state) and
calls this manager, which stores, fetches, deletes and expires the offsets. They are kept per
group in :class:`~broker.group.group_metadata.GroupMetadata` (``offsets``), in memory: there
is no ``__consumer_offsets`` topic. Methods taking a group expect its lock held, except
``get_offsets``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import structlog

from broker.group.group_metadata import (
    CONSUMER_PROTOCOL_TYPE,
    GroupMetadata,
    GroupState,
    OffsetAndMetadata,
    TopicPartition,
    now_ms,
)
from broker.utils.timer import SystemTimer, TimerTask
from protocol.errors import ErrorCode

log = structlog.get_logger(__name__)

INVALID_OFFSET = -1


@dataclass(frozen=True, slots=True)
class OffsetFetchPartition:
    offset: int = INVALID_OFFSET
    leader_epoch: int = -1
    metadata: str = ""
    error: ErrorCode = ErrorCode.none


@dataclass(frozen=True, slots=True)
class OffsetFetchResult:
    error: ErrorCode
    partitions: dict[TopicPartition, OffsetFetchPartition]


@dataclass(frozen=True, slots=True)
class OffsetDeleteResult:
    error: ErrorCode
    partitions: dict[TopicPartition, ErrorCode]


class OffsetManager:
    """Committed offsets: store, fetch, delete, and expire past ``offsets.retention.ms``
    (checked every ``offsets.retention.check.interval.ms``).

    ``partition_exists(topic, partition)`` tells whether a partition exists; ``groups()``
    lists the coordinator's groups and ``remove_group(group)`` drops one that expiry left
    Empty with no offsets.
    """

    def __init__(
        self,
        timer: SystemTimer,
        partition_exists: Callable[[str, int], bool],
        groups: Callable[[], list[GroupMetadata]],
        remove_group: Callable[[GroupMetadata], None],
        *,
        retention_ms: int,
        retention_check_interval_ms: int,
        metadata_max_bytes: int,
    ) -> None:
        self._timer = timer
        self._partition_exists = partition_exists
        self._groups = groups
        self._remove_group = remove_group
        self._retention_ms = retention_ms
        self._retention_check_interval_ms = retention_check_interval_ms
        self._metadata_max_bytes = metadata_max_bytes
        self._shutdown = False
        self._expiry_task: TimerTask | None = timer.schedule(
            retention_check_interval_ms, self._periodic_offset_expiry
        )

    def shutdown(self) -> None:
        """Stop the periodic expiry."""
        self._shutdown = True
        if self._expiry_task is not None:
            self._expiry_task.cancel()

    def unknown_partitions(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        """UNKNOWN_TOPIC_OR_PARTITION for each of ``partitions`` that does not exist."""
        return {
            tp: ErrorCode.unknown_topic_or_partition
            for tp in partitions
            if not self._partition_exists(tp.topic, tp.partition)
        }

    def store_offsets(
        self,
        group: GroupMetadata,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        retention_ms: int,
    ) -> dict[TopicPartition, ErrorCode]:
        """Store validated commits; metadata over ``offset.metadata.max.bytes`` is refused.
        ``retention_ms`` is OffsetCommit v2-v4's retention_time (-1: the broker's)."""
        errors: dict[TopicPartition, ErrorCode] = {}
        now = now_ms()
        expire = now + retention_ms if retention_ms >= 0 else None
        limit = self._metadata_max_bytes
        for tp, om in offsets.items():
            metadata = om.metadata or ""
            if len(metadata.encode("utf-8")) > limit:
                errors[tp] = ErrorCode.offset_metadata_too_large
                continue
            group.offsets[tp] = OffsetAndMetadata(
                offset=om.offset,
                leader_epoch=om.leader_epoch,
                metadata=metadata,
                commit_timestamp_ms=now,
                expire_timestamp_ms=expire,
            )
            errors[tp] = ErrorCode.none
        return errors

    def get_offsets(
        self, group: GroupMetadata | None, partitions: Sequence[TopicPartition] | None
    ) -> OffsetFetchResult:
        """The committed offsets of ``partitions`` (None: every committed partition) of
        ``group`` (None: unknown); partitions without one answer offset -1."""
        result: dict[TopicPartition, OffsetFetchPartition] = {}
        if group is None:
            stored: dict[TopicPartition, OffsetAndMetadata] = {}
        else:
            with group.lock:
                stored = {} if group.is_(GroupState.DEAD) else dict(group.offsets)
        wanted = sorted(stored) if partitions is None else partitions
        for tp in wanted:
            om = stored.get(tp)
            result[tp] = (
                OffsetFetchPartition()
                if om is None
                else OffsetFetchPartition(om.offset, om.leader_epoch, om.metadata)
            )
        return OffsetFetchResult(ErrorCode.none, result)

    def delete_offsets(
        self, group: GroupMetadata, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        """Delete the committed offsets of ``partitions``."""
        errors: dict[TopicPartition, ErrorCode] = {}
        for tp in partitions:
            group.offsets.pop(tp, None)
            errors[tp] = ErrorCode.none
        return errors

    def delete_all_offsets(self, group: GroupMetadata) -> None:
        """Delete every committed offset of ``group`` (the group is being deleted)."""
        group.offsets.clear()

    def expire_offsets(self, now: int | None = None) -> int:
        """Drop offsets past offsets.retention.ms (Kafka's rules, KIP-211); groups left Empty
        with no offsets are removed. Returns how many offsets expired."""
        current = now_ms() if now is None else now
        retention = self._retention_ms
        expired_total = 0
        for group in self._groups():
            with group.lock:
                expired = self._expired_offsets(group, current, retention)
                for tp in expired:
                    del group.offsets[tp]
                expired_total += len(expired)
                if (
                    group.is_(GroupState.EMPTY)
                    and not group.offsets
                    and not group.members
                    and not group.pending_members
                ):
                    group.transition_to(GroupState.DEAD)
                    self._remove_group(group)
                    log.info("removed empty group with no offsets", group=group.group_id)
        return expired_total

    @staticmethod
    def _expired_offsets(group: GroupMetadata, now: int, retention: int) -> list[TopicPartition]:
        def expired(base: Callable[[OffsetAndMetadata], int], keep: Iterable[str] = ()) -> list:
            keep_topics = set(keep)
            out = []
            for tp, om in group.offsets.items():
                if tp.topic in keep_topics:
                    continue
                if om.expire_timestamp_ms is not None:
                    if now >= om.expire_timestamp_ms:
                        out.append(tp)
                elif now - base(om) >= retention:
                    out.append(tp)
            return out

        if not group.protocol_type:
            return expired(lambda om: om.commit_timestamp_ms)
        if group.is_(GroupState.EMPTY):
            state_ts = group.state_timestamp_ms
            return expired(lambda om: state_ts if state_ts is not None else om.commit_timestamp_ms)
        if (
            group.protocol_type == CONSUMER_PROTOCOL_TYPE
            and group.subscribed_topics is not None
            and group.is_(GroupState.STABLE)
        ):
            return expired(lambda om: om.commit_timestamp_ms, group.subscribed_topics)
        return []

    def _periodic_offset_expiry(self) -> None:
        if self._shutdown:
            return
        try:
            self.expire_offsets()
        finally:
            if not self._shutdown:
                self._expiry_task = self._timer.schedule(
                    self._retention_check_interval_ms, self._periodic_offset_expiry
                )
