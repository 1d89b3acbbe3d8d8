"""The consumer group protocol's state machine (KIP-848's ConsumerGroupHeartbeat) over
:class:`~kplane.broker.group.consumer_group.ConsumerGroup`, as Kafka's group coordinator
runs it.

A heartbeat updates the member (subscription, rack, assignor), bumps the group epoch when
the group changed (a member joined or left, a subscription changed, the subscribed topics
resolved to other topics or partitions), computes a new target assignment when the group
epoch passed the assignment epoch, and moves the member one step towards its target
(:mod:`kplane.broker.group.current_assignment`). Members that stop heartbeating are fenced
after the session timeout, members that do not revoke after their rebalance timeout.
Heartbeats answer at once; nothing is parked.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from kplane.broker.group.assignor import MemberSubscription, PartitionAssignor, TopicMetadata
from kplane.broker.group.classic_group import ClassicGroup
from kplane.broker.group.classic_protocol import ClassicGroupProtocol
from kplane.broker.group.consumer_group import (
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
)
from kplane.broker.group.consumer_group_store import StoredGroups
from kplane.broker.group.current_assignment import reconcile
from kplane.broker.group.embedded_protocol import MalformedProtocol
from kplane.broker.group.group_config import GroupConfig
from kplane.broker.group.group_registry import GroupRegistry
from kplane.broker.group.heartbeat_result import HeartbeatResult
from kplane.broker.group.migration import (
    classic_group_from_consumer,
    consumer_group_from_classic,
    uses_consumer_protocol,
)
from kplane.broker.group.modern_group import LEAVE_GROUP_MEMBER_EPOCH, Assignment
from kplane.broker.group.range_assignor import RangeAssignor
from kplane.broker.group.topic_regex import InvalidRegex, compile_topic_regex
from kplane.broker.group.uniform_assignor import UniformAssignor
from kplane.broker.metadata.cache import MetadataSnapshot
from kplane.broker.utils.timer import SystemTimer
from kplane.protocol.errors import ErrorCode, KafkaError

log = structlog.get_logger(__name__)

ASSIGNORS: Mapping[str, Callable[[], PartitionAssignor]] = {
    "uniform": UniformAssignor,
    "range": RangeAssignor,
}
"""The server-side assignors by the name a member's ServerAssignor gives."""

_SESSION = "session"
_REVOCATION = "revocation"
_JOIN = "join"
_SYNC = "sync"


@dataclass(frozen=True, slots=True)
class ConsumerGroupHeartbeat:
    """One ConsumerGroupHeartbeat request; None (or -1) fields did not change."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None
    client_id: str = ""
    client_host: str = ""


class ConsumerGroupProtocol:
    """The consumer groups' membership: heartbeats, leaves, target assignments, timers.

    ``topics()`` is the current metadata, which serves once it holds every topic of
    ``stored_topics()`` (after a start-up the controller's metadata comes in steps, and a
    group must not take a topic not yet known for a deleted one).
    ``session_timeout_ms(group_id)`` and ``heartbeat_interval_ms(group_id)`` give a group's
    settings (its own configs or the broker's); ``store`` keeps each group's state, written
    before a heartbeat is answered. ``owns(group_id)``: whether this broker coordinates the
    group now (a member is fenced only by its coordinator).
    """

    def __init__(
        self,
        config: GroupConfig,
        timer: SystemTimer,
        groups: GroupRegistry,
        topics: Callable[[], MetadataSnapshot],
        *,
        stored_topics: Callable[[], Iterable[str]],
        session_timeout_ms: Callable[[str], int],
        heartbeat_interval_ms: Callable[[str], int],
        store: StoredGroups,
        owns: Callable[[str], bool] = lambda _group_id: True,
        classic: ClassicGroupProtocol | None = None,
    ) -> None:
        self.config = config
        self._timer = timer
        self.groups = groups
        self._topics = topics
        self._stored_topics = stored_topics
        self._caught_up = False
        self._session_timeout_ms = session_timeout_ms
        self._heartbeat_interval_ms = heartbeat_interval_ms
        self._store = store
        self._owns = owns
        self._classic = classic
        self._assignors = {name: ASSIGNORS[name]() for name in config.consumer_assignors}

    # -- the request ------------------------------------------------------------------

    def heartbeat(self, req: ConsumerGroupHeartbeat) -> HeartbeatResult:
        """ConsumerGroupHeartbeat: join (epoch 0), heartbeat, or leave (-1; -2 for a
        static member that will come back)."""
        with self.groups.deferring():  # an upgrade answers the classic members' requests
            try:
                self._validate(req)
                if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                    return self._leave(req)
                return self._join_or_heartbeat(req)
            except KafkaError as exc:
                return HeartbeatResult(exc.code, exc.message)

    def _validate(self, req: ConsumerGroupHeartbeat) -> None:
        def invalid(message: str) -> KafkaError:
            return KafkaError(ErrorCode.invalid_request, message)

        if not req.group_id:
            raise invalid("GroupId can't be empty.")
        if req.instance_id == "":
            raise invalid("InstanceId can't be empty.")
        if req.rack_id == "":
            raise invalid("RackId can't be empty.")
        if not req.member_id:
            raise invalid("MemberId can't be empty.")
        epoch = req.member_epoch
        if epoch == 0:
            if req.rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if req.owned is None or req.owned:
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                raise invalid(
                    "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null "
                    "when (re-)joining."
                )
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if req.instance_id is None:
                raise invalid("InstanceId can't be null.")
        elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise invalid("MemberEpoch is invalid.")
        if req.subscribed_topic_regex is not None:
            try:
                compile_topic_regex(req.subscribed_topic_regex)
            except InvalidRegex as exc:
                raise KafkaError(
                    ErrorCode.invalid_regular_expression,
                    f"SubscribedTopicRegex `{req.subscribed_topic_regex}` is not a valid "
                    f"regular expression: {exc}.",
                ) from None
        if req.server_assignor is not None and req.server_assignor not in self._assignors:
            raise KafkaError(
                ErrorCode.unsupported_assignor,
                f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: "
                f"{', '.join(self._assignors)}.",
            )

    # -- groups -----------------------------------------------------------------------

    def group(self, group_id: str, create: bool) -> ConsumerGroup:
        """The consumer group ``group_id``; created when ``create`` (a classic group
        becomes one, keeping its offsets: an empty one always, one with members as
        group.consumer.migration.policy allows); else GROUP_ID_NOT_FOUND."""
        group = self.groups.get(group_id)
        if isinstance(group, ConsumerGroup) and not group.is_dead:
            return group
        if group is None and create:
            made = self.groups.get_or_create(group_id, ConsumerGroup)
            if isinstance(made, ConsumerGroup):
                return made
            group = made
        if isinstance(group, ClassicGroup) and create:
            with group.lock:
                if group.is_empty and not group.is_dead:
                    converted = ConsumerGroup(
                        group_id,
                        offsets=group.offsets,
                        pending_txn_offsets=group.pending_txn_offsets,
                    )
                    if self.groups.replace(group, converted):
                        group.mark_dead()
                        log.info("converted empty classic group to consumer group", group=group_id)
                        return converted
                elif not group.is_dead and self._may_upgrade(group):
                    upgraded = self._upgrade(group)
                    if upgraded is not None:
                        return upgraded
        if group is None or group.is_dead:
            raise KafkaError(ErrorCode.group_id_not_found, f"Consumer group {group_id} not found.")
        raise KafkaError(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group")

    def _member(
        self, group: ConsumerGroup, req: ConsumerGroupHeartbeat
    ) -> tuple[ConsumerGroupMember, bool]:
        """The member the request is from, and whether it is new to the group: new on
        epoch 0, a static member taking over its instance's place, or the known member at a
        valid epoch."""
        existing = group.members.get(req.member_id)
        if req.instance_id is not None:
            static = group.static_member(req.instance_id)
            if req.member_epoch == 0:
                if static is None or static.member_id == req.member_id:
                    return (static, False) if static else (ConsumerGroupMember(req.member_id), True)
                if (
                    static.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH
                    and static.classic is None
                ):
                    raise KafkaError(
                        ErrorCode.unreleased_instance_id,
                        f"Static member {static.member_id} with instance id {req.instance_id} "
                        "is not released yet.",
                    )
                return (
                    self.replace_static_member(group, static, req.member_id, req.instance_id),
                    False,
                )
            if existing is None:
                raise KafkaError(ErrorCode.unknown_member_id)
            if static is None or static.member_id != req.member_id:
                raise KafkaError(ErrorCode.fenced_instance_id)
        elif req.member_epoch == 0:
            if existing is None:
                return ConsumerGroupMember(req.member_id), True
            return existing, False
        if existing is None:
            raise KafkaError(
                ErrorCode.unknown_member_id,
                f"Member {req.member_id} is not a member of group {group.group_id}.",
            )
        self._check_epoch(existing, req)
        return existing, False

    def replace_static_member(
        self,
        group: ConsumerGroup,
        static: ConsumerGroupMember,
        member_id: str,
        instance_id: str,
    ) -> ConsumerGroupMember:
        """The static member's instance comes back under a new ``member_id``: it takes the
        old member's place, epoch and target assignment, without a rebalance (either
        protocol's member). Returns the joining member, at epoch 0."""
        target = group.target.get(static.member_id, {})
        group.remove_member(static.member_id)
        self.cancel_timers(group, static.member_id)
        group.target[member_id] = target
        log.info(
            "static member rejoined",
            group=group.group_id,
            instance_id=instance_id,
            old_member=static.member_id,
            member=member_id,
        )
        return dataclasses.replace(
            static, member_id=member_id, member_epoch=0, previous_member_epoch=0
        )

    @staticmethod
    def _check_epoch(member: ConsumerGroupMember, req: ConsumerGroupHeartbeat) -> None:
        """FENCED_MEMBER_EPOCH for an epoch ahead of the member's, or behind it unless it is
        the previous epoch and the member owns no more than it is assigned (the answer that
        bumped it was lost)."""
        received = req.member_epoch
        if received > member.member_epoch or (
            received < member.member_epoch
            and (
                received != member.previous_member_epoch
                or not _is_subset(req.owned, member.assigned)
            )
        ):
            raise KafkaError(
                ErrorCode.fenced_member_epoch,
                f"The consumer group member has a smaller member epoch ({received}) than the "
                f"one known by the group coordinator ({member.member_epoch}).",
            )

    # -- join and heartbeat -------------------------------------------------------------

    def snapshot(self) -> MetadataSnapshot:
        """The metadata, once caught up with the stored topics; else
        COORDINATOR_LOAD_IN_PROGRESS (the member retries)."""
        snapshot = self._topics()
        if not self._caught_up:
            missing = set(self._stored_topics()) - set(snapshot.topics)
            if missing:
                raise KafkaError(
                    ErrorCode.coordinator_load_in_progress,
                    f"the metadata of {len(missing)} topics has not arrived yet",
                )
            self._caught_up = True
        return snapshot

    def _join_or_heartbeat(self, req: ConsumerGroupHeartbeat) -> HeartbeatResult:
        snapshot = self.snapshot()
        group = self.group(req.group_id, create=req.member_epoch == 0)
        with group.lock:
            if group.is_dead:
                raise KafkaError(ErrorCode.coordinator_not_available)
            self.check_size(group, req.member_id, req.instance_id)
            member, joined = self._member(group, req)
            updated = dataclasses.replace(
                member,
                instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
                rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
                rebalance_timeout_ms=(
                    req.rebalance_timeout_ms
                    if req.rebalance_timeout_ms != -1
                    else member.rebalance_timeout_ms
                ),
                subscribed_topic_names=(
                    tuple(req.subscribed_topic_names)
                    if req.subscribed_topic_names is not None
                    else member.subscribed_topic_names
                ),
                subscribed_topic_regex=(
                    (req.subscribed_topic_regex or None)
                    if req.subscribed_topic_regex is not None
                    else member.subscribed_topic_regex
                ),
                server_assignor=(
                    req.server_assignor
                    if req.server_assignor is not None
                    else member.server_assignor
                ),
                client_id=req.client_id,
                client_host=req.client_host,
            )
            reconciled = self.update(group, member, updated, joined, req.owned, snapshot)
            self.persist(group)
            full = (
                req.rebalance_timeout_ms != -1
                and (
                    req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None
                )
                and req.owned is not None
            )
            changed = reconciled.assigned != member.assigned
            return HeartbeatResult(
                member_id=reconciled.member_id,
                member_epoch=reconciled.member_epoch,
                heartbeat_interval_ms=self._heartbeat_interval_ms(group.group_id),
                assignment=(
                    reconciled.assigned if req.member_epoch == 0 or full or changed else None
                ),
            )

    def topic_names(self) -> dict[uuid.UUID, str]:
        """The topics' names by id, as the metadata has them now."""
        return {info.topic_id: name for name, info in self._topics().topics.items()}

    def update(
        self,
        group: ConsumerGroup,
        member: ConsumerGroupMember,
        updated: ConsumerGroupMember,
        joined: bool,
        owned: Assignment | None,
        snapshot: MetadataSnapshot,
    ) -> ConsumerGroupMember:
        """A member's request changed it from ``member`` to ``updated`` (Kafka's steps of a
        heartbeat, for both protocols' members): the group epoch is bumped when it joined or
        its subscription changed, or the subscribed topics did; a new target assignment is
        computed when the group epoch passed the assignment epoch; the member moves one step
        towards its target (``owned``: what it reported owning). Returns the member after
        that step; its timers are rescheduled. The caller holds the lock and persists."""
        group.update_member(updated)
        group.bump_group_epoch(
            _fingerprint(group, snapshot),
            updated.member_id,
            joined,
            changed=_subscription(updated) != _subscription(member),
        )
        if group.group_epoch > group.assignment_epoch:
            self._compute_target(group, snapshot)
        reconciled = reconcile(
            updated,
            group.assignment_epoch,
            group.target.get(updated.member_id, {}),
            group.current_partition_epoch,
            owned,
        )
        group.update_member(reconciled)
        self._schedule_timers(group, updated, reconciled)
        return reconciled

    def check_size(self, group: ConsumerGroup, member_id: str, instance_id: str | None) -> None:
        """GROUP_MAX_SIZE_REACHED when a new member would pass group.consumer.max.size."""
        if member_id not in group.members and (
            len(group.members) >= self.config.consumer_max_size
            and (instance_id is None or group.static_member(instance_id) is None)
        ):
            raise KafkaError(
                ErrorCode.group_max_size_reached,
                f"The consumer group has reached its maximum capacity of "
                f"{self.config.consumer_max_size} members.",
            )

    def _compute_target(self, group: ConsumerGroup, snapshot: MetadataSnapshot) -> None:
        topics = _topic_metadata(group, snapshot)
        by_name = {t.name: t.topic_id for t in topics.values()}
        subscriptions = {
            m.member_id: MemberSubscription(
                m.member_id,
                m.instance_id,
                m.rack_id,
                frozenset(by_name[name] for name in _resolve(m, by_name) if name in by_name),
            )
            for m in group.members.values()
        }
        assignor = self._assignor(group)
        group.install_target(assignor.assign(subscriptions, topics, group.target), assignor.name)
        log.info(
            "consumer group target assignment computed",
            group=group.group_id,
            assignment_epoch=group.assignment_epoch,
            assignor=assignor.name,
            members=len(subscriptions),
            partitions=sum(t.num_partitions for t in topics.values()),
        )

    def _assignor(self, group: ConsumerGroup) -> PartitionAssignor:
        """The assignor most members ask for (ties: the earlier in group.consumer.assignors),
        the default when none asks."""
        wanted = Counter(m.server_assignor for m in group.members.values() if m.server_assignor)
        if not wanted:
            return next(iter(self._assignors.values()))
        order = list(self._assignors)
        name = max(wanted, key=lambda n: (wanted[n], -order.index(n)))
        return self._assignors[name]

    # -- leave and fencing --------------------------------------------------------------

    def _leave(self, req: ConsumerGroupHeartbeat) -> HeartbeatResult:
        group = self.group(req.group_id, create=False)
        with group.lock:
            if req.instance_id is None:
                member = group.members.get(req.member_id)
                if member is None:
                    raise KafkaError(ErrorCode.unknown_member_id)
            else:
                member = group.static_member(req.instance_id)
                if member is None:
                    raise KafkaError(ErrorCode.unknown_member_id)
                if member.member_id != req.member_id:
                    raise KafkaError(ErrorCode.fenced_instance_id)
                if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                    # Keeps its assignment until it comes back or its session expires.
                    group.update_member(
                        dataclasses.replace(member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH)
                    )
                    self._cancel_timer(group, _REVOCATION, member.member_id)
                    self.persist(group)
                    log.info(
                        "static member left temporarily",
                        group=group.group_id,
                        member=member.member_id,
                        instance_id=req.instance_id,
                    )
                    return HeartbeatResult(
                        member_id=member.member_id, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH
                    )
            self.fence(group, member.member_id, "the member left the group")
            return HeartbeatResult(
                member_id=member.member_id, member_epoch=LEAVE_GROUP_MEMBER_EPOCH
            )

    def fence(self, group: ConsumerGroup, member_id: str, reason: str) -> None:
        """Remove a member and bump the group epoch; its partitions are free at once. When
        the member was the last to speak the consumer protocol and the policy allows, the
        group becomes a classic group of the others instead (an online downgrade)."""
        leaving = group.members.get(member_id)
        if leaving is not None and self._may_downgrade(group, leaving):
            self._downgrade(group, member_id, reason)
            return
        group.remove_member(member_id)
        self.cancel_timers(group, member_id)
        group.group_epoch += 1
        group.subscription_fingerprint = _fingerprint(group, self._topics())
        self.persist(group)
        log.info(
            "member removed from consumer group",
            group=group.group_id,
            member=member_id,
            group_epoch=group.group_epoch,
            reason=reason,
        )

    # -- online migration (KIP-848) -----------------------------------------------------

    def _may_upgrade(self, group: ClassicGroup) -> bool:
        """Whether a classic group with members may become a consumer group now (the
        caller holds its lock): the policy allows it, its members embed the consumer
        protocol, and they fit group.consumer.max.size."""
        why = None
        if self._classic is None or not self.config.upgrade_enabled:
            why = "the online upgrade is disabled (group.consumer.migration.policy)"
        elif not uses_consumer_protocol(group):
            why = "the group does not use the consumer embedded protocol"
        elif group.size > self.config.consumer_max_size:
            why = "the group has more members than group.consumer.max.size"
        if why is not None:
            log.info("classic group not upgraded", group=group.group_id, reason=why)
        return why is None

    def _upgrade(self, group: ClassicGroup) -> ConsumerGroup | None:
        """A classic group with members becomes a consumer group (the caller holds its
        lock, inside ``groups.deferring()``): its members stay, at their generation, and
        are asked to rejoin by the heartbeats that follow. None when it did not happen."""
        assert self._classic is not None
        try:
            converted = consumer_group_from_classic(group, self._topics())
        except MalformedProtocol as exc:
            raise KafkaError(
                ErrorCode.group_id_not_found,
                f"Cannot upgrade the classic group {group.group_id} to consumer group because "
                "the embedded consumer protocol is malformed.",
            ) from exc
        if not self.groups.replace(group, converted):
            return None
        self._classic.release(group)
        group.mark_dead()
        with converted.lock:
            converted.subscription_fingerprint = _fingerprint(converted, self._topics())
            for member in converted.members.values():
                self.schedule_session(converted, member)
            self.persist(converted)
        log.info(
            "upgraded classic group to consumer group",
            group=group.group_id,
            group_epoch=converted.group_epoch,
            members=len(converted.members),
        )
        return converted

    def _may_downgrade(
        self, group: ConsumerGroup, leaving: ConsumerGroupMember, replaced: bool = False
    ) -> bool:
        """Whether the group becomes a classic group when ``leaving`` goes: it is the last
        member speaking the consumer protocol, others stay (or ``replaced``: a classic
        static member took its place), the policy allows it and they fit group.max.size
        (Kafka's validateOnlineDowngradeWithFencedMember and ...WithReplacedMemberId)."""
        others = [m for m in group.members.values() if m.member_id != leaving.member_id]
        if leaving.classic is not None or not (others or replaced) or self._classic is None:
            return False
        if any(m.classic is None for m in others):
            return False
        if not self.config.downgrade_enabled:
            log.info(
                "consumer group not downgraded",
                group=group.group_id,
                reason="the online downgrade is disabled (group.consumer.migration.policy)",
            )
            return False
        if len(others) > self.config.max_size:
            log.info(
                "consumer group not downgraded",
                group=group.group_id,
                reason="the group has more members than group.max.size",
            )
            return False
        return True

    def downgrade_on_replace(self, group: ConsumerGroup, replaced: ConsumerGroupMember) -> bool:
        """A classic static member took the place of ``replaced`` (already out of the
        group, its target the joining member's): when that was the last consumer-protocol
        member and the policy allows, the group becomes a classic group, Stable, the
        joining member holding that target (no rebalance). Whether it happened."""
        if not self._may_downgrade(group, replaced, replaced=True):
            return False
        return self._downgrade(
            group, replaced.member_id, "a classic static member replaced it", rebalance=False
        )

    def _downgrade(
        self, group: ConsumerGroup, leaving_id: str, reason: str, rebalance: bool = True
    ) -> bool:
        """The group's last consumer-protocol member goes and the group becomes a classic
        group of the others, which rebalances unless told not to (the caller holds the
        lock). Whether it happened."""
        assert self._classic is not None
        converted = classic_group_from_consumer(group, leaving_id, self._topics())
        if not self.groups.replace(group, converted):  # its timers stop, its state goes
            return False
        group.mark_dead()
        log.info(
            "downgraded consumer group to classic group",
            group=group.group_id,
            member=leaving_id,
            generation=converted.generation_id,
            members=converted.size,
            reason=reason,
        )
        self._classic.adopt(
            converted,
            f"Downgrade group {group.group_id} from consumer to classic." if rebalance else None,
        )
        return True

    # -- the store ----------------------------------------------------------------------

    def on_loaded(self, group: ConsumerGroup) -> None:
        """A stored group now registered here: its members get a fresh session (those
        that do not come back are fenced when it expires)."""
        with group.lock:
            for member in list(group.members.values()):
                self._schedule_timers(group, member, member)
        log.info(
            "consumer group loaded",
            group=group.group_id,
            group_epoch=group.group_epoch,
            members=len(group.members),
        )

    def persist(self, group: ConsumerGroup) -> None:
        """Store the group's state if it changed (the caller holds its lock); see
        :meth:`StoredGroups.persist`."""
        self._store.persist(group, self.shutdown)

    def forget(self, group: ConsumerGroup) -> None:
        """The group was deleted: its stored state goes too."""
        self._store.forget(group)

    # -- timers -----------------------------------------------------------------------

    def _schedule_timers(
        self, group: ConsumerGroup, before: ConsumerGroupMember, after: ConsumerGroupMember
    ) -> None:
        self.schedule_session(group, after)
        if after.state is not MemberState.UNREVOKED_PARTITIONS:
            self._cancel_timer(group, _REVOCATION, after.member_id)
        elif before.state is not MemberState.UNREVOKED_PARTITIONS or (
            (_REVOCATION, after.member_id) not in group.timers
        ):
            self._schedule(
                group,
                _REVOCATION,
                after.member_id,
                max(after.rebalance_timeout_ms, 0),
                "the member did not revoke its partitions within its rebalance timeout",
            )

    def schedule_session(self, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
        """(Re)start the member's session: a classic member's own session timeout, the
        group's consumer.session.timeout.ms for the others."""
        self._schedule(
            group,
            _SESSION,
            member.member_id,
            (
                member.classic.session_timeout_ms
                if member.classic is not None
                else self._session_timeout_ms(group.group_id)
            ),
            "the member's session expired",
        )

    def expect_rejoin(self, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
        """A classic member was told to rejoin (REBALANCE_IN_PROGRESS): it is fenced unless
        a JoinGroup comes within its rebalance timeout (Kafka's join timeout; a running
        one is left alone)."""
        if (_JOIN, member.member_id) not in group.timers:
            self._schedule(
                group,
                _JOIN,
                member.member_id,
                max(member.rebalance_timeout_ms, 0),
                "the classic member did not rejoin within its rebalance timeout",
            )

    def classic_joined(self, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
        """A classic member's JoinGroup was answered: it must SyncGroup within its
        rebalance timeout (Kafka's sync timeout)."""
        self._cancel_timer(group, _JOIN, member.member_id)
        self._schedule(
            group,
            _SYNC,
            member.member_id,
            max(member.rebalance_timeout_ms, 0),
            "the classic member did not sync within its rebalance timeout",
        )

    def classic_synced(self, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
        self._cancel_timer(group, _SYNC, member.member_id)

    def _schedule(
        self, group: ConsumerGroup, kind: str, member_id: str, delay_ms: int, reason: str
    ) -> None:
        self._cancel_timer(group, kind, member_id)
        key = (kind, member_id)

        def expire() -> None:
            with group.lock:
                if group.timers.get(key) is not task:
                    return
                del group.timers[key]
                if member_id in group.members and not group.is_dead and self._owns(group.group_id):
                    try:
                        self.fence(group, member_id, reason)
                    except KafkaError as exc:
                        log.warning("member not fenced", group=group.group_id, reason=exc.message)

        task = self._timer.schedule(delay_ms, expire)
        group.timers[key] = task

    @staticmethod
    def _cancel_timer(group: ConsumerGroup, kind: str, member_id: str) -> None:
        task = group.timers.pop((kind, member_id), None)
        if task is not None:
            task.cancel()

    def cancel_timers(self, group: ConsumerGroup, member_id: str) -> None:
        for kind in (_SESSION, _REVOCATION, _JOIN, _SYNC):
            self._cancel_timer(group, kind, member_id)

    def shutdown(self, group: ConsumerGroup) -> None:
        """Cancel ``group``'s timers."""
        with group.lock:
            for task in group.timers.values():
                task.cancel()
            group.timers.clear()


def _subscription(member: ConsumerGroupMember) -> tuple[Any, ...]:
    """What of a member, when it changes, changes the target assignment."""
    return (
        member.subscribed_topic_names,
        member.subscribed_topic_regex,
        member.server_assignor,
        member.rack_id,
    )


def _is_subset(owned: Assignment | None, assigned: Assignment) -> bool:
    if owned is None:
        return True
    return all(parts <= assigned.get(topic_id, frozenset()) for topic_id, parts in owned.items())


def _resolve(member: ConsumerGroupMember, names: Mapping[str, Any]) -> set[str]:
    """The existing topics a member subscribes to: its names, and those its regex matches."""
    out = {n for n in member.subscribed_topic_names if n in names}
    if member.subscribed_topic_regex:
        pattern = compile_topic_regex(member.subscribed_topic_regex)
        out.update(n for n in names if pattern.fullmatch(n))
    return out


def _topic_metadata(
    group: ConsumerGroup, snapshot: MetadataSnapshot
) -> dict[uuid.UUID, TopicMetadata]:
    """The topics the group's members subscribe to, as they are now."""
    names = {n: info for n, info in snapshot.topics.items() if not info.is_internal}
    wanted: set[str] = set()
    for member in group.members.values():
        wanted |= _resolve(member, names)
    out = {}
    for name in sorted(wanted):
        info = names[name]
        racks = {
            p: frozenset(
                rack
                for broker_id in part.replicas
                if (broker := snapshot.brokers.get(broker_id)) is not None
                and (rack := broker.rack) is not None
            )
            for p, part in info.partitions.items()
        }
        out[info.topic_id] = TopicMetadata(info.topic_id, name, len(info.partitions), racks)
    return out


def _fingerprint(group: ConsumerGroup, snapshot: MetadataSnapshot) -> tuple[Any, ...]:
    """The subscribed topics as they are now: a change bumps the group epoch."""
    return tuple(
        (t.name, t.topic_id, t.num_partitions, tuple(sorted(t.partition_racks.items())))
        for t in _topic_metadata(group, snapshot).values()
    )
