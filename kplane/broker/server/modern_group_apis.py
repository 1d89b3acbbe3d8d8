"""What KIP-848's and KIP-932's membership APIs share (ConsumerGroupHeartbeat and
ShareGroupHeartbeat, ConsumerGroupDescribe and ShareGroupDescribe): Kafka's refusals before
the coordinator is asked, the heartbeat's answer, and the describe's."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Collection, Iterable
from typing import Any, TypeVar

import structlog

from kplane.broker.group.heartbeat_result import HeartbeatResult
from kplane.broker.group.modern_group import Assignment, ModernGroupDescription
from kplane.broker.server.context import RequestContext
from kplane.common.acl import AclOperation, AclResourceType
from kplane.protocol.errors import ErrorCode

log = structlog.get_logger(__name__)

_Description = TypeVar("_Description", bound=ModernGroupDescription[Any])


def heartbeat_refusal(
    ctx: RequestContext,
    owns: Callable[[str], bool],
    group_id: str,
    topic_names: Iterable[str] | None,
) -> HeartbeatResult | None:
    """NOT_COORDINATOR, or the group's READ or a subscribed topic's DESCRIBE denied; None
    when the coordinator is to be asked."""
    if not owns(group_id):
        return HeartbeatResult(ErrorCode.not_coordinator)
    if not ctx.authorized(AclOperation.READ, AclResourceType.GROUP, group_id):
        return HeartbeatResult(ErrorCode.group_authorization_failed)
    if topic_names is not None and any(
        not ctx.authorized(AclOperation.DESCRIBE, AclResourceType.TOPIC, n, False)
        for n in topic_names
    ):
        return HeartbeatResult(ErrorCode.topic_authorization_failed)
    return None


def respond_to_heartbeat(
    ctx: RequestContext,
    group_type: str,
    group_id: str,
    member_id: str,
    result: HeartbeatResult,
    bad_input: Collection[ErrorCode],
) -> None:
    """Answer a heartbeat with ``result``; a refusal is logged once, as a warning when it
    is ``bad_input`` (a request no client should send), else as information."""
    if result.error not in (ErrorCode.none, ErrorCode.not_coordinator):
        (log.warning if result.error in bad_input else log.info)(
            f"{group_type} group heartbeat refused",
            group=group_id,
            member=member_id,
            error=result.error.name,
            message=result.message,
        )
    ctx.respond(
        ctx.make_response(
            throttle_time=datetime.timedelta(0),
            error_code=result.error,
            error_message=result.message,
            member_id=result.member_id,
            member_epoch=result.member_epoch,
            heartbeat_interval=datetime.timedelta(milliseconds=result.heartbeat_interval_ms),
            assignment=(
                ctx.make(
                    "Assignment",
                    topic_partitions=tuple(
                        ctx.make(
                            "TopicPartitions", topic_id=topic_id, partitions=tuple(sorted(parts))
                        )
                        for topic_id, parts in sorted(result.assignment.items())
                    ),
                )
                if result.assignment is not None
                else None
            ),
        )
    )


def respond_to_describe(
    ctx: RequestContext,
    owns: Callable[[str], bool],
    describe: Callable[[list[str]], Iterable[_Description]],
    members: Callable[[_Description], tuple[Any, ...] | ErrorCode],
) -> None:
    """Answer a ConsumerGroupDescribe or ShareGroupDescribe: each group refused
    (NOT_COORDINATOR, the group's DESCRIBE denied) or as ``describe`` found it, its
    ``members`` built by the caller (or an error code that refuses the group)."""
    req = ctx.body
    include_ops = bool(req.include_authorized_operations)
    allowed = []
    refused: dict[str, ErrorCode] = {}
    for group_id in req.group_ids:
        if not owns(group_id):
            refused[group_id] = ErrorCode.not_coordinator
        elif not ctx.authorized(AclOperation.DESCRIBE, AclResourceType.GROUP, group_id):
            refused[group_id] = ErrorCode.group_authorization_failed
        else:
            allowed.append(group_id)
    described = {d.group_id: d for d in describe(allowed)}
    groups = []
    for group_id in req.group_ids:
        d = described.get(group_id)
        if d is None:
            groups.append(_group_error(ctx, group_id, refused[group_id], None))
            continue
        if d.error is not ErrorCode.none:
            groups.append(_group_error(ctx, group_id, d.error, d.message))
            continue
        found = members(d)
        if isinstance(found, ErrorCode):
            groups.append(_group_error(ctx, group_id, found, None))
            continue
        groups.append(
            ctx.make(
                "DescribedGroup",
                error_code=ErrorCode.none,
                group_id=group_id,
                group_state=d.state,
                group_epoch=d.group_epoch,
                assignment_epoch=d.assignment_epoch,
                assignor_name=d.assignor_name,
                members=found,
                authorized_operations=(
                    ctx.authorized_operations(AclResourceType.GROUP, group_id)
                    if include_ops
                    else -(2**31)
                ),
            )
        )
    ctx.respond(ctx.make_response(throttle_time=datetime.timedelta(0), groups=tuple(groups)))


def _group_error(ctx: RequestContext, group_id: str, error: ErrorCode, message: str | None) -> Any:
    """A DescribedGroup that only carries an error."""
    return ctx.make(
        "DescribedGroup",
        error_code=error,
        error_message=message,
        group_id=group_id,
        group_state="",
        members=(),
    )


def described_assignment(
    ctx: RequestContext, assignment: Assignment, name_of: Callable[[uuid.UUID], str | None]
) -> Any:
    """A member's Assignment in a DescribedGroup, its topics named."""
    return ctx.make(
        "Assignment",
        topic_partitions=tuple(
            ctx.make(
                "TopicPartitions",
                topic_id=topic_id,
                topic_name=name_of(topic_id) or "",
                partitions=tuple(sorted(parts)),
            )
            for topic_id, parts in sorted(assignment.items())
        ),
    )
