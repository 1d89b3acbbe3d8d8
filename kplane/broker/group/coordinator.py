"""GroupCoordinator: Kafka's classic group protocol (join, sync, heartbeat, leave), and who
may commit offsets.

Every operation takes a callback and may answer later from another thread: a JoinGroup is
parked until the rebalance completes (on a handler thread or the timer thread), a follower's
SyncGroup until the leader sends the assignment. Each group has one lock; callbacks run
after it is released, so a callback may call back into the coordinator.

Behaviour follows Kafka's GroupCoordinator (the Scala one of 2.x/3.x, classic protocol):
MEMBER_ID_REQUIRED for JoinGroup v4+, static membership (KIP-345), the initial rebalance
delay for new groups, session and rebalance timeouts, the pending-sync timeout, and the
offset commit validation rules. The offsets themselves are the OffsetManager's
(:mod:`broker.group.offset_manager`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import structlog

from kplane.broker.group.group_metadata import (
    CONSUMER_PROTOCOL_TYPE,
    UNKNOWN_MEMBER_ID,
    GroupDescription,
    GroupMetadata,
    GroupOverview,
    GroupState,
    JoinCallback,
    JoinGroupResult,
    MemberMetadata,
    OffsetAndMetadata,
    SyncCallback,
    SyncGroupResult,
    TopicPartition,
    now_ms,
)
from kplane.broker.group.offset_manager import (
    OffsetDeleteResult,
    OffsetFetchResult,
    OffsetManager,
    OffsetStore,
)
from kplane.broker.utils.purgatory import DelayedOperation, DelayedOperationPurgatory
from kplane.broker.utils.timer import SystemTimer
from kplane.protocol.errors import ErrorCode

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class GroupConfig:
    """The group.* and offsets.* broker settings the coordinator uses (Kafka's defaults)."""

    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    max_size: int = 2**31 - 1
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096
    new_member_join_timeout_ms: int = 300_000


@dataclass(frozen=True, slots=True)
class MemberIdentity:
    """One member named in a LeaveGroup request."""

    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class MemberLeaveResult:
    member_id: str
    group_instance_id: str | None
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class LeaveGroupResult:
    error: ErrorCode
    members: tuple[MemberLeaveResult, ...] = ()


class _Deferred(threading.local):
    def __init__(self) -> None:
        self.depth = 0
        self.calls: list[tuple[Callable[[Any], None], Any]] = []


def _join_key(group_id: str) -> tuple[str, str]:
    return ("join", group_id)


class _DelayedJoin(DelayedOperation):
    """Completes the join phase once every known member rejoined, or at the rebalance timeout."""

    def __init__(self, coordinator: GroupCoordinator, group: GroupMetadata, delay_ms: int) -> None:
        super().__init__(delay_ms)
        self.coordinator = coordinator
        self.group = group

    def try_complete(self) -> bool:
        with self.group.lock:
            if self.group.has_all_members_joined:
                return self.force_complete()
            return False

    def on_complete(self) -> None:
        self.coordinator._on_complete_join(self.group)


class _InitialDelayedJoin(_DelayedJoin):
    """group.initial.rebalance.delay.ms for a new group: waits, and waits again while new
    members keep arriving, up to the rebalance timeout."""

    def __init__(
        self,
        coordinator: GroupCoordinator,
        purgatory: DelayedOperationPurgatory,
        group: GroupMetadata,
        configured_delay_ms: int,
        delay_ms: int,
        remaining_ms: int,
    ) -> None:
        super().__init__(coordinator, group, delay_ms)
        self.purgatory = purgatory
        self.configured_delay_ms = configured_delay_ms
        self.remaining_ms = remaining_ms

    def try_complete(self) -> bool:
        return False

    def on_complete(self) -> None:
        with self.coordinator._deferring(), self.group.lock:
            if self.group.new_member_added and self.remaining_ms != 0:
                self.group.new_member_added = False
                delay = min(self.configured_delay_ms, self.remaining_ms)
                remaining = max(self.remaining_ms - int(self.delay_ms), 0)
                self.purgatory.try_complete_else_watch(
                    _InitialDelayedJoin(
                        self.coordinator,
                        self.purgatory,
                        self.group,
                        self.configured_delay_ms,
                        delay,
                        remaining,
                    ),
                    [_join_key(self.group.group_id)],
                )
            else:
                self.coordinator._on_complete_join(self.group)


class GroupCoordinator:
    """All classic groups of this broker and their members; their committed offsets go
    through the OffsetManager.

    ``partition_exists(topic, partition)`` tells whether a partition exists, for offset
    commits and deletes.
    """

    def __init__(
        self,
        config: GroupConfig,
        timer: SystemTimer,
        partition_exists: Callable[[str, int], bool],
        offset_store: OffsetStore | None = None,
    ) -> None:
        self.config = config
        self._timer = timer
        self._groups: dict[str, GroupMetadata] = {}
        self._groups_lock = threading.Lock()
        self._deferred = _Deferred()
        self._rebalance_purgatory = DelayedOperationPurgatory("Rebalance", timer)
        self._offsets = OffsetManager(
            timer,
            partition_exists,
            self._all_groups,
            self._remove_group,
            retention_ms=config.offsets_retention_ms,
            retention_check_interval_ms=config.offsets_retention_check_interval_ms,
            metadata_max_bytes=config.offset_metadata_max_bytes,
            store=offset_store,
        )
        loaded = self._offsets.load_groups(lambda gid: self._get_or_create_group(gid, True))
        if loaded:
            log.info("groups with committed offsets loaded", groups=loaded)

    # -- plumbing -------------------------------------------------------------------------

    @contextmanager
    def _deferring(self) -> Iterator[None]:
        """Collect callbacks made inside and run them when the outermost block exits."""
        state = self._deferred
        state.depth += 1
        try:
            yield
        finally:
            state.depth -= 1
            if state.depth == 0:
                while state.calls:
                    calls, state.calls = state.calls, []
                    for fn, arg in calls:
                        try:
                            fn(arg)
                        except Exception:
                            log.exception("group coordinator callback failed")

    def _defer(self, fn: Callable[[Any], None] | None, arg: Any) -> None:
        if fn is None:
            return
        if self._deferred.depth > 0:
            self._deferred.calls.append((fn, arg))
        else:
            fn(arg)

    def _get_group(self, group_id: str) -> GroupMetadata | None:
        with self._groups_lock:
            return self._groups.get(group_id)

    def _get_or_create_group(self, group_id: str, create: bool) -> GroupMetadata | None:
        with self._groups_lock:
            group = self._groups.get(group_id)
            if group is None and create:
                group = GroupMetadata(group_id, state_timestamp_ms=now_ms())
                self._groups[group_id] = group
            return group

    def _all_groups(self) -> list[GroupMetadata]:
        with self._groups_lock:
            return list(self._groups.values())

    def _remove_group(self, group: GroupMetadata) -> None:
        with self._groups_lock:
            if self._groups.get(group.group_id) is group:
                del self._groups[group.group_id]

    @property
    def rebalance_purgatory(self) -> DelayedOperationPurgatory:
        return self._rebalance_purgatory

    def group_ids(self) -> list[str]:
        with self._groups_lock:
            return list(self._groups)

    def shutdown(self) -> None:
        """Cancel the coordinator's timers (the SystemTimer itself belongs to the caller)."""
        self._offsets.shutdown()
        for group in self._all_groups():
            with group.lock:
                for member in group.members.values():
                    if member.heartbeat_task is not None:
                        member.heartbeat_task.cancel()
                for task in group.pending_member_tasks.values():
                    task.cancel()
                if group.sync_task is not None:
                    group.sync_task.cancel()

    # -- JoinGroup ----------------------------------------------------------------------

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
        callback: JoinCallback,
        *,
        require_known_member_id: bool = True,
        supports_skip_assignment: bool = False,
        reason: str | None = None,
    ) -> None:
        """JoinGroup. ``require_known_member_id`` is True for v4+, ``supports_skip_assignment``
        for v9+. ``callback`` runs once, possibly later and from another thread."""
        protocols = list(protocols)
        with self._deferring():
            if not group_id:
                self._defer(callback, JoinGroupResult(member_id, ErrorCode.invalid_group_id))
                return
            if not (
                self.config.min_session_timeout_ms
                <= session_timeout_ms
                <= self.config.max_session_timeout_ms
            ):
                self._defer(callback, JoinGroupResult(member_id, ErrorCode.invalid_session_timeout))
                return
            is_unknown = member_id == UNKNOWN_MEMBER_ID
            group = self._get_or_create_group(group_id, create=is_unknown)
            if group is None:
                self._defer(callback, JoinGroupResult(member_id, ErrorCode.unknown_member_id))
                return
            with group.lock:
                if not self._accept_joining_member(group, member_id):
                    removed = group.remove(member_id)
                    if removed is not None:
                        self._cancel_heartbeat(removed)
                    self._defer(
                        callback,
                        JoinGroupResult(UNKNOWN_MEMBER_ID, ErrorCode.group_max_size_reached),
                    )
                    if group.is_(GroupState.PREPARING_REBALANCE):
                        self._rebalance_purgatory.check_and_complete(_join_key(group_id))
                    return
                args = _JoinArgs(
                    group_instance_id=group_instance_id,
                    client_id=client_id,
                    client_host=client_host,
                    rebalance_timeout_ms=rebalance_timeout_ms,
                    session_timeout_ms=session_timeout_ms,
                    protocol_type=protocol_type,
                    protocols=protocols,
                    callback=callback,
                    supports_skip_assignment=supports_skip_assignment,
                    reason=reason or "not provided",
                )
                if is_unknown:
                    self._new_member_join(group, require_known_member_id, args)
                else:
                    self._current_member_join(group, member_id, args)
                if group.is_(GroupState.PREPARING_REBALANCE):
                    self._rebalance_purgatory.check_and_complete(_join_key(group_id))

    def _accept_joining_member(self, group: GroupMetadata, member_id: str) -> bool:
        state = group.state
        if state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if state is GroupState.PREPARING_REBALANCE:
            return (
                group.has(member_id) and group.get(member_id).is_awaiting_join
            ) or group.num_members_awaiting_join < self.config.max_size
        return group.has(member_id) or group.size < self.config.max_size

    def _new_member_join(
        self, group: GroupMetadata, require_known_member_id: bool, a: _JoinArgs
    ) -> None:
        if group.is_(GroupState.DEAD):
            self._defer(
                a.callback, JoinGroupResult(UNKNOWN_MEMBER_ID, ErrorCode.coordinator_not_available)
            )
            return
        if not group.supports_protocols(a.protocol_type, (name for name, _ in a.protocols)):
            self._defer(
                a.callback,
                JoinGroupResult(UNKNOWN_MEMBER_ID, ErrorCode.inconsistent_group_protocol),
            )
            return
        new_member_id = group.generate_member_id(a.client_id, a.group_instance_id)
        if a.group_instance_id is not None:
            old_member_id = group.current_static_member_id(a.group_instance_id)
            if old_member_id is not None:
                log.info(
                    "static member rejoins with unknown member id, replacing old member id",
                    group=group.group_id,
                    group_instance_id=a.group_instance_id,
                    old_member_id=old_member_id,
                    member_id=new_member_id,
                    state=group.state.value,
                )
                self._update_static_member_and_rebalance(group, old_member_id, new_member_id, a)
            else:
                self._add_member_and_rebalance(group, new_member_id, a)
        elif require_known_member_id:
            group.pending_members.add(new_member_id)
            self._schedule_pending_member_expiration(group, new_member_id, a.session_timeout_ms)
            self._defer(a.callback, JoinGroupResult(new_member_id, ErrorCode.member_id_required))
        else:
            self._add_member_and_rebalance(group, new_member_id, a)

    def _current_member_join(self, group: GroupMetadata, member_id: str, a: _JoinArgs) -> None:
        if group.is_(GroupState.DEAD):
            self._defer(a.callback, JoinGroupResult(member_id, ErrorCode.coordinator_not_available))
            return
        if not group.supports_protocols(a.protocol_type, (name for name, _ in a.protocols)):
            self._defer(
                a.callback, JoinGroupResult(member_id, ErrorCode.inconsistent_group_protocol)
            )
            return
        if group.is_pending_member(member_id):
            if a.group_instance_id is not None:
                # A pending member is always dynamic; treat the mismatch as fencing.
                self._defer(a.callback, JoinGroupResult(member_id, ErrorCode.fenced_instance_id))
                return
            self._add_member_and_rebalance(group, member_id, a)
            return
        error = self._validate_current_member(group, member_id, a.group_instance_id)
        if error is not None:
            self._defer(a.callback, JoinGroupResult(member_id, error))
            return
        member = group.get(member_id)
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            self._update_member_and_rebalance(group, member, a, "member joining during rebalance")
        elif state is GroupState.COMPLETING_REBALANCE:
            if member.matches(a.protocols):
                # A retried JoinGroup: answer with the current generation again.
                self._defer(
                    a.callback,
                    self._join_result(group, member_id, with_members=group.is_leader(member_id)),
                )
            else:
                self._update_member_and_rebalance(
                    group, member, a, "member metadata changed during CompletingRebalance"
                )
        elif state is GroupState.STABLE:
            if group.is_leader(member_id):
                self._update_member_and_rebalance(group, member, a, "leader rejoining")
            elif not member.matches(a.protocols):
                self._update_member_and_rebalance(group, member, a, "member metadata changed")
            else:
                self._defer(a.callback, self._join_result(group, member_id, with_members=False))
        else:
            self._defer(a.callback, JoinGroupResult(member_id, ErrorCode.unknown_member_id))

    def _join_result(
        self, group: GroupMetadata, member_id: str, *, with_members: bool
    ) -> JoinGroupResult:
        return JoinGroupResult(
            member_id=member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader_id=group.leader_id or "",
            members=group.current_member_metadata() if with_members else (),
        )

    def _add_member_and_rebalance(self, group: GroupMetadata, member_id: str, a: _JoinArgs) -> None:
        member = MemberMetadata(
            member_id=member_id,
            group_instance_id=a.group_instance_id,
            client_id=a.client_id,
            client_host=a.client_host,
            rebalance_timeout_ms=a.rebalance_timeout_ms,
            session_timeout_ms=a.session_timeout_ms,
            protocol_type=a.protocol_type,
            protocols=list(a.protocols),
            is_new=True,
        )
        if group.is_(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member, a.callback)
        task = group.pending_member_tasks.pop(member_id, None)
        if task is not None:
            task.cancel()
        # A new member cannot heartbeat while its JoinGroup is parked: expire it after
        # new_member_join_timeout_ms in case its client went away.
        self._schedule_heartbeat_expiration(group, member, self.config.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance(group, f"adding new member {member_id} ({a.reason})")

    def _update_member_and_rebalance(
        self, group: GroupMetadata, member: MemberMetadata, a: _JoinArgs, reason: str
    ) -> None:
        replaced = group.update_member(
            member, a.protocols, a.rebalance_timeout_ms, a.session_timeout_ms, a.callback
        )
        if replaced is not None and replaced is not a.callback:
            # The same member joined twice (its first request presumably timed out).
            self._defer(
                replaced, JoinGroupResult(member.member_id, ErrorCode.rebalance_in_progress)
            )
        self._maybe_prepare_rebalance(group, f"{reason}: {member.member_id} ({a.reason})")

    def _update_static_member_and_rebalance(
        self, group: GroupMetadata, old_member_id: str, new_member_id: str, a: _JoinArgs
    ) -> None:
        current_leader = group.leader_id or ""
        member, old_join, old_sync = group.replace_static_member(
            a.group_instance_id or "", old_member_id, new_member_id
        )
        self._defer(old_join, JoinGroupResult(old_member_id, ErrorCode.fenced_instance_id))
        self._defer(old_sync, SyncGroupResult(ErrorCode.fenced_instance_id))
        member.client_id = a.client_id
        member.client_host = a.client_host
        self._schedule_heartbeat_expiration(group, member, member.session_timeout_ms)
        group.update_member(
            member, a.protocols, a.rebalance_timeout_ms, a.session_timeout_ms, a.callback
        )
        state = group.state
        if state is GroupState.STABLE:
            if group.protocol_name == group.select_protocol():
                # Same protocol: no rebalance, the member keeps its assignment. The old
                # leader id is returned so that the rejoined member does not assign.
                skip = group.is_leader(new_member_id) and a.supports_skip_assignment
                callback = group.take_join_callback(member)
                self._defer(
                    callback,
                    JoinGroupResult(
                        member_id=new_member_id,
                        generation_id=group.generation_id,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        leader_id=current_leader,
                        skip_assignment=skip,
                        members=group.current_member_metadata() if skip else (),
                    ),
                )
            else:
                self._maybe_prepare_rebalance(
                    group, f"static member {new_member_id} changed the selected protocol"
                )
        elif state is GroupState.COMPLETING_REBALANCE:
            self._prepare_rebalance(
                group, f"static member {new_member_id} rejoined during CompletingRebalance"
            )
        # PreparingRebalance: the member is parked with the others.

    # -- rebalance ------------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.can_rebalance:
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        self._cancel_sync_expiration(group)
        operation: DelayedOperation
        if group.is_(GroupState.EMPTY):
            delay = self.config.initial_rebalance_delay_ms
            operation = _InitialDelayedJoin(
                self,
                self._rebalance_purgatory,
                group,
                delay,
                delay,
                max(group.rebalance_timeout_ms - delay, 0),
            )
        else:
            operation = _DelayedJoin(self, group, group.rebalance_timeout_ms)
        old_state = group.state
        group.transition_to(GroupState.PREPARING_REBALANCE)
        log.info(
            "preparing to rebalance group",
            group=group.group_id,
            old_state=old_state.value,
            generation=group.generation_id,
            members=group.size,
            reason=reason,
        )
        self._rebalance_purgatory.try_complete_else_watch(operation, [_join_key(group.group_id)])

    def _on_complete_join(self, group: GroupMetadata) -> None:
        with self._deferring(), group.lock:
            if not group.is_(GroupState.PREPARING_REBALANCE):
                return
            failed = [m for m in group.not_yet_rejoined_members() if not m.is_static]
            if failed:
                log.info(
                    "removing members that did not rejoin",
                    group=group.group_id,
                    generation=group.generation_id,
                    members=[m.member_id for m in failed],
                )
                for member in failed:
                    group.remove(member.member_id)
                    self._cancel_heartbeat(member)
            if group.members and not group.maybe_elect_new_joined_leader():
                # Only static members are left and none rejoined: wait another round
                # while their sessions expire.
                log.warning(
                    "group could not complete rebalance because no members rejoined",
                    group=group.group_id,
                )
                self._rebalance_purgatory.try_complete_else_watch(
                    _DelayedJoin(self, group, group.rebalance_timeout_ms),
                    [_join_key(group.group_id)],
                )
                return
            group.init_next_generation()
            if group.is_(GroupState.EMPTY):
                log.info("group is now empty", group=group.group_id, generation=group.generation_id)
                return
            log.info(
                "stabilized group",
                group=group.group_id,
                generation=group.generation_id,
                members=group.size,
                protocol=group.protocol_name,
                leader=group.leader_id,
            )
            for member in group.all_members():
                callback = group.take_join_callback(member)
                self._defer(
                    callback,
                    self._join_result(
                        group, member.member_id, with_members=group.is_leader(member.member_id)
                    ),
                )
                self._schedule_heartbeat_expiration(group, member, member.session_timeout_ms)
                member.is_new = False
                group.pending_sync_members.add(member.member_id)
            self._schedule_sync_expiration(group)

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: GroupMetadata, error: ErrorCode) -> None:
        ok = error is ErrorCode.none
        for member in group.members.values():
            callback = group.take_sync_callback(member)
            if callback is None:
                continue
            self._defer(
                callback,
                SyncGroupResult(
                    error=error,
                    protocol_type=group.protocol_type if ok else None,
                    protocol_name=group.protocol_name if ok else None,
                    assignment=member.assignment if ok else b"",
                ),
            )
            self._schedule_heartbeat_expiration(group, member, member.session_timeout_ms)

    def _remove_member_and_update_group(
        self, group: GroupMetadata, member: MemberMetadata, reason: str
    ) -> None:
        callback = group.take_join_callback(member)
        self._defer(callback, JoinGroupResult(UNKNOWN_MEMBER_ID, ErrorCode.unknown_member_id))
        sync_callback = group.take_sync_callback(member)
        self._defer(sync_callback, SyncGroupResult(ErrorCode.unknown_member_id))
        group.remove(member.member_id)
        self._cancel_heartbeat(member)
        state = group.state
        if state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, reason)
        elif state is GroupState.PREPARING_REBALANCE:
            self._rebalance_purgatory.check_and_complete(_join_key(group.group_id))

    def _remove_pending_member_and_update_group(self, group: GroupMetadata, member_id: str) -> None:
        group.remove(member_id)
        task = group.pending_member_tasks.pop(member_id, None)
        if task is not None:
            task.cancel()
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._rebalance_purgatory.check_and_complete(_join_key(group.group_id))

    # -- timers -------------------------------------------------------------------------

    def _schedule_heartbeat_expiration(
        self, group: GroupMetadata, member: MemberMetadata, timeout_ms: int
    ) -> None:
        if member.heartbeat_task is not None:
            member.heartbeat_task.cancel()
        member.heartbeat_epoch += 1
        epoch = member.heartbeat_epoch
        member_id = member.member_id
        member.heartbeat_task = self._timer.schedule(
            timeout_ms, lambda: self._on_expire_heartbeat(group, member_id, epoch)
        )

    @staticmethod
    def _cancel_heartbeat(member: MemberMetadata) -> None:
        member.heartbeat_epoch += 1
        if member.heartbeat_task is not None:
            member.heartbeat_task.cancel()
            member.heartbeat_task = None

    def _on_expire_heartbeat(self, group: GroupMetadata, member_id: str, epoch: int) -> None:
        with self._deferring(), group.lock:
            if group.is_(GroupState.DEAD):
                return
            member = group.members.get(member_id)
            if member is None or member.heartbeat_epoch != epoch:
                return
            if not member.is_new and (member.is_awaiting_join or member.is_awaiting_sync):
                # Parked in a rebalance: the rebalance completing reschedules the session.
                return
            log.info(
                "member failed to heartbeat, removing it from the group",
                group=group.group_id,
                member=member_id,
                generation=group.generation_id,
                state=group.state.value,
            )
            self._remove_member_and_update_group(
                group, member, f"removing member {member_id} on heartbeat expiration"
            )

    def _schedule_pending_member_expiration(
        self, group: GroupMetadata, member_id: str, timeout_ms: int
    ) -> None:
        old = group.pending_member_tasks.pop(member_id, None)
        if old is not None:
            old.cancel()

        def expire() -> None:
            with self._deferring(), group.lock:
                if group.pending_member_tasks.get(member_id) is not task:
                    return
                group.pending_member_tasks.pop(member_id, None)
                if group.is_pending_member(member_id):
                    log.info(
                        "pending member removed after session timeout",
                        group=group.group_id,
                        member=member_id,
                    )
                    self._remove_pending_member_and_update_group(group, member_id)

        task = self._timer.schedule(timeout_ms, expire)
        group.pending_member_tasks[member_id] = task

    def _schedule_sync_expiration(self, group: GroupMetadata) -> None:
        self._cancel_sync_expiration(group)
        generation = group.generation_id

        def expire() -> None:
            with self._deferring(), group.lock:
                if group.sync_task is not task:
                    return
                group.sync_task = None
                if generation != group.generation_id or group.state not in (
                    GroupState.COMPLETING_REBALANCE,
                    GroupState.STABLE,
                ):
                    return
                pending = list(group.pending_sync_members)
                if not pending:
                    return
                log.info(
                    "removing members that did not send SyncGroup",
                    group=group.group_id,
                    generation=generation,
                    members=pending,
                )
                for member_id in pending:
                    member = group.remove(member_id)
                    if member is not None:
                        self._cancel_heartbeat(member)
                self._maybe_prepare_rebalance(group, "pending SyncGroup expired")

        task = self._timer.schedule(group.rebalance_timeout_ms, expire)
        group.sync_task = task

    @staticmethod
    def _cancel_sync_expiration(group: GroupMetadata) -> None:
        if group.sync_task is not None:
            group.sync_task.cancel()
            group.sync_task = None

    # -- validation -----------------------------------------------------------------------

    @staticmethod
    def _validate_current_member(
        group: GroupMetadata, member_id: str, group_instance_id: str | None
    ) -> ErrorCode | None:
        if group_instance_id is not None:
            current = group.current_static_member_id(group_instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            if current != member_id:
                log.info(
                    "fenced static member",
                    group=group.group_id,
                    group_instance_id=group_instance_id,
                    member=member_id,
                    current_member=current,
                )
                return ErrorCode.fenced_instance_id
            return None
        if not group.has(member_id):
            return ErrorCode.unknown_member_id
        return None

    # -- SyncGroup ----------------------------------------------------------------------

    def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: Mapping[str, bytes],
        callback: SyncCallback,
    ) -> None:
        """SyncGroup. The leader's ``assignments`` complete every member's parked SyncGroup."""
        with self._deferring():
            if not group_id:
                self._defer(callback, SyncGroupResult(ErrorCode.invalid_group_id))
                return
            group = self._get_group(group_id)
            if group is None:
                self._defer(callback, SyncGroupResult(ErrorCode.unknown_member_id))
                return
            with group.lock:
                error = self._validate_sync(
                    group, generation_id, member_id, group_instance_id, protocol_type, protocol_name
                )
                if error is not None:
                    self._defer(callback, SyncGroupResult(error))
                    return
                state = group.state
                if state is GroupState.EMPTY:
                    self._defer(callback, SyncGroupResult(ErrorCode.unknown_member_id))
                elif state is GroupState.PREPARING_REBALANCE:
                    self._defer(callback, SyncGroupResult(ErrorCode.rebalance_in_progress))
                elif state is GroupState.COMPLETING_REBALANCE:
                    member = group.get(member_id)
                    previous = member.awaiting_sync
                    member.awaiting_sync = callback
                    if previous is not None and previous is not callback:
                        self._defer(previous, SyncGroupResult(ErrorCode.rebalance_in_progress))
                    group.pending_sync_members.discard(member_id)
                    if not group.pending_sync_members:
                        self._cancel_sync_expiration(group)
                    if group.is_leader(member_id):
                        for m in group.members.values():
                            m.assignment = bytes(assignments.get(m.member_id, b""))
                        missing = [m for m in group.members if m not in assignments]
                        log.info(
                            "assignment received from leader",
                            group=group_id,
                            generation=group.generation_id,
                            members=group.size,
                            missing=missing or None,
                        )
                        self._propagate_assignment(group, ErrorCode.none)
                        group.transition_to(GroupState.STABLE)
                elif state is GroupState.STABLE:
                    group.pending_sync_members.discard(member_id)
                    if not group.pending_sync_members:
                        self._cancel_sync_expiration(group)
                    member = group.get(member_id)
                    self._defer(
                        callback,
                        SyncGroupResult(
                            ErrorCode.none,
                            group.protocol_type,
                            group.protocol_name,
                            member.assignment,
                        ),
                    )
                    self._schedule_heartbeat_expiration(group, member, member.session_timeout_ms)
                else:
                    self._defer(callback, SyncGroupResult(ErrorCode.coordinator_not_available))

    def _validate_sync(
        self,
        group: GroupMetadata,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
    ) -> ErrorCode | None:
        if group.is_(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        error = self._validate_current_member(group, member_id, group_instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if protocol_type is not None and protocol_type != group.protocol_type:
            return ErrorCode.inconsistent_group_protocol
        if protocol_name is not None and protocol_name != group.protocol_name:
            return ErrorCode.inconsistent_group_protocol
        return None

    # -- Heartbeat ------------------------------------------------------------------------

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        callback: Callable[[ErrorCode], None],
    ) -> None:
        with self._deferring():
            if not group_id:
                self._defer(callback, ErrorCode.invalid_group_id)
                return
            group = self._get_group(group_id)
            if group is None:
                self._defer(callback, ErrorCode.unknown_member_id)
                return
            with group.lock:
                error = self._heartbeat_locked(group, member_id, group_instance_id, generation_id)
                self._defer(callback, error)

    def _heartbeat_locked(
        self,
        group: GroupMetadata,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
    ) -> ErrorCode:
        if group.is_(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        error = self._validate_current_member(group, member_id, group_instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if group.is_(GroupState.EMPTY):
            return ErrorCode.unknown_member_id
        member = group.get(member_id)
        self._schedule_heartbeat_expiration(group, member, member.session_timeout_ms)
        if group.is_(GroupState.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    # -- LeaveGroup -----------------------------------------------------------------------

    def leave_group(
        self,
        group_id: str,
        members: Sequence[MemberIdentity],
        callback: Callable[[LeaveGroupResult], None],
    ) -> None:
        """LeaveGroup for one member (v0-v2) or a batch (v3+, by member or instance id)."""
        with self._deferring():
            if not group_id:
                self._defer(callback, LeaveGroupResult(ErrorCode.invalid_group_id))
                return
            group = self._get_group(group_id)
            if group is None:
                self._defer(
                    callback,
                    LeaveGroupResult(
                        ErrorCode.none,
                        tuple(
                            MemberLeaveResult(
                                m.member_id, m.group_instance_id, ErrorCode.unknown_member_id
                            )
                            for m in members
                        ),
                    ),
                )
                return
            with group.lock:
                if group.is_(GroupState.DEAD):
                    self._defer(callback, LeaveGroupResult(ErrorCode.coordinator_not_available))
                    return
                results = tuple(
                    MemberLeaveResult(m.member_id, m.group_instance_id, self._leave_one(group, m))
                    for m in members
                )
                self._defer(callback, LeaveGroupResult(ErrorCode.none, results))

    def _leave_one(self, group: GroupMetadata, leaving: MemberIdentity) -> ErrorCode:
        member_id = leaving.member_id
        if member_id == UNKNOWN_MEMBER_ID:
            current = (
                group.current_static_member_id(leaving.group_instance_id)
                if leaving.group_instance_id is not None
                else None
            )
            if current is None:
                return ErrorCode.unknown_member_id
            member_id = current
        elif group.is_pending_member(member_id):
            self._remove_pending_member_and_update_group(group, member_id)
            log.info("pending member left the group", group=group.group_id, member=member_id)
            return ErrorCode.none
        else:
            error = self._validate_current_member(group, member_id, leaving.group_instance_id)
            if error is not None:
                return error
        member = group.get(member_id)
        log.info(
            "member left the group",
            group=group.group_id,
            member=member_id,
            group_instance_id=member.group_instance_id,
            generation=group.generation_id,
            reason=leaving.reason,
        )
        self._remove_member_and_update_group(
            group, member, f"removing member {member_id} on LeaveGroup ({leaving.reason})"
        )
        return ErrorCode.none

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
    ) -> None:
        """OffsetCommit. Generation -1 with an empty member id is a simple (standalone)
        commit, allowed while the group has no members. ``retention_ms`` is v2-v4's
        retention_time (-1: the broker's offsets.retention.minutes)."""
        with self._deferring():
            errors = self._offsets.unknown_partitions(offsets)
            valid = {tp: om for tp, om in offsets.items() if tp not in errors}
            if not valid:
                self._defer(callback, errors)
                return
            group = self._get_or_create_group(group_id, create=generation_id < 0)
            if group is None:
                # Not a group we know, and not a simple commit: an old generation.
                errors.update(dict.fromkeys(valid, ErrorCode.illegal_generation))
                self._defer(callback, errors)
                return
            with group.lock:
                error = self._validate_offset_commit(
                    group, generation_id, member_id, group_instance_id
                )
                if error is None and group.is_(GroupState.COMPLETING_REBALANCE):
                    error = ErrorCode.rebalance_in_progress
                if error is not None:
                    errors.update(dict.fromkeys(valid, error))
                    self._defer(callback, errors)
                    return
                if group.state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
                    member = group.members.get(member_id)
                    if member is not None:
                        self._schedule_heartbeat_expiration(
                            group, member, member.session_timeout_ms
                        )
                errors.update(self._offsets.store_offsets(group, valid, retention_ms))
            self._defer(callback, errors)

    def _validate_offset_commit(
        self,
        group: GroupMetadata,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
    ) -> ErrorCode | None:
        if group.is_(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            error = self._validate_current_member(group, member_id, group_instance_id)
            if error is not None:
                return error
            if generation_id != group.generation_id:
                return ErrorCode.illegal_generation
            return None
        if not group.is_(GroupState.EMPTY):
            # Only members commit for a group with members.
            return ErrorCode.unknown_member_id
        return None

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
        group = self._get_or_create_group(group_id, create=True)
        assert group is not None
        with group.lock:
            error: ErrorCode | None = None
            if group.is_(GroupState.DEAD):
                error = ErrorCode.coordinator_not_available
            elif generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID:
                error = self._validate_current_member(group, member_id, group_instance_id)
                if error is None and generation_id != group.generation_id:
                    error = ErrorCode.illegal_generation
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
            g.group_id for g in self._all_groups() if g.pending_txn_offsets
        }
        for group_id in sorted(g for g in candidates if in_partition(g)):
            group = self._get_or_create_group(group_id, create=True)
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
    ) -> None:
        """OffsetFetch: ``partitions=None`` returns every committed partition; unknown
        partitions answer offset -1."""
        with self._deferring():
            group = self._get_group(group_id)
            self._defer(
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
        with self._deferring():
            errors = self._offsets.unknown_partitions(partitions)
            eligible = [tp for tp in partitions if tp not in errors]
            group = self._get_group(group_id)
            if group is None:
                self._defer(callback, OffsetDeleteResult(ErrorCode.group_id_not_found, {}))
                return
            with group.lock:
                state = group.state
                if state is GroupState.DEAD:
                    self._defer(callback, OffsetDeleteResult(ErrorCode.group_id_not_found, {}))
                    return
                if state is not GroupState.EMPTY:
                    if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
                        self._defer(callback, OffsetDeleteResult(ErrorCode.non_empty_group, {}))
                        return
                    subscribed = [tp for tp in eligible if group.is_subscribed_to_topic(tp.topic)]
                    for tp in subscribed:
                        errors[tp] = ErrorCode.group_subscribed_to_topic
                    eligible = [tp for tp in eligible if tp not in errors]
                errors.update(self._offsets.delete_offsets(group, eligible))
            self._defer(callback, OffsetDeleteResult(ErrorCode.none, errors))

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
        """ListGroups; filters compare case-insensitively (only the "classic" type exists)."""
        states = {s.lower() for s in states_filter}
        types = {t.lower() for t in types_filter}
        with self._deferring():
            with self._groups_lock:
                groups = list(self._groups.values())
            out: list[GroupOverview] = []
            if not types or "classic" in types:
                for group in groups:
                    with group.lock:
                        if group.is_(GroupState.DEAD):
                            continue
                        if states and group.state.value.lower() not in states:
                            continue
                        out.append(group.overview())
            self._defer(callback, out)

    def describe_groups(
        self, group_ids: Sequence[str], callback: Callable[[list[GroupDescription]], None]
    ) -> None:
        """DescribeGroups; an unknown group is described as Dead with no members."""
        with self._deferring():
            out = []
            for group_id in group_ids:
                group = self._get_group(group_id)
                if group is None:
                    out.append(GroupDescription(group_id, GroupState.DEAD.value, "", ""))
                    continue
                with group.lock:
                    out.append(group.describe())
            self._defer(callback, out)

    def delete_groups(
        self, group_ids: Sequence[str], callback: Callable[[dict[str, ErrorCode]], None]
    ) -> None:
        """DeleteGroups: only Empty groups go (with their offsets)."""
        with self._deferring():
            out: dict[str, ErrorCode] = {}
            for group_id in group_ids:
                group = self._get_group(group_id)
                if group is None:
                    out[group_id] = ErrorCode.group_id_not_found
                    continue
                with group.lock:
                    if group.is_(GroupState.DEAD):
                        out[group_id] = ErrorCode.group_id_not_found
                    elif group.is_(GroupState.EMPTY):
                        group.transition_to(GroupState.DEAD)
                        self._offsets.delete_all_offsets(group)
                        for task in group.pending_member_tasks.values():
                            task.cancel()
                        group.pending_member_tasks.clear()
                        self._remove_group(group)
                        out[group_id] = ErrorCode.none
                        log.info("deleted group", group=group_id)
                    else:
                        out[group_id] = ErrorCode.non_empty_group
            self._defer(callback, out)


@dataclass(slots=True)
class _JoinArgs:
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    callback: JoinCallback
    supports_skip_assignment: bool
    reason: str
