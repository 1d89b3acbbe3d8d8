"""The share group protocol's state machine (KIP-932's ShareGroupHeartbeat) over
:class:`~kplane.broker.group.share_group.ShareGroup`, as Kafka's group coordinator runs it.

A heartbeat joins (epoch 0), heartbeats, or leaves (-1). The group epoch is bumped when a
member joins or leaves, a subscription changes or the subscribed topics resolve to other
partitions; then the share assignor computes a new target and each member takes its own at
once (shared partitions need no revocation), at the assignment epoch. A member that does
not heartbeat within the session timeout is removed, and the listeners added with
:meth:`ShareGroupProtocol.add_member_listener` hear of it, so the records it had acquired
go back to the group at once. A member that leaves is not reported: its client closes its
share sessions after the leaving heartbeat (librdkafka sends the last acknowledgements
then), which gives back what it still holds.

The group's state is stored before a heartbeat is answered, as a consumer group's
(:class:`~kplane.broker.group.consumer_group_store.StoredGroups`): a coordinator that loads
it after a restart or a move knows the members at their epochs and starts their sessions
afresh; those that do not come back are removed when their session expires.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import structlog

from kplane.broker.group.assignor import MemberSubscription, TopicMetadata
from kplane.broker.group.consumer_group_store import StoredGroups
from kplane.broker.group.group_registry import GroupRegistry
from kplane.broker.group.heartbeat_result import HeartbeatResult
from kplane.broker.group.modern_group import LEAVE_GROUP_MEMBER_EPOCH
from kplane.broker.group.share_assignor import SimpleAssignor
from kplane.broker.group.share_config import ShareGroupConfig
from kplane.broker.group.share_group import ShareGroup, ShareGroupMember
from kplane.broker.metadata.cache import MetadataSnapshot
from kplane.broker.utils.timer import SystemTimer
from kplane.protocol.errors import ErrorCode, KafkaError

log = structlog.get_logger(__name__)

MemberListener = Callable[[str, str], None]
"""Called with (group id, member id) when a member's session expired."""


@dataclass(frozen=True, slots=True)
class ShareGroupHeartbeat:
    """One ShareGroupHeartbeat request; None fields did not change."""

    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topic_names: tuple[str, ...] | None = None
    client_id: str = ""
    client_host: str = ""


class ShareGroupProtocol:
    """The share groups' membership. ``topics()`` is the current metadata (``snapshot()``
    the same once it has caught up with the stored topics, else COORDINATOR_LOAD_IN_PROGRESS);
    ``session_timeout_ms(group_id)`` and ``heartbeat_interval_ms(group_id)`` a group's own
    settings or the broker's; ``store`` keeps each group's state; ``owns(group_id)``:
    whether this broker coordinates the group now (a member is removed only by its
    coordinator)."""

    def __init__(
        self,
        config: ShareGroupConfig,
        timer: SystemTimer,
        groups: GroupRegistry,
        topics: Callable[[], MetadataSnapshot],
        *,
        session_timeout_ms: Callable[[str], int],
        heartbeat_interval_ms: Callable[[str], int],
        store: StoredGroups,
        snapshot: Callable[[], MetadataSnapshot] | None = None,
        owns: Callable[[str], bool] = lambda _group_id: True,
    ) -> None:
        self.config = config
        self._timer = timer
        self.groups = groups
        self._topics = topics
        self._snapshot = snapshot or topics
        self._store = store
        self._owns = owns
        self._session_timeout_ms = session_timeout_ms
        self._heartbeat_interval_ms = heartbeat_interval_ms
        self._assignor = SimpleAssignor()
        self._listeners: list[MemberListener] = []

    def add_member_listener(self, listener: MemberListener) -> None:
        self._listeners.append(listener)

    def heartbeat(self, req: ShareGroupHeartbeat) -> HeartbeatResult:
        try:
            _validate(req)
            if req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
                return self._leave(req)
            return self._join_or_heartbeat(req)
        except KafkaError as exc:
            return HeartbeatResult(exc.code, exc.message)

    def _group(self, group_id: str, create: bool) -> ShareGroup:
        group = self.groups.get(group_id)
        if group is None and create:
            group = self.groups.get_or_create(group_id, ShareGroup)
        if isinstance(group, ShareGroup) and not group.is_dead:
            return group
        if group is None or group.is_dead:
            raise KafkaError(ErrorCode.group_id_not_found, f"Group {group_id} not found.")
        raise KafkaError(ErrorCode.group_id_not_found, f"Group {group_id} is not a share group.")

    def empty_group(self, group_id: str, create: bool) -> ShareGroup:
        """The share group ``group_id`` for an admin change of its offsets: made when
        ``create`` and missing; GROUP_ID_NOT_FOUND when of another type (or missing),
        NON_EMPTY_GROUP while it has members."""
        group = self._group(group_id, create)
        with group.lock:
            if group.members:
                raise KafkaError(
                    ErrorCode.non_empty_group, f"Share group '{group_id}' is not empty."
                )
        return group

    def restore(self, group_ids: Iterable[str]) -> int:
        """At start-up: the share groups with stored share-partition state, loaded from
        their stored state, or else registered Empty; returns how many were registered
        Empty."""
        restored = 0
        for group_id in group_ids:
            if self.groups.get(group_id) is None:
                self.groups.get_or_create(group_id, ShareGroup)
                restored += 1
        return restored

    def on_loaded(self, group: ShareGroup) -> None:
        """A stored group now registered here: its members get a fresh session (those
        that do not come back are removed when it expires)."""
        with group.lock:
            for member_id in list(group.members):
                self._schedule_session(group, member_id)
        log.info(
            "share group loaded",
            group=group.group_id,
            group_epoch=group.group_epoch,
            members=len(group.members),
        )

    def forget(self, group: ShareGroup) -> None:
        """The group was deleted: its stored state goes too."""
        self._store.forget(group)

    def is_share_group(self, group_id: str) -> bool:
        group = self.groups.get(group_id)
        return isinstance(group, ShareGroup) and not group.is_dead

    def _join_or_heartbeat(self, req: ShareGroupHeartbeat) -> HeartbeatResult:
        snapshot = self._snapshot()
        group = self._group(req.group_id, create=req.member_epoch == 0)
        with group.lock:
            if group.is_dead:
                raise KafkaError(ErrorCode.coordinator_not_available)
            member = group.members.get(req.member_id)
            joined = member is None
            if member is None:
                if req.member_epoch != 0:
                    raise KafkaError(
                        ErrorCode.unknown_member_id,
                        f"Member {req.member_id} is not a member of group {group.group_id}.",
                    )
                if len(group.members) >= self.config.max_size:
                    raise KafkaError(
                        ErrorCode.group_max_size_reached,
                        f"The share group has reached its maximum capacity of "
                        f"{self.config.max_size} members.",
                    )
                member = ShareGroupMember(req.member_id)
            elif (
                req.member_epoch != 0
                and req.member_epoch != member.member_epoch
                and (
                    req.member_epoch > member.member_epoch
                    or req.member_epoch != member.previous_member_epoch
                )
            ):
                raise KafkaError(
                    ErrorCode.fenced_member_epoch,
                    f"The share group member has a smaller member epoch "
                    f"({req.member_epoch}) than the one known by the group coordinator "
                    f"({member.member_epoch}).",
                )
            updated = dataclasses.replace(
                member,
                rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
                subscribed_topic_names=(
                    tuple(req.subscribed_topic_names)
                    if req.subscribed_topic_names is not None
                    else member.subscribed_topic_names
                ),
                client_id=req.client_id,
                client_host=req.client_host,
            )
            group.members[updated.member_id] = updated
            group.bump_group_epoch(
                _fingerprint(group, snapshot),
                updated.member_id,
                joined,
                changed=updated.subscribed_topic_names != member.subscribed_topic_names,
            )
            if group.group_epoch > group.assignment_epoch:
                self._compute_target(group, snapshot)
            target = group.target.get(updated.member_id, {})
            if updated.member_epoch != group.assignment_epoch or updated.assigned != target:
                updated = dataclasses.replace(
                    updated,
                    previous_member_epoch=updated.member_epoch,
                    member_epoch=group.assignment_epoch,
                    assigned=target,
                )
            group.members[updated.member_id] = updated
            self._schedule_session(group, updated.member_id)
            self._store.persist(group, self.shutdown)
            full = req.member_epoch == 0 or req.subscribed_topic_names is not None
            return HeartbeatResult(
                member_id=updated.member_id,
                member_epoch=updated.member_epoch,
                heartbeat_interval_ms=self._heartbeat_interval_ms(group.group_id),
                assignment=(
                    updated.assigned if full or updated.assigned != member.assigned else None
                ),
            )

    def _compute_target(self, group: ShareGroup, snapshot: MetadataSnapshot) -> None:
        topics = _topic_metadata(group, snapshot)
        by_name = {t.name: t.topic_id for t in topics.values()}
        subscriptions = {
            m.member_id: MemberSubscription(
                m.member_id,
                None,
                m.rack_id,
                frozenset(by_name[n] for n in m.subscribed_topic_names if n in by_name),
            )
            for m in group.members.values()
        }
        group.install_target(
            self._assignor.assign(subscriptions, topics, group.target), self._assignor.name
        )
        log.info(
            "share group target assignment computed",
            group=group.group_id,
            assignment_epoch=group.assignment_epoch,
            members=len(subscriptions),
            partitions=sum(t.num_partitions for t in topics.values()),
        )

    def _leave(self, req: ShareGroupHeartbeat) -> HeartbeatResult:
        group = self._group(req.group_id, create=False)
        with group.lock:
            if req.member_id not in group.members:
                raise KafkaError(ErrorCode.unknown_member_id)
            self._remove(group, req.member_id, "the member left the group", fenced=False)
        return HeartbeatResult(member_id=req.member_id, member_epoch=LEAVE_GROUP_MEMBER_EPOCH)

    def _remove(self, group: ShareGroup, member_id: str, reason: str, fenced: bool) -> None:
        """Remove a member and bump the group epoch, stored; the listeners hear of a fenced
        one."""
        group.members.pop(member_id, None)
        group.target.pop(member_id, None)
        task = group.timers.pop(member_id, None)
        if task is not None:
            task.cancel()
        group.group_epoch += 1
        group.subscription_fingerprint = _fingerprint(group, self._topics())
        log.info(
            "member removed from share group",
            group=group.group_id,
            member=member_id,
            group_epoch=group.group_epoch,
            reason=reason,
        )
        for listener in self._listeners if fenced else ():
            try:
                listener(group.group_id, member_id)
            except Exception:
                log.exception("share member listener failed", group=group.group_id)
        self._store.persist(group, self.shutdown)

    def _schedule_session(self, group: ShareGroup, member_id: str) -> None:
        old = group.timers.pop(member_id, None)
        if old is not None:
            old.cancel()

        def expire() -> None:
            with group.lock:
                if group.timers.get(member_id) is not task or group.is_dead:
                    return
                del group.timers[member_id]
                if member_id not in group.members or not self._owns(group.group_id):
                    return
                try:
                    self._remove(group, member_id, "the member's session expired", fenced=True)
                except KafkaError as exc:
                    log.warning("member not removed", group=group.group_id, reason=exc.message)

        task = self._timer.schedule(self._session_timeout_ms(group.group_id), expire)
        group.timers[member_id] = task

    def shutdown(self, group: ShareGroup) -> None:
        """Cancel ``group``'s timers."""
        with group.lock:
            for task in group.timers.values():
                task.cancel()
            group.timers.clear()


def _validate(req: ShareGroupHeartbeat) -> None:
    def invalid(message: str) -> KafkaError:
        return KafkaError(ErrorCode.invalid_request, message)

    if not req.group_id:
        raise invalid("GroupId can't be empty.")
    if not req.member_id:
        raise invalid("MemberId can't be empty.")
    if req.rack_id == "":
        raise invalid("RackId can't be empty.")
    if req.member_epoch == 0 and not req.subscribed_topic_names:
        raise invalid("SubscribedTopicNames must be set in first request.")
    if req.member_epoch < LEAVE_GROUP_MEMBER_EPOCH:
        raise invalid(f"MemberEpoch {req.member_epoch} is invalid.")


def _topic_metadata(group: ShareGroup, snapshot: MetadataSnapshot) -> dict[Any, TopicMetadata]:
    """The existing topics the group's members subscribe to, as they are now."""
    out = {}
    for name in sorted(group.subscribed_topics()):
        info = snapshot.topics.get(name)
        if info is None or info.is_internal:
            continue
        out[info.topic_id] = TopicMetadata(info.topic_id, name, len(info.partitions))
    return out


def _fingerprint(group: ShareGroup, snapshot: MetadataSnapshot) -> tuple[Any, ...]:
    return tuple(
        (t.name, t.topic_id, t.num_partitions) for t in _topic_metadata(group, snapshot).values()
    )
