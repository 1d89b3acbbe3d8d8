"""OffsetManager: the groups' committed offsets, as Kafka's GroupMetadataManager keeps them.

The GroupCoordinator validates who may commit or delete (membership, generation, state) and
calls this manager, which stores, fetches, deletes and expires the offsets. They are kept per
group in its :class:`~kplane.broker.group.group.Group` (``offsets``) and written through
to an :class:`OffsetStore` (the metadata store, at Kafka's ZooKeeper offset layout
``/consumers/<group>/offsets/<topic>/<partition>``), which is the truth: a fetch reads it, so
a coordinator that took a group over from another broker answers what that one stored.
Methods taking a group expect its lock held, except ``get_offsets``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import structlog

from kplane.broker.group.group import Group, OffsetAndMetadata, TopicPartition, now_ms
from kplane.broker.utils.timer import SystemTimer, TimerTask
from kplane.protocol.errors import ErrorCode

log = structlog.get_logger(__name__)

INVALID_OFFSET = -1


class OffsetStore(Protocol):
    """Where committed offsets are durable (KafkaMetadataClient's committed-offset methods)."""

    def write_offsets(self, group_id: str, offsets: Mapping[tuple[str, int], bytes]) -> None: ...

    def delete_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]]) -> None: ...

    def delete_group_offsets(self, group_id: str) -> None: ...

    def read_offsets(self, group_id: str) -> dict[tuple[str, int], bytes]: ...

    def groups_with_offsets(self) -> list[str]: ...

    def write_pending_txn_offsets(self, group_id: str, producer_id: int, data: bytes) -> None: ...

    def read_pending_txn_offsets(self, group_id: str) -> dict[int, bytes]: ...

    def complete_pending_txn_offsets(
        self, group_id: str, producer_id: int, offsets: Mapping[tuple[str, int], bytes]
    ) -> None: ...


def encode_offset(om: OffsetAndMetadata) -> bytes:
    """One committed offset as stored."""
    return json.dumps(
        {
            "version": 1,
            "offset": om.offset,
            "leader_epoch": om.leader_epoch,
            "metadata": om.metadata,
            "commit_timestamp": om.commit_timestamp_ms,
            "expire_timestamp": om.expire_timestamp_ms,
        }
    ).encode()


def decode_offset(data: bytes) -> OffsetAndMetadata | None:
    """A stored committed offset; None when it does not parse (logged, then ignored)."""
    try:
        doc = json.loads(data)
        return OffsetAndMetadata(
            offset=int(doc["offset"]),
            leader_epoch=int(doc.get("leader_epoch", -1)),
            metadata=str(doc.get("metadata") or ""),
            commit_timestamp_ms=int(doc.get("commit_timestamp", 0)),
            expire_timestamp_ms=(
                int(doc["expire_timestamp"]) if doc.get("expire_timestamp") is not None else None
            ),
        )
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("stored committed offset ignored", reason=str(exc))
        return None


def encode_offsets(offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> bytes:
    """Several offsets as one stored document (a transaction's pending offsets)."""
    return json.dumps(
        [[tp.topic, tp.partition, json.loads(encode_offset(om))] for tp, om in offsets.items()]
    ).encode()


def decode_offsets(data: bytes) -> dict[TopicPartition, OffsetAndMetadata]:
    """What :func:`encode_offsets` stored; entries that do not parse are logged and skipped."""
    out: dict[TopicPartition, OffsetAndMetadata] = {}
    try:
        entries = json.loads(data)
        for topic, partition, doc in entries:
            om = decode_offset(json.dumps(doc).encode())
            if om is not None:
                out[TopicPartition(str(topic), int(partition))] = om
    except (ValueError, TypeError) as exc:
        log.warning("stored transactional offsets ignored", reason=str(exc))
    return out


def read_group_offsets(
    store: OffsetStore, group_id: str
) -> dict[TopicPartition, OffsetAndMetadata]:
    """A group's committed offsets from ``store``."""
    out = {}
    for (topic, partition), data in store.read_offsets(group_id).items():
        om = decode_offset(data)
        if om is not None:
            out[TopicPartition(topic, partition)] = om
    return out


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
        groups: Callable[[], list[Group]],
        remove_group: Callable[[Group], None],
        *,
        retention_ms: int,
        retention_check_interval_ms: int,
        metadata_max_bytes: int,
        store: OffsetStore | None = None,
    ) -> None:
        self._store = store
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
        group: Group,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        retention_ms: int,
    ) -> dict[TopicPartition, ErrorCode]:
        """Store validated commits; metadata over ``offset.metadata.max.bytes`` is refused.
        ``retention_ms`` is OffsetCommit v2-v4's retention_time (-1: the broker's)."""
        errors, stored = self._stamped(offsets, retention_ms)
        if self._store is not None and stored:
            try:
                self._store.write_offsets(
                    group.group_id,
                    {(tp.topic, tp.partition): encode_offset(om) for tp, om in stored.items()},
                )
            except Exception as exc:  # the store refused: nothing is acknowledged
                log.warning("offset commit not stored", group=group.group_id, reason=str(exc))
                return {**errors, **dict.fromkeys(stored, ErrorCode.coordinator_not_available)}
        group.offsets.update(stored)
        errors.update(dict.fromkeys(stored, ErrorCode.none))
        return errors

    def _stamped(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata], retention_ms: int = -1
    ) -> tuple[dict[TopicPartition, ErrorCode], dict[TopicPartition, OffsetAndMetadata]]:
        """(refused, accepted): metadata over ``offset.metadata.max.bytes`` is refused, the
        rest stamped with the commit time (and the expiry of ``retention_ms`` >= 0)."""
        errors: dict[TopicPartition, ErrorCode] = {}
        now = now_ms()
        expire = now + retention_ms if retention_ms >= 0 else None
        stored: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, om in offsets.items():
            metadata = om.metadata or ""
            if len(metadata.encode("utf-8")) > self._metadata_max_bytes:
                errors[tp] = ErrorCode.offset_metadata_too_large
                continue
            stored[tp] = OffsetAndMetadata(
                offset=om.offset,
                leader_epoch=om.leader_epoch,
                metadata=metadata,
                commit_timestamp_ms=now,
                expire_timestamp_ms=expire,
            )
        return errors, stored

    # transactional offsets (KIP-98) ---------------------------------------------------------
    def store_txn_offsets(
        self,
        group: Group,
        producer_id: int,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
    ) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit: keep ``offsets`` pending (durably) until the producer's
        transaction ends; a fetch does not see them before."""
        errors, accepted = self._stamped(offsets)
        pending = {**group.pending_txn_offsets.get(producer_id, {}), **accepted}
        if self._store is not None and accepted:
            try:
                self._store.write_pending_txn_offsets(
                    group.group_id, producer_id, encode_offsets(pending)
                )
            except Exception as exc:  # the store refused: nothing is acknowledged
                log.warning(
                    "transactional offsets not stored", group=group.group_id, reason=str(exc)
                )
                return {**errors, **dict.fromkeys(accepted, ErrorCode.coordinator_not_available)}
        group.pending_txn_offsets[producer_id] = pending
        errors.update(dict.fromkeys(accepted, ErrorCode.none))
        return errors

    def complete_txn_offsets(self, group: Group, producer_id: int, commit: bool) -> bool:
        """The producer's transaction ended: its pending offsets of ``group`` become
        committed, or are dropped on abort. Returns whether it had any."""
        if self._store is not None:
            stored = self._store.read_pending_txn_offsets(group.group_id).get(producer_id)
            if stored is not None:
                group.pending_txn_offsets[producer_id] = decode_offsets(stored)
        pending = group.pending_txn_offsets.pop(producer_id, None)
        if pending is None:
            return False
        committed = pending if commit else {}
        if self._store is not None:
            self._store.complete_pending_txn_offsets(
                group.group_id,
                producer_id,
                {(tp.topic, tp.partition): encode_offset(om) for tp, om in committed.items()},
            )
        group.offsets.update(committed)
        return True

    def stored_group_ids(self) -> list[str]:
        """Every group the store holds offsets (or pending ones) of."""
        return self._store.groups_with_offsets() if self._store is not None else []

    def pending_partitions(self, group_id: str, group: Group | None) -> set[TopicPartition]:
        """Partitions of the group with offsets pending in an open transaction."""
        if self._store is not None:
            return {
                tp
                for data in self._store.read_pending_txn_offsets(group_id).values()
                for tp in decode_offsets(data)
            }
        if group is None:
            return set()
        return {tp for pending in group.pending_txn_offsets.values() for tp in pending}

    def get_offsets(
        self,
        group_id: str,
        group: Group | None,
        partitions: Sequence[TopicPartition] | None,
        require_stable: bool = False,
    ) -> OffsetFetchResult:
        """The committed offsets of ``partitions`` (None: every committed partition) of
        group ``group_id`` (``group`` None: not known in memory here); partitions without
        one answer offset -1. With ``require_stable`` a partition whose offset is pending in
        an open transaction answers UNSTABLE_OFFSET_COMMIT (KIP-447)."""
        result: dict[TopicPartition, OffsetFetchPartition] = {}
        if group is None:
            stored: dict[TopicPartition, OffsetAndMetadata] = (
                read_group_offsets(self._store, group_id) if self._store is not None else {}
            )
        else:
            with group.lock:
                if self._store is not None and not group.is_dead:
                    group.offsets = read_group_offsets(self._store, group.group_id)
                stored = {} if group.is_dead else dict(group.offsets)
        wanted = sorted(stored) if partitions is None else partitions
        unstable = self.pending_partitions(group_id, group) if require_stable else set()
        for tp in wanted:
            om = stored.get(tp)
            if tp in unstable:
                result[tp] = OffsetFetchPartition(error=ErrorCode.unstable_offset_commit)
            elif om is None:
                result[tp] = OffsetFetchPartition()
            else:
                result[tp] = OffsetFetchPartition(om.offset, om.leader_epoch, om.metadata)
        return OffsetFetchResult(ErrorCode.none, result)

    def delete_offsets(
        self, group: Group, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        """Delete the committed offsets of ``partitions``."""
        errors: dict[TopicPartition, ErrorCode] = {}
        doomed = list(partitions)
        if self._store is not None:
            self._store.delete_offsets(group.group_id, doomed)
        for tp in doomed:
            group.offsets.pop(tp, None)
            errors[tp] = ErrorCode.none
        return errors

    def delete_all_offsets(self, group: Group) -> None:
        """Delete every committed offset of ``group`` (the group is being deleted)."""
        if self._store is not None:
            self._store.delete_group_offsets(group.group_id)
        group.offsets.clear()

    def load_groups(self, create: Callable[[str], Group | None]) -> int:
        """At start-up: every group with stored offsets, created Empty by ``create`` with
        its offsets (members rejoin, as after a coordinator move in Kafka). Returns how
        many."""
        if self._store is None:
            return 0
        ids = self._store.groups_with_offsets()
        for group_id in ids:
            group = create(group_id)
            if group is None:
                continue
            with group.lock:
                group.offsets = read_group_offsets(self._store, group_id)
                group.pending_txn_offsets = {
                    producer_id: decode_offsets(data)
                    for producer_id, data in self._store.read_pending_txn_offsets(group_id).items()
                }
        return len(ids)

    def expire_offsets(self, now: int | None = None) -> int:
        """Drop offsets past offsets.retention.ms (Kafka's rules, KIP-211); groups left Empty
        with no offsets are removed. Returns how many offsets expired."""
        current = now_ms() if now is None else now
        retention = self._retention_ms
        expired_total = 0
        for group in self._groups():
            with group.lock:
                expired = self._expired_offsets(group, current, retention)
                if expired and self._store is not None:
                    self._store.delete_offsets(group.group_id, self._still_stored(group, expired))
                for tp in expired:
                    del group.offsets[tp]
                expired_total += len(expired)
                if group.is_empty and not group.offsets and not group.pending_txn_offsets:
                    group.mark_dead()
                    self._remove_group(group)
                    log.info("removed empty group with no offsets", group=group.group_id)
        return expired_total

    def _still_stored(self, group: Group, expired: list[TopicPartition]) -> list[TopicPartition]:
        """Of ``expired``, those the store holds as this broker knows them (another
        coordinator may have stored a newer commit since)."""
        assert self._store is not None
        stored = read_group_offsets(self._store, group.group_id)
        return [tp for tp in expired if stored.get(tp) in (None, group.offsets.get(tp))]

    @staticmethod
    def _expired_offsets(group: Group, now: int, retention: int) -> list[TopicPartition]:
        expiration = group.offset_expiration()
        if expiration is None:
            return []
        out = []
        for tp, om in group.offsets.items():
            if tp.topic in expiration.kept_topics:
                continue
            if om.expire_timestamp_ms is not None:
                if now >= om.expire_timestamp_ms:
                    out.append(tp)
            elif now - expiration.base(om) >= retention:
                out.append(tp)
        return out

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
