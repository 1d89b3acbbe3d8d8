"""The classic group protocol's state machine (JoinGroup, SyncGroup, Heartbeat, LeaveGroup)
over :class:`~kplane.broker.group.classic_group.ClassicGroup`.

Every operation takes a callback and may answer later from another thread: a JoinGroup is
parked until the rebalance completes (on a handler thread or the timer thread), a follower's
SyncGroup until the leader sends the assignment. Each group has one lock; callbacks run
after it is released (:class:`~kplane.broker.group.group_registry.GroupRegistry`).

Behaviour follows Kafka's classic group coordinator: MEMBER_ID_REQUIRED for JoinGroup v4+,
static membership (KIP-345), the initial rebalance delay for new groups, session and
rebalance timeouts, and the pending-sync timeout.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import structlog

from kplane.broker.group.classic_group import (
    UNKNOWN_MEMBER_ID,
    ClassicGroup,
    ClassicGroupMember,
    ClassicGroupState,
    JoinCallback,
    JoinGroupResult,
    SyncCallback,
    SyncGroupResult,
)
from kplane.broker.group.group import Group, GroupType, now_ms
from kplane.broker.group.group_config import GroupConfig
from kplane.broker.group.group_registry import GroupRegistry
from kplane.broker.utils.purgatory import DelayedOperation, DelayedOperationPurgatory
from kplane.broker.utils.timer import SystemTimer
from kplane.protocol.errors import ErrorCode

log = structlog.get_logger(__name__)


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


def _join_key(group_id: str) -> tuple[str, str]:
    return ("join", group_id)


class _DelayedJoin(DelayedOperation):
    """Completes the join phase once every known member rejoined, or at the rebalance timeout."""

    def __init__(
        self, coordinator: ClassicGroupProtocol, group: ClassicGroup, delay_ms: int
    ) -> None:
        super().__init__(delay_ms)
        self.coordinator = coordinator
        self.group = group

    def try_complete(self) -> bool:
        with self.group.lock:
            if self.group.has_all_members_joined:
                return self.force_complete()
            return False

    def on_complete(self) -> None:
        self.coordinator.complete_join(self.group)


class _InitialDelayedJoin(_DelayedJoin):
    """group.initial.rebalance.delay.ms for a new group: waits, and waits again while new
    members keep arriving, up to the rebalance timeout."""

    def __init__(
        self,
        coordinator: ClassicGroupProtocol,
        purgatory: DelayedOperationPurgatory,
        group: ClassicGroup,
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
        with self.coordinator.groups.deferring(), self.group.lock:
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
                self.coordinator.complete_join(self.group)


class ClassicGroupProtocol:
    """The classic groups' membership: joins, syncs, heartbeats, leaves and their timers."""

    def __init__(self, config: GroupConfig, timer: SystemTimer, groups: GroupRegistry) -> None:
        self.config = config
        self._timer = timer
        self.groups = groups
        self._rebalance_purgatory = DelayedOperationPurgatory("Rebalance", timer)

    def _group(self, group_id: str, create: bool = False) -> ClassicGroup | None:
        """The classic group ``group_id`` (created when ``create``: an empty consumer group
        becomes a classic one, keeping its offsets, as Kafka's maybeDeleteEmptyConsumerGroup
        before getOrMaybeCreateClassicGroup); None when there is none, or the id names a
        live group of another type (a share group, empty or not, stays one)."""
        group: Group | None
        if create:
            group = self.groups.get_or_create(
                group_id, lambda gid: ClassicGroup(gid, state_timestamp_ms=now_ms())
            )
            if group.group_type is GroupType.CONSUMER:
                with group.lock:
                    if group.is_empty and not group.is_dead:
                        converted = ClassicGroup(
                            group_id,
                            state_timestamp_ms=now_ms(),
                            offsets=group.offsets,
                            pending_txn_offsets=group.pending_txn_offsets,
                        )
                        if self.groups.replace(group, converted):
                            group.mark_dead()
                            log.info("converted empty group to a classic group", group=group_id)
                            return converted
        else:
            group = self.groups.get(group_id)
        return group if isinstance(group, ClassicGroup) else None

    def shutdown(self, group: ClassicGroup) -> None:
        """Cancel ``group``'s timers."""
        with group.lock:
            for member in group.members.values():
                if member.heartbeat_task is not None:
                    member.heartbeat_task.cancel()
            for task in group.pending_member_tasks.values():
                task.cancel()
            group.pending_member_tasks.clear()
            if group.sync_task is not None:
                group.sync_task.cancel()

    def release(self, group: ClassicGroup) -> None:
        """``group`` becomes a consumer group (an online upgrade): members parked in
        JoinGroup or SyncGroup are answered REBALANCE_IN_PROGRESS, so that they rejoin it
        (Kafka's completeAllJoinFutures/completeAllSyncFutures), and its timers stop. The
        caller holds the group's lock, inside ``groups.deferring()``."""
        for member in group.all_members():
            join = group.take_join_callback(member)
            self.groups.defer(
                join, JoinGroupResult(member.member_id, ErrorCode.rebalance_in_progress)
            )
            sync = group.take_sync_callback(member)
            self.groups.defer(sync, SyncGroupResult(ErrorCode.rebalance_in_progress))
        self.shutdown(group)

    def adopt(self, group: ClassicGroup, rebalance: str | None) -> None:
        """``group`` was a consumer group (an online downgrade) and is Stable at its last
        group epoch: its members' sessions start and, given a reason, a rebalance begins,
        so that they rejoin and their leader assigns (Kafka's convertToClassicGroup)."""
        with group.lock:
            for member in group.all_members():
                self._schedule_heartbeat_expiration(group, member, member.session_timeout_ms)
            if rebalance is not None:
                self._prepare_rebalance(group, rebalance)

    def on_offset_commit(self, group: ClassicGroup, member_id: str) -> None:
        """A member's commit counts as a heartbeat while the group is Stable or rebalancing."""
        if group.state in (ClassicGroupState.STABLE, ClassicGroupState.PREPARING_REBALANCE):
            member = group.members.get(member_id)
            if member is not None:
                self._schedule_heartbeat_expiration(group, member, member.session_timeout_ms)

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
        with self.groups.deferring():
            if not group_id:
                self.groups.defer(callback, JoinGroupResult(member_id, ErrorCode.invalid_group_id))
                return
            if not (
                self.config.min_session_timeout_ms
                <= session_timeout_ms
                <= self.config.max_session_timeout_ms
            ):
                self.groups.defer(
                    callback, JoinGroupResult(member_id, ErrorCode.invalid_session_timeout)
                )
                return
            is_unknown = member_id == UNKNOWN_MEMBER_ID
            other = self.groups.get(group_id)
            # Kafka's classicGroupJoin: the id names a group of another type than classic
            # or consumer (a share group, empty or not).
            if other is not None and other.group_type is GroupType.SHARE and not other.is_dead:
                self.groups.defer(
                    callback,
                    JoinGroupResult(UNKNOWN_MEMBER_ID, ErrorCode.inconsistent_group_protocol),
                )
                return
            group = self._group(group_id, create=is_unknown)
            if group is None:
                other = self.groups.get(group_id)
                error = (
                    ErrorCode.inconsistent_group_protocol
                    if other is not None and not other.is_dead and not other.is_empty
                    else ErrorCode.unknown_member_id
                )
                self.groups.defer(callback, JoinGroupResult(member_id, error))
                return
            with group.lock:
                if not self._accept_joining_member(group, member_id):
                    removed = group.remove(member_id)
                    if removed is not None:
                        self._cancel_heartbeat(removed)
                    self.groups.defer(
                        callback,
                        JoinGroupResult(UNKNOWN_MEMBER_ID, ErrorCode.group_max_size_reached),
                    )
                    if group.is_(ClassicGroupState.PREPARING_REBALANCE):
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
                if group.is_(ClassicGroupState.PREPARING_REBALANCE):
                    self._rebalance_purgatory.check_and_complete(_join_key(group_id))

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        state = group.state
        if state in (ClassicGroupState.EMPTY, ClassicGroupState.DEAD):
            return True
        if state is ClassicGroupState.PREPARING_REBALANCE:
            return (
                group.has(member_id) and group.get(member_id).is_awaiting_join
            ) or group.num_members_awaiting_join < self.config.max_size
        return group.has(member_id) or group.size < self.config.max_size

    def _new_member_join(
        self, group: ClassicGroup, require_known_member_id: bool, a: _JoinArgs
    ) -> None:
        if group.is_(ClassicGroupState.DEAD):
            self.groups.defer(
                a.callback, JoinGroupResult(UNKNOWN_MEMBER_ID, ErrorCode.coordinator_not_available)
            )
            return
        if not group.supports_protocols(a.protocol_type, (name for name, _ in a.protocols)):
            self.groups.defer(
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
            self.groups.defer(
                a.callback, JoinGroupResult(new_member_id, ErrorCode.member_id_required)
            )
        else:
            self._add_member_and_rebalance(group, new_member_id, a)

    def _current_member_join(self, group: ClassicGroup, member_id: str, a: _JoinArgs) -> None:
        if group.is_(ClassicGroupState.DEAD):
            self.groups.defer(
                a.callback, JoinGroupResult(member_id, ErrorCode.coordinator_not_available)
            )
            return
        if not group.supports_protocols(a.protocol_type, (name for name, _ in a.protocols)):
            self.groups.defer(
                a.callback, JoinGroupResult(member_id, ErrorCode.inconsistent_group_protocol)
            )
            return
        if group.is_pending_member(member_id):
            if a.group_instance_id is not None:
                # A pending member is always dynamic; treat the mismatch as fencing.
                self.groups.defer(
                    a.callback, JoinGroupResult(member_id, ErrorCode.fenced_instance_id)
                )
                return
            self._add_member_and_rebalance(group, member_id, a)
            return
        error = group.validate_member(member_id, a.group_instance_id)
        if error is not None:
            self.groups.defer(a.callback, JoinGroupResult(member_id, error))
            return
        member = group.get(member_id)
        state = group.state
        if state is ClassicGroupState.PREPARING_REBALANCE:
            self._update_member_and_rebalance(group, member, a, "member joining during rebalance")
        elif state is ClassicGroupState.COMPLETING_REBALANCE:
            if member.matches(a.protocols):
                # A retried JoinGroup: answer with the current generation again.
                self.groups.defer(
                    a.callback,
                    self._join_result(group, member_id, with_members=group.is_leader(member_id)),
                )
            else:
                self._update_member_and_rebalance(
                    group, member, a, "member metadata changed during CompletingRebalance"
                )
        elif state is ClassicGroupState.STABLE:
            if group.is_leader(member_id):
                self._update_member_and_rebalance(group, member, a, "leader rejoining")
            elif not member.matches(a.protocols):
                self._update_member_and_rebalance(group, member, a, "member metadata changed")
            else:
                self.groups.defer(
                    a.callback, self._join_result(group, member_id, with_members=False)
                )
        else:
            self.groups.defer(a.callback, JoinGroupResult(member_id, ErrorCode.unknown_member_id))

    def _join_result(
        self, group: ClassicGroup, member_id: str, *, with_members: bool
    ) -> JoinGroupResult:
        return JoinGroupResult(
            member_id=member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader_id=group.leader_id or "",
            members=group.current_member_metadata() if with_members else (),
        )

    def _add_member_and_rebalance(self, group: ClassicGroup, member_id: str, a: _JoinArgs) -> None:
        member = ClassicGroupMember(
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
        if group.is_(ClassicGroupState.PREPARING_REBALANCE) and group.generation_id == 0:
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
        self, group: ClassicGroup, member: ClassicGroupMember, a: _JoinArgs, reason: str
    ) -> None:
        replaced = group.update_member(
            member, a.protocols, a.rebalance_timeout_ms, a.session_timeout_ms, a.callback
        )
        if replaced is not None and replaced is not a.callback:
            # The same member joined twice (its first request presumably timed out).
            self.groups.defer(
                replaced, JoinGroupResult(member.member_id, ErrorCode.rebalance_in_progress)
            )
        self._maybe_prepare_rebalance(group, f"{reason}: {member.member_id} ({a.reason})")

    def _update_static_member_and_rebalance(
        self, group: ClassicGroup, old_member_id: str, new_member_id: str, a: _JoinArgs
    ) -> None:
        current_leader = group.leader_id or ""
        member, old_join, old_sync = group.replace_static_member(
            a.group_instance_id or "", old_member_id, new_member_id
        )
        self.groups.defer(old_join, JoinGroupResult(old_member_id, ErrorCode.fenced_instance_id))
        self.groups.defer(old_sync, SyncGroupResult(ErrorCode.fenced_instance_id))
        member.client_id = a.client_id
        member.client_host = a.client_host
        self._schedule_heartbeat_expiration(group, member, member.session_timeout_ms)
        group.update_member(
            member, a.protocols, a.rebalance_timeout_ms, a.session_timeout_ms, a.callback
        )
        state = group.state
        if state is ClassicGroupState.STABLE:
            if group.protocol_name == group.select_protocol():
                # Same protocol: no rebalance, the member keeps its assignment. The old
                # leader id is returned so that the rejoined member does not assign.
                skip = group.is_leader(new_member_id) and a.supports_skip_assignment
                callback = group.take_join_callback(member)
                self.groups.defer(
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
        elif state is ClassicGroupState.COMPLETING_REBALANCE:
            self._prepare_rebalance(
                group, f"static member {new_member_id} rejoined during CompletingRebalance"
            )
        # PreparingRebalance: the member is parked with the others.

    # -- rebalance ------------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.can_rebalance:
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.is_(ClassicGroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        self._cancel_sync_expiration(group)
        operation: DelayedOperation
        if group.is_(ClassicGroupState.EMPTY):
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
        group.transition_to(ClassicGroupState.PREPARING_REBALANCE)
        log.info(
            "preparing to rebalance group",
            group=group.group_id,
            old_state=old_state.value,
            generation=group.generation_id,
            members=group.size,
            reason=reason,
        )
        self._rebalance_purgatory.try_complete_else_watch(operation, [_join_key(group.group_id)])

    def complete_join(self, group: ClassicGroup) -> None:
        """The join phase ends: members that did not rejoin go, the next generation starts."""
        with self.groups.deferring(), group.lock:
            if not group.is_(ClassicGroupState.PREPARING_REBALANCE):
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
            if group.is_(ClassicGroupState.EMPTY):
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
                self.groups.defer(
                    callback,
                    self._join_result(
                        group, member.member_id, with_members=group.is_leader(member.member_id)
                    ),
                )
                self._schedule_heartbeat_expiration(group, member, member.session_timeout_ms)
                member.is_new = False
                group.pending_sync_members.add(member.member_id)
            self._schedule_sync_expiration(group)

    def _reset_and_propagate_assignment_error(self, group: ClassicGroup, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: ClassicGroup, error: ErrorCode) -> None:
        ok = error is ErrorCode.none
        for member in group.members.values():
            callback = group.take_sync_callback(member)
            if callback is None:
                continue
            self.groups.defer(
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
        self, group: ClassicGroup, member: ClassicGroupMember, reason: str
    ) -> None:
        callback = group.take_join_callback(member)
        self.groups.defer(callback, JoinGroupResult(UNKNOWN_MEMBER_ID, ErrorCode.unknown_member_id))
        sync_callback = group.take_sync_callback(member)
        self.groups.defer(sync_callback, SyncGroupResult(ErrorCode.unknown_member_id))
        group.remove(member.member_id)
        self._cancel_heartbeat(member)
        state = group.state
        if state in (ClassicGroupState.STABLE, ClassicGroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, reason)
        elif state is ClassicGroupState.PREPARING_REBALANCE:
            self._rebalance_purgatory.check_and_complete(_join_key(group.group_id))

    def _remove_pending_member_and_update_group(self, group: ClassicGroup, member_id: str) -> None:
        group.remove(member_id)
        task = group.pending_member_tasks.pop(member_id, None)
        if task is not None:
            task.cancel()
        if group.is_(ClassicGroupState.PREPARING_REBALANCE):
            self._rebalance_purgatory.check_and_complete(_join_key(group.group_id))

    # -- timers -------------------------------------------------------------------------

    def _schedule_heartbeat_expiration(
        self, group: ClassicGroup, member: ClassicGroupMember, timeout_ms: int
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
    def _cancel_heartbeat(member: ClassicGroupMember) -> None:
        member.heartbeat_epoch += 1
        if member.heartbeat_task is not None:
            member.heartbeat_task.cancel()
            member.heartbeat_task = None

    def _on_expire_heartbeat(self, group: ClassicGroup, member_id: str, epoch: int) -> None:
        with self.groups.deferring(), group.lock:
            if group.is_(ClassicGroupState.DEAD):
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
        self, group: ClassicGroup, member_id: str, timeout_ms: int
    ) -> None:
        old = group.pending_member_tasks.pop(member_id, None)
        if old is not None:
            old.cancel()

        def expire() -> None:
            with self.groups.deferring(), group.lock:
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

    def _schedule_sync_expiration(self, group: ClassicGroup) -> None:
        self._cancel_sync_expiration(group)
        generation = group.generation_id

        def expire() -> None:
            with self.groups.deferring(), group.lock:
                if group.sync_task is not task:
                    return
                group.sync_task = None
                if generation != group.generation_id or group.state not in (
                    ClassicGroupState.COMPLETING_REBALANCE,
                    ClassicGroupState.STABLE,
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
    def _cancel_sync_expiration(group: ClassicGroup) -> None:
        if group.sync_task is not None:
            group.sync_task.cancel()
            group.sync_task = None

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
        with self.groups.deferring():
            if not group_id:
                self.groups.defer(callback, SyncGroupResult(ErrorCode.invalid_group_id))
                return
            group = self._group(group_id)
            if group is None:
                self.groups.defer(callback, SyncGroupResult(ErrorCode.unknown_member_id))
                return
            with group.lock:
                error = self._validate_sync(
                    group, generation_id, member_id, group_instance_id, protocol_type, protocol_name
                )
                if error is not None:
                    self.groups.defer(callback, SyncGroupResult(error))
                    return
                state = group.state
                if state is ClassicGroupState.EMPTY:
                    self.groups.defer(callback, SyncGroupResult(ErrorCode.unknown_member_id))
                elif state is ClassicGroupState.PREPARING_REBALANCE:
                    self.groups.defer(callback, SyncGroupResult(ErrorCode.rebalance_in_progress))
                elif state is ClassicGroupState.COMPLETING_REBALANCE:
                    member = group.get(member_id)
                    previous = member.awaiting_sync
                    member.awaiting_sync = callback
                    if previous is not None and previous is not callback:
                        self.groups.defer(
                            previous, SyncGroupResult(ErrorCode.rebalance_in_progress)
                        )
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
                        group.transition_to(ClassicGroupState.STABLE)
                elif state is ClassicGroupState.STABLE:
                    group.pending_sync_members.discard(member_id)
                    if not group.pending_sync_members:
                        self._cancel_sync_expiration(group)
                    member = group.get(member_id)
                    self.groups.defer(
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
                    self.groups.defer(
                        callback, SyncGroupResult(ErrorCode.coordinator_not_available)
                    )

    def _validate_sync(
        self,
        group: ClassicGroup,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
    ) -> ErrorCode | None:
        if group.is_(ClassicGroupState.DEAD):
            return ErrorCode.coordinator_not_available
        error = group.validate_member(member_id, group_instance_id)
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
        with self.groups.deferring():
            if not group_id:
                self.groups.defer(callback, ErrorCode.invalid_group_id)
                return
            group = self._group(group_id)
            if group is None:
                self.groups.defer(callback, ErrorCode.unknown_member_id)
                return
            with group.lock:
                error = self._heartbeat_locked(group, member_id, group_instance_id, generation_id)
                self.groups.defer(callback, error)

    def _heartbeat_locked(
        self,
        group: ClassicGroup,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
    ) -> ErrorCode:
        if group.is_(ClassicGroupState.DEAD):
            return ErrorCode.coordinator_not_available
        error = group.validate_member(member_id, group_instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if group.is_(ClassicGroupState.EMPTY):
            return ErrorCode.unknown_member_id
        member = group.get(member_id)
        self._schedule_heartbeat_expiration(group, member, member.session_timeout_ms)
        if group.is_(ClassicGroupState.PREPARING_REBALANCE):
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
        with self.groups.deferring():
            if not group_id:
                self.groups.defer(callback, LeaveGroupResult(ErrorCode.invalid_group_id))
                return
            group = self._group(group_id)
            if group is None:
                self.groups.defer(
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
                if group.is_(ClassicGroupState.DEAD):
                    self.groups.defer(
                        callback, LeaveGroupResult(ErrorCode.coordinator_not_available)
                    )
                    return
                results = tuple(
                    MemberLeaveResult(m.member_id, m.group_instance_id, self._leave_one(group, m))
                    for m in members
                )
                self.groups.defer(callback, LeaveGroupResult(ErrorCode.none, results))

    def _leave_one(self, group: ClassicGroup, leaving: MemberIdentity) -> ErrorCode:
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
            error = group.validate_member(member_id, leaving.group_instance_id)
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
