"""Reconciliation of one member towards the target assignment (Kafka's
CurrentAssignmentBuilder).

A member first gives up what the target takes from it: while it still owns such a
partition it stays at its epoch in UNREVOKED_PARTITIONS, and is told only what it keeps.
Once it reported them gone it moves to the target's epoch and gets the partitions that are
free; those another member still holds come later (UNRELEASED_PARTITIONS), so no partition
is ever held by two members.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable

from kplane.broker.group.consumer_group import Assignment, ConsumerGroupMember, MemberState


def reconcile(
    member: ConsumerGroupMember,
    target_epoch: int,
    target: Assignment,
    partition_epoch: Callable[[uuid.UUID, int], int],
    owned: Assignment | None,
) -> ConsumerGroupMember:
    """The member after one step towards ``target`` (of ``target_epoch``). ``owned`` is
    what the member reported owning (None: not reported in this heartbeat)."""
    state = member.state
    if (state is MemberState.STABLE and member.member_epoch == target_epoch) or (
        state is MemberState.UNREVOKED_PARTITIONS and _owns_any(owned, member.pending_revocation)
    ):
        return member
    return _next(member, target_epoch, target, partition_epoch, owned)


def _owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    """Whether the member may still own any of ``partitions`` (unknown: assume it does)."""
    if owned is None:
        return True
    return any(owned.get(topic_id, frozenset()) & parts for topic_id, parts in partitions.items())


def _next(
    member: ConsumerGroupMember,
    target_epoch: int,
    target: Assignment,
    partition_epoch: Callable[[uuid.UUID, int], int],
    owned: Assignment | None,
) -> ConsumerGroupMember:
    current = member.assigned
    kept: dict[uuid.UUID, frozenset[int]] = {}
    revoking: dict[uuid.UUID, frozenset[int]] = {}
    adding: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    for topic_id in set(current) | set(target):
        mine = current.get(topic_id, frozenset())
        wanted = target.get(topic_id, frozenset())
        keep = mine & wanted
        revoke = mine - keep
        releasing = member.pending_revocation.get(topic_id, frozenset())
        free = set()
        for p in wanted - keep:
            if p in releasing or partition_epoch(topic_id, p) == -1:
                free.add(p)
            else:
                unreleased = True
        if keep:
            kept[topic_id] = keep
        if revoke:
            revoking[topic_id] = revoke
        if free:
            adding[topic_id] = frozenset(free)
    if revoking and _owns_any(owned, revoking):
        return dataclasses.replace(
            member,
            state=MemberState.UNREVOKED_PARTITIONS,
            assigned=kept,
            pending_revocation=revoking,
        )
    assigned = dict(kept)
    for topic_id, parts in adding.items():
        assigned[topic_id] = assigned.get(topic_id, frozenset()) | parts
    return dataclasses.replace(
        member,
        state=MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE,
        previous_member_epoch=member.member_epoch,
        member_epoch=target_epoch,
        assigned=assigned,
        pending_revocation={},
    )
