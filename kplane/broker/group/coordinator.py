"""GroupCoordinator: one coordinator over the group types (Kafka 4's shape).

Each type's state machine is its own module: the classic protocol in
:mod:`kplane.broker.group.classic_protocol`, KIP-848's consumer protocol in
:mod:`kplane.broker.group.consumer_protocol`. This class owns what is common: the groups by
id (:class:`~kplane.broker.group.group_registry.GroupRegistry`), who may commit, fetch or
delete offsets (each group type's checks, :class:`~kplane.broker.group.group.Group`), the
offsets themselves (:class:`~kplane.broker.group.offset_manager.OffsetManager`), and
ListGroups, DescribeGroups and DeleteGroups over every type. Every operation takes a
callback and may answer from another thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import structlog

from kplane.broker.group.classic_group import (
    ClassicGroup,
    ClassicGroupState,
    GroupDescription,
    JoinGroupResult,
    SyncGroupResult,
)
from kplane.broker.group.classic_members import ClassicMembers
from kplane.broker.group.classic_protocol import (
    ClassicGroupProtocol,
    LeaveGroupResult,
    MemberIdentity,
)
from kplane.broker.group.consumer_group import ConsumerGroup, ConsumerGroupDescription
from kplane.broker.group.consumer_group_store import ConsumerGroupStore, StoredGroups
from kplane.broker.group.consumer_protocol import ConsumerGroupProtocol
from kplane.broker.group.group import (
    Group,
    GroupOverview,
    OffsetAndMetadata,
    TopicPartition,
    now_ms,
)
from kplane.broker.group.group_config import GroupConfig
from kplane.broker.group.group_configs import GroupConfigManager
from kplane.broker.group.group_registry import GroupRegistry
from kplane.broker.group.modern_group import ModernGroup
from kplane.broker.group.offset_manager import (
    OffsetDeleteResult,
    OffsetFetchResult,
    OffsetManager,
    OffsetStore,
)
from kplane.broker.group.share_config import ShareGroupConfig
from kplane.broker.group.share_group import ShareGroup, ShareGroupDescription
from kplane.broker.group.share_protocol import ShareGroupProtocol
from kplane.broker.metadata.cache import MetadataSnapshot
from kplane.broker.utils.timer import SystemTimer, TimerTask
from kplane.protocol.errors import ErrorCode, KafkaError

log = structlog.get_logger(__name__)

_OWNERSHIP_CHECK_MS = 1000
_G = TypeVar("_G", bound=ModernGroup[Any])
_D = TypeVar("_D")


class GroupCoordinator:
    """All groups of this broker: ``classic`` serves the classic protocol's membership,
    ``consumer`` KIP-848's; the offsets and the admin APIs are served here for every type.

    ``partition_exists(topic, partition)`` tells whether a partition exists, for offset
    commits and deletes; ``topics()`` is the cluster's metadata, which consumer groups
    subscribe to (``stored_topics()``: the topics the metadata store holds, which
    ``topics()`` must have caught up with). ``offset_store`` keeps committed offsets,
    ``group_store`` consumer and share groups' state; ``group_configs`` each group's own
    settings.
    """

    def __init__(
        self,
        config: GroupConfig,
        timer: SystemTimer,
        partition_exists: Callable[[str, int], bool],
        offset_store: OffsetStore | None = None,
        *,
        topics: Callable[[], MetadataSnapshot] = lambda: MetadataSnapshot("", -1),
        stored_topics: Callable[[], Iterable[str]] = list,
        group_store: ConsumerGroupStore | None = None,
        group_configs: GroupConfigManager | None = None,
        share_config: ShareGroupConfig | None = None,
        owns: Callable[[str], bool] = lambda _group_id: True,
    ) -> None:
        self.config = config
        self._timer = timer
        self._owns = owns
        self._topics = topics
        self.groups = GroupRegistry()
        self.stored = StoredGroups(group_store, self.groups)
        self.classic = ClassicGroupProtocol(config, timer, self.groups)
        configs = group_configs or GroupConfigManager(None)
        self.consumer = ConsumerGroupProtocol(
            config,
            timer,
            self.groups,
            topics,
            stored_topics=stored_topics,
            session_timeout_ms=lambda group_id: configs.get_int(
                group_id, "consumer.session.timeout.ms", config.consumer_session_timeout_ms
            ),
            heartbeat_interval_ms=lambda group_id: configs.get_int(
                group_id, "consumer.heartbeat.interval.ms", config.consumer_heartbeat_interval_ms
            ),
            store=self.stored,
            owns=owns,
            classic=self.classic,
        )
        self.classic_members = ClassicMembers(self.consumer)
        self.groups.loader = self.stored.read
        self.groups.on_loaded = self._on_loaded
        self.groups.on_replaced = self._on_replaced
        self._brokers: frozenset[int] = frozenset()
        self._ownership_task: TimerTask | None = None
        self._shutdown = False
        self.share_config = share_config or ShareGroupConfig()
        self.share = ShareGroupProtocol(
            self.share_config,
            timer,
            self.groups,
            topics,
            session_timeout_ms=lambda group_id: configs.get_int(
                group_id, "share.session.timeout.ms", self.share_config.session_timeout_ms
            ),
            heartbeat_interval_ms=lambda group_id: configs.get_int(
                group_id, "share.heartbeat.interval.ms", self.share_config.heartbeat_interval_ms
            ),
            store=self.stored,
            snapshot=self.consumer.snapshot,
            owns=owns,
        )
        self.share_group_deleted: list[Callable[[str], None]] = []
        """Called with the id of each share group deleted (its share-partition state goes)."""
        self._offsets = OffsetManager(
            timer,
            partition_exists,
            self.groups.all,
            self._expired_group,
            retention_ms=config.offsets_retention_ms,
            retention_check_interval_ms=config.offsets_retention_check_interval_ms,
            metadata_max_bytes=config.offset_metadata_max_bytes,
            store=offset_store,
        )
        loaded = self._offsets.load_groups(lambda gid: self._offsets_group(gid, True))
        if loaded:
            log.info("groups with committed offsets loaded", groups=loaded)
        self._check_ownership()

    # -- which groups this broker coordinates ---------------------------------------------

    def _on_loaded(self, group: Group) -> None:
        if isinstance(group, ConsumerGroup):
            self.consumer.on_loaded(group)
        elif isinstance(group, ShareGroup):
            self.share.on_loaded(group)

    def _on_replaced(self, group: Group) -> None:
        """``group`` became a group of another type: a consumer group's stored state goes
        (it would be loaded again by the next coordinator)."""
        if isinstance(group, ConsumerGroup):
            self.consumer.shutdown(group)
            self.consumer.forget(group)

    def _check_ownership(self) -> None:
        """Kafka's coordinator election and resignation, with the live brokers deciding who
        coordinates (checked every second): when they change, the groups another broker
        coordinates now are unloaded here (their timers stop; the stored state stays for
        that broker), and the stored consumer and share groups this broker coordinates now
        are loaded, their members' sessions started."""
        if self._shutdown:
            return
        try:
            brokers = frozenset(self._topics().brokers)
            if brokers and brokers != self._brokers:
                self._brokers = brokers
                self._unload_unowned()
                for group_id in self.stored.group_ids():
                    if self._owns(group_id):
                        self.groups.get(group_id)
        except KafkaError as exc:
            log.warning("groups not loaded", reason=exc.message)
            self._brokers = frozenset()  # tried again at the next check
        finally:
            if not self._shutdown:
                self._ownership_task = self._timer.schedule(
                    _OWNERSHIP_CHECK_MS, self._check_ownership
                )

    def _unload_unowned(self) -> None:
        for group in self.groups.all():
            if self._owns(group.group_id):
                continue
            with group.lock:
                if isinstance(group, ConsumerGroup):
                    self.consumer.shutdown(group)
                elif isinstance(group, ShareGroup):
                    self.share.shutdown(group)
                elif not isinstance(group, ClassicGroup) or not group.is_empty:
                    continue  # a classic group's members expire here, or rejoin elsewhere
                group.mark_dead()
                self.groups.remove(group)
            log.info("group unloaded: another broker coordinates it", group=group.group_id)

    def _offsets_group(self, group_id: str, create: bool) -> Group | None:
        """The group ``group_id`` of any type; created as an Empty classic group (a
        standalone consumer's) when ``create``."""
        if not create:
            return self.groups.get(group_id)
        return self.groups.get_or_create(
            group_id, lambda gid: ClassicGroup(gid, state_timestamp_ms=now_ms())
        )

    def _expired_group(self, group: Group) -> None:
        """Offset expiry left ``group`` empty with no offsets: it goes, with its state."""
        self.groups.remove(group)
        if isinstance(group, (ConsumerGroup, ShareGroup)):
            self.stored.forget(group)

    def group_ids(self) -> list[str]:
        return self.groups.ids()

    def shutdown(self) -> None:
        """Cancel the coordinator's timers (the SystemTimer itself belongs to the caller)."""
        self._shutdown = True
        if self._ownership_task is not None:
            self._ownership_task.cancel()
        self._offsets.shutdown()
        for group in self.groups.all():
            if isinstance(group, ClassicGroup):
                self.classic.shutdown(group)
            elif isinstance(group, ConsumerGroup):
                self.consumer.shutdown(group)
            elif isinstance(group, ShareGroup):
                self.share.shutdown(group)

    # -- the classic protocol's membership, of both group types ---------------------------

    def _consumer_group(self, group_id: str, with_members: bool) -> ConsumerGroup | None:
        """The consumer group ``group_id`` (with members, when ``with_members``), or None:
        the classic protocol's requests go to its classic members (KIP-848's migration)."""
        try:
            group = self.groups.get(group_id) if group_id else None
        except KafkaError:
            return None  # the classic protocol answers (the group is unknown to it)
        if not isinstance(group, ConsumerGroup) or group.is_dead:
            return None
        return group if group.members or not with_members else None

    def join_group(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        callback: Callable[[JoinGroupResult], None],
        *,
        require_known_member_id: bool = True,
        supports_skip_assignment: bool = False,
        reason: str | None = None,
    ) -> None:
        """JoinGroup: a member of a consumer group with members joins it as a classic
        member; otherwise the classic protocol (which turns an empty consumer group into a
        classic group, and refuses a share group)."""
        group = self._consumer_group(group_id, with_members=True)
        if group is None or not (
            self.config.min_session_timeout_ms
            <= session_timeout_ms
            <= self.config.max_session_timeout_ms
        ):
            self.classic.join_group(
                group_id,
                member_id,
                group_instance_id,
                client_id,
                client_host,
                rebalance_timeout_ms,
                session_timeout_ms,
                protocol_type,
                protocols,
                callback,
                require_known_member_id=require_known_member_id,
                supports_skip_assignment=supports_skip_assignment,
                reason=reason,
            )
            return
        with self.groups.deferring():
            result = self.classic_members.join(
                group,
                member_id,
                group_instance_id,
                client_id,
                client_host,
                rebalance_timeout_ms,
                session_timeout_ms,
                protocol_type,
                protocols,
                require_known_member_id=require_known_member_id,
            )
            self.groups.defer(callback, result)

    def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: Mapping[str, bytes],
        callback: Callable[[SyncGroupResult], None],
    ) -> None:
        """SyncGroup, of a classic group's member or a consumer group's classic member."""
        group = self._consumer_group(group_id, with_members=False)
        if group is None:
            self.classic.sync_group(
                group_id,
                generation_id,
                member_id,
                group_instance_id,
                protocol_type,
                protocol_name,
                assignments,
                callback,
            )
            return
        with self.groups.deferring():
            result = self.classic_members.sync(
                group, generation_id, member_id, group_instance_id, protocol_type, protocol_name
            )
            self.groups.defer(callback, result)

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        callback: Callable[[ErrorCode], None],
    ) -> None:
        """Heartbeat, of a classic group's member or a consumer group's classic member."""
        group = self._consumer_group(group_id, with_members=False)
        if group is None:
            self.classic.heartbeat(group_id, member_id, group_instance_id, generation_id, callback)
            return
        with self.groups.deferring():
            error = self.classic_members.heartbeat(
                group, member_id, group_instance_id, generation_id
            )
            self.groups.defer(callback, error)

    def leave_group(
        self,
        group_id: str,
        members: Sequence[MemberIdentity],
        callback: Callable[[LeaveGroupResult], None],
    ) -> None:
        """LeaveGroup, of a classic group's members or a consumer group's classic ones."""
        group = self._consumer_group(group_id, with_members=False)
        if group is None:
            self.classic.leave_group(group_id, members, callback)
            return
        with self.groups.deferring():
            self.groups.defer(callback, self.classic_members.leave(group, members))

    # -- offsets --------------------------------------------------------------------------

    def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        callback: Callable[[dict[TopicPartition, ErrorCode]], None],
        *,
        retention_ms: int = -1,
        api_version: int | None = None,
    ) -> None:
        """OffsetCommit. ``generation_id`` is the generation of a classic member or the
        epoch of a consumer-protocol member; -1 with an empty member id is a standalone
        commit, allowed while the group has no members. ``retention_ms`` is v2-v4's
        retention_time (-1: the broker's offsets.retention.minutes); ``api_version`` the
        request's (a consumer-protocol member needs v9+)."""
        with self.groups.deferring():
            errors = self._offsets.unknown_partitions(offsets)
            valid = {tp: om for tp, om in offsets.items() if tp not in errors}
            if not valid:
                self.groups.defer(callback, errors)
                return
            group = self._offsets_group(group_id, create=generation_id < 0)
            if group is None:
                # Not a group we know, and not a simple commit: an old generation.
                errors.update(dict.fromkeys(valid, ErrorCode.illegal_generation))
                self.groups.defer(callback, errors)
                return
            with group.lock:
                error = group.validate_offset_commit(
                    member_id, group_instance_id, generation_id, False, api_version
                )
                if error is not None:
                    errors.update(dict.fromkeys(valid, error))
                    self.groups.defer(callback, errors)
                    return
                if isinstance(group, ClassicGroup):
                    self.classic.on_offset_commit(group, member_id)
                errors.update(self._offsets.store_offsets(group, valid, retention_ms))
            self.groups.defer(callback, errors)

    def commit_txn_offsets(
        self,
        group_id: str,
        producer_id: int,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
    ) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit: offsets pending until the producer's transaction ends. As
        OffsetCommit, a member of the group must name its generation (KIP-447); an unknown
        group is created, as Kafka does for a producer committing for a standalone
        consumer."""
        errors = self._offsets.unknown_partitions(offsets)
        valid = {tp: om for tp, om in offsets.items() if tp not in errors}
        if not valid:
            return errors
        group = self._offsets_group(group_id, create=True)
        assert group is not None
        with group.lock:
            error = group.validate_offset_commit(
                member_id, group_instance_id, generation_id, transactional=True
            )
            if error is not None:
                return {**errors, **dict.fromkeys(valid, error)}
            errors.update(self._offsets.store_txn_offsets(group, producer_id, valid))
        return errors

    def complete_txn(
        self, producer_id: int, commit: bool, in_partition: Callable[[str], bool]
    ) -> None:
        """A transaction marker for a ``__consumer_offsets`` partition: the producer's
        pending offsets of the groups mapped to it (``in_partition(group_id)``) become
        committed, or are dropped on abort."""
        candidates = set(self._offsets.stored_group_ids()) | {
            g.group_id for g in self.groups.all() if g.pending_txn_offsets
        }
        for group_id in sorted(g for g in candidates if in_partition(g)):
            group = self._offsets_group(group_id, create=True)
            assert group is not None
            with group.lock:
                if self._offsets.complete_txn_offsets(group, producer_id, commit):
                    log.debug(
                        "transactional offsets completed",
                        group=group_id,
                        producer_id=producer_id,
                        commit=commit,
                    )

    def fetch_offsets(
        self,
        group_id: str,
        partitions: Sequence[TopicPartition] | None,
        callback: Callable[[OffsetFetchResult], None],
        *,
        require_stable: bool = False,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> None:
        """OffsetFetch: ``partitions=None`` returns every committed partition; unknown
        partitions answer offset -1. v9+ may name the member fetching (and its epoch)."""
        with self.groups.deferring():
            group = self.groups.get(group_id)
            if group is not None and member_id is not None:
                with group.lock:
                    error = group.validate_offset_fetch(member_id, member_epoch)
                if error is not None:
                    self.groups.defer(callback, OffsetFetchResult(error, {}))
                    return
            self.groups.defer(
                callback, self._offsets.get_offsets(group_id, group, partitions, require_stable)
            )

    def delete_offsets(
        self,
        group_id: str,
        partitions: Sequence[TopicPartition],
        callback: Callable[[OffsetDeleteResult], None],
    ) -> None:
        """OffsetDelete: allowed for Empty groups, and for topics a consumer group does not
        subscribe to."""
        with self.groups.deferring():
            errors = self._offsets.unknown_partitions(partitions)
            eligible = [tp for tp in partitions if tp not in errors]
            group = self.groups.get(group_id)
            if group is None:
                self.groups.defer(callback, OffsetDeleteResult(ErrorCode.group_id_not_found, {}))
                return
            with group.lock:
                error = group.validate_offset_delete()
                if error is not None:
                    self.groups.defer(callback, OffsetDeleteResult(error, {}))
                    return
                if not group.is_empty:
                    for tp in eligible:
                        if group.is_subscribed_to_topic(tp.topic):
                            errors[tp] = ErrorCode.group_subscribed_to_topic
                    eligible = [tp for tp in eligible if tp not in errors]
                errors.update(self._offsets.delete_offsets(group, eligible))
            self.groups.defer(callback, OffsetDeleteResult(ErrorCode.none, errors))

    def expire_offsets(self, now: int | None = None) -> int:
        """Drop offsets past offsets.retention.ms (see :meth:`OffsetManager.expire_offsets`).
        Returns how many offsets expired."""
        return self._offsets.expire_offsets(now)

    # -- admin ----------------------------------------------------------------------------

    def list_groups(
        self,
        callback: Callable[[list[GroupOverview]], None],
        *,
        states_filter: Iterable[str] = (),
        types_filter: Iterable[str] = (),
    ) -> None:
        """ListGroups; filters compare case-insensitively."""
        states = {s.lower() for s in states_filter}
        types = {t.lower() for t in types_filter}
        with self.groups.deferring():
            out: list[GroupOverview] = []
            for group in self.groups.all():
                with group.lock:
                    if group.is_dead:
                        continue
                    if types and group.group_type.value not in types:
                        continue
                    if states and group.state_name.lower() not in states:
                        continue
                    out.append(group.overview())
            self.groups.defer(callback, out)

    def describe_groups(
        self, group_ids: Sequence[str], callback: Callable[[list[GroupDescription]], None]
    ) -> None:
        """DescribeGroups; an unknown group is described as Dead with no members, a group
        of another type as Dead with GROUP_ID_NOT_FOUND (Kafka's answer)."""
        with self.groups.deferring():
            out = []
            for group_id in group_ids:
                group = self.groups.get(group_id)
                if not isinstance(group, ClassicGroup):
                    dead = ClassicGroupState.DEAD.value
                    if group is None or group.is_dead:
                        out.append(GroupDescription(group_id, dead, "", ""))
                    else:
                        out.append(
                            GroupDescription(
                                group_id,
                                dead,
                                "",
                                "",
                                error=ErrorCode.group_id_not_found,
                                error_message=f"Group {group_id} is not a classic group.",
                            )
                        )
                    continue
                with group.lock:
                    out.append(group.describe())
            self.groups.defer(callback, out)

    def describe_consumer_groups(self, group_ids: Sequence[str]) -> list[ConsumerGroupDescription]:
        """ConsumerGroupDescribe; GROUP_ID_NOT_FOUND for an unknown group or one of another
        type."""
        return self._describe_modern(
            group_ids, ConsumerGroup, ConsumerGroup.describe, ConsumerGroupDescription, "consumer"
        )

    def describe_share_groups(self, group_ids: Sequence[str]) -> list[ShareGroupDescription]:
        """ShareGroupDescribe; GROUP_ID_NOT_FOUND for an unknown group or one of another
        type."""
        return self._describe_modern(
            group_ids, ShareGroup, ShareGroup.describe, ShareGroupDescription, "share"
        )

    def _describe_modern(
        self,
        group_ids: Sequence[str],
        group_class: type[_G],
        describe: Callable[[_G], _D],
        refusal: Callable[[str, ErrorCode, str], _D],
        type_name: str,
    ) -> list[_D]:
        """Each group described when it is a live ``group_class``; else a ``refusal``
        with GROUP_ID_NOT_FOUND and Kafka's message."""
        out = []
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if group is None or group.is_dead:
                out.append(
                    refusal(group_id, ErrorCode.group_id_not_found, f"Group {group_id} not found.")
                )
            elif not isinstance(group, group_class):
                out.append(
                    refusal(
                        group_id,
                        ErrorCode.group_id_not_found,
                        f"Group {group_id} is not a {type_name} group.",
                    )
                )
            else:
                with group.lock:
                    out.append(describe(group))
        return out

    def delete_groups(
        self, group_ids: Sequence[str], callback: Callable[[dict[str, ErrorCode]], None]
    ) -> None:
        """DeleteGroups: only Empty groups go (with their offsets)."""
        with self.groups.deferring():
            out: dict[str, ErrorCode] = {}
            for group_id in group_ids:
                group = self.groups.get(group_id)
                if group is None:
                    out[group_id] = ErrorCode.group_id_not_found
                    continue
                with group.lock:
                    error = group.validate_delete_group()
                    if error is not None:
                        out[group_id] = error
                        continue
                    group.mark_dead()
                    self._offsets.delete_all_offsets(group)
                    if isinstance(group, ClassicGroup):
                        self.classic.shutdown(group)
                    elif isinstance(group, ConsumerGroup):
                        self.consumer.shutdown(group)
                        self.consumer.forget(group)
                    elif isinstance(group, ShareGroup):
                        self.share.shutdown(group)
                        self.share.forget(group)
                        for deleted in self.share_group_deleted:
                            self.groups.defer(deleted, group_id)
                    self.groups.remove(group)
                    out[group_id] = ErrorCode.none
                    log.info("deleted group", group=group_id)
            self.groups.defer(callback, out)
