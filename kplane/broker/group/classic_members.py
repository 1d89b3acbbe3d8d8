"""Classic members in a consumer group (KIP-848's online migration, Kafka's
``classicGroup*ToConsumerGroup``): a member that speaks JoinGroup, SyncGroup, Heartbeat
and LeaveGroup belongs to a consumer group as any other, its subscription read from the
consumer protocol embedded in its JoinGroup and its assignment, computed by the broker,
written into its SyncGroup answer.

A JoinGroup is one heartbeat of the consumer protocol (the member moves one step towards
its target; it is its own leader's follower, the broker assigns); a Heartbeat answers
REBALANCE_IN_PROGRESS when the member should join again to take its next step: the group
epoch moved past it, it has partitions to give up, or partitions it waited for are free.
A member told to rejoin must within its rebalance timeout, and a member that joined must
sync within it, or it is fenced (Kafka's join and sync timeouts).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence

import structlog

from kplane.broker.group.classic_group import (
    CONSUMER_PROTOCOL_TYPE,
    NO_LEADER,
    UNKNOWN_MEMBER_ID,
    JoinGroupResult,
    SyncGroupResult,
)
from kplane.broker.group.classic_protocol import LeaveGroupResult, MemberIdentity, MemberLeaveResult
from kplane.broker.group.consumer_group import (
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    assignment_of,
)
from kplane.broker.group.consumer_protocol import ConsumerGroupProtocol
from kplane.broker.group.embedded_protocol import (
    MalformedProtocol,
    decode_subscription,
    encode_assignment,
    protocol_version,
)
from kplane.protocol.errors import ErrorCode, KafkaError

log = structlog.get_logger(__name__)


class ClassicMembers:
    """The classic protocol's requests of members of a consumer group, served through the
    consumer protocol's ``protocol``. Each call takes the group and holds its lock."""

    def __init__(self, protocol: ConsumerGroupProtocol) -> None:
        self.protocol = protocol

    # -- JoinGroup ------------------------------------------------------------------------

    def join(
        self,
        group: ConsumerGroup,
        member_id: str,
        instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        *,
        require_known_member_id: bool,
    ) -> JoinGroupResult:
        """A classic member joins (or rejoins) the consumer group; an unknown one is
        named here."""
        try:
            proto = self.protocol
            snapshot = proto.snapshot()
            with group.lock:
                if group.is_dead:
                    raise KafkaError(ErrorCode.coordinator_not_available)
                unknown = member_id == UNKNOWN_MEMBER_ID
                joining_id = str(uuid.uuid4()) if unknown else member_id
                proto.check_size(group, joining_id, instance_id)
                if not _supports(group, protocol_type, protocols):
                    raise KafkaError(ErrorCode.inconsistent_group_protocol)
                if unknown and require_known_member_id and instance_id is None:
                    return JoinGroupResult(joining_id, ErrorCode.member_id_required)
                try:
                    subscription = decode_subscription(protocols[0][1])
                except MalformedProtocol as exc:
                    raise KafkaError(ErrorCode.inconsistent_group_protocol, str(exc)) from None
                replaced = group.static_member(instance_id) if instance_id is not None else None
                member, joined = self._member(group, joining_id, instance_id, unknown)
                updated = dataclasses.replace(
                    member,
                    instance_id=instance_id if instance_id is not None else member.instance_id,
                    rack_id=subscription.rack_id or member.rack_id,
                    rebalance_timeout_ms=rebalance_timeout_ms,
                    subscribed_topic_names=subscription.topics,
                    subscribed_topic_regex=None,
                    server_assignor=None,
                    client_id=client_id,
                    client_host=client_host,
                    classic=ClassicMemberMetadata(session_timeout_ms, tuple(protocols)),
                )
                ids = {name: info.topic_id for name, info in snapshot.topics.items()}
                owned = assignment_of(
                    (ids[topic], (p,)) for topic, p in subscription.owned_partitions if topic in ids
                )
                reconciled = proto.update(group, member, updated, joined, owned, snapshot)
                generation = reconciled.member_epoch
                if (
                    replaced is not None
                    and replaced.member_id != joining_id
                    and proto.downgrade_on_replace(group, replaced)
                ):
                    generation = group.group_epoch  # the classic group's generation
                else:
                    proto.persist(group)
                    proto.classic_joined(group, reconciled)
                return JoinGroupResult(
                    reconciled.member_id,
                    generation_id=generation,
                    protocol_type=CONSUMER_PROTOCOL_TYPE,
                    protocol_name=protocols[0][0],
                    leader_id=NO_LEADER,
                )
        except KafkaError as exc:
            return JoinGroupResult(member_id, exc.code)

    def _member(
        self, group: ConsumerGroup, member_id: str, instance_id: str | None, unknown: bool
    ) -> tuple[ConsumerGroupMember, bool]:
        """The joining member and whether it is new: a static member coming back under a
        new id takes its instance's place, epoch 0, keeping its target."""
        if instance_id is None:
            existing = group.members.get(member_id)
            return (
                (existing, False)
                if existing is not None
                else (ConsumerGroupMember(member_id), True)
            )
        static = group.static_member(instance_id)
        if static is None:
            if not unknown:
                raise KafkaError(
                    ErrorCode.unknown_member_id,
                    f"Instance id {instance_id} is unknown in group {group.group_id}.",
                )
            return ConsumerGroupMember(member_id), True
        if static.member_id == member_id:
            return static, False
        if not unknown:
            raise KafkaError(ErrorCode.fenced_instance_id)
        return self.protocol.replace_static_member(group, static, member_id, instance_id), False

    # -- SyncGroup, Heartbeat, LeaveGroup -------------------------------------------------

    @staticmethod
    def _classic_member(
        group: ConsumerGroup, member_id: str, instance_id: str | None
    ) -> ConsumerGroupMember:
        """The classic member a request names (Kafka's validateConsumerGroupMember):
        UNKNOWN_MEMBER_ID, or FENCED_INSTANCE_ID for a static member's old id."""
        if group.is_dead:
            raise KafkaError(ErrorCode.coordinator_not_available)
        if instance_id is None:
            member = group.members.get(member_id)
        else:
            member = group.static_member(instance_id)
            if member is not None and member.member_id != member_id:
                raise KafkaError(ErrorCode.fenced_instance_id)
        if member is None or member.classic is None:
            raise KafkaError(
                ErrorCode.unknown_member_id,
                f"Member {member_id} is not a classic member of group {group.group_id}.",
            )
        return member

    def sync(
        self,
        group: ConsumerGroup,
        generation_id: int,
        member_id: str,
        instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
    ) -> SyncGroupResult:
        """SyncGroup: the member's current assignment, encoded as it subscribed."""
        with group.lock:
            try:
                member = self._classic_member(group, member_id, instance_id)
                assert member.classic is not None
                if generation_id != member.member_epoch:
                    raise KafkaError(ErrorCode.illegal_generation)
                chosen = member.classic.protocols[0]
                if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or (
                    protocol_name is not None and protocol_name != chosen[0]
                ):
                    raise KafkaError(ErrorCode.inconsistent_group_protocol)
                if (
                    group.group_epoch > member.member_epoch
                    and member.state is not MemberState.UNREVOKED_PARTITIONS
                ):
                    self.protocol.expect_rejoin(group, member)
                    raise KafkaError(ErrorCode.rebalance_in_progress)
            except KafkaError as exc:
                return SyncGroupResult(exc.code)
            self.protocol.classic_synced(group, member)
            self.protocol.schedule_session(group, member)
            names = self.protocol.topic_names()
            assignment = encode_assignment(
                {names[t]: parts for t, parts in member.assigned.items() if t in names},
                protocol_version(chosen[1]),
            )
            return SyncGroupResult(ErrorCode.none, CONSUMER_PROTOCOL_TYPE, chosen[0], assignment)

    def heartbeat(
        self, group: ConsumerGroup, member_id: str, instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        """Heartbeat: REBALANCE_IN_PROGRESS when the member should join again to take its
        next step towards its target."""
        with group.lock:
            try:
                member = self._classic_member(group, member_id, instance_id)
            except KafkaError as exc:
                return exc.code
            if generation_id != member.member_epoch:
                return ErrorCode.illegal_generation
            self.protocol.schedule_session(group, member)
            if (
                member.member_epoch < group.group_epoch
                or member.state is MemberState.UNREVOKED_PARTITIONS
                or (
                    member.state is MemberState.UNRELEASED_PARTITIONS
                    and not group.waiting_on_unreleased_partition(member)
                )
            ):
                self.protocol.expect_rejoin(group, member)
                return ErrorCode.rebalance_in_progress
            return ErrorCode.none

    def leave(self, group: ConsumerGroup, members: Sequence[MemberIdentity]) -> LeaveGroupResult:
        """LeaveGroup of classic members (a static one may be named by its instance id
        alone); each leaves as a consumer-protocol member does."""
        results = []
        with group.lock:
            for identity in members:
                error = ErrorCode.none
                member_id = identity.member_id
                try:
                    if identity.group_instance_id is None:
                        member = self._classic_member(group, member_id, None)
                    else:
                        found = group.static_member(identity.group_instance_id)
                        if found is None:
                            raise KafkaError(ErrorCode.unknown_member_id)
                        named = member_id if member_id != UNKNOWN_MEMBER_ID else found.member_id
                        member = self._classic_member(group, named, identity.group_instance_id)
                    member_id = member.member_id
                    self.protocol.fence(group, member_id, "the member left the group")
                except KafkaError as exc:
                    error = exc.code
                results.append(MemberLeaveResult(member_id, identity.group_instance_id, error))
        return LeaveGroupResult(ErrorCode.none, tuple(results))


def _supports(
    group: ConsumerGroup, protocol_type: str, protocols: Sequence[tuple[str, bytes]]
) -> bool:
    """Whether a classic member may join (Kafka's supportsClassicProtocols): it embeds the
    consumer protocol and shares one protocol with every classic member already in."""
    if protocol_type != CONSUMER_PROTOCOL_TYPE or not protocols:
        return False
    classic = [m.classic for m in group.members.values() if m.classic is not None]
    return any(
        all(any(name == theirs for theirs, _ in c.protocols) for c in classic)
        for name, _ in protocols
    )
