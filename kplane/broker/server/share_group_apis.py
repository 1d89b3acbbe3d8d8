"""KIP-932's membership APIs: ShareGroupHeartbeat (76) and ShareGroupDescribe (77), on top
of the GroupCoordinator's share protocol. Topics travel by id on the wire; the MetadataCache
names them for ShareGroupDescribe."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from kplane.broker.group.coordinator import GroupCoordinator
from kplane.broker.group.heartbeat_result import HeartbeatResult
from kplane.broker.group.modern_group import Assignment
from kplane.broker.group.share_protocol import ShareGroupHeartbeat
from kplane.broker.server.context import Handler, RequestContext
from kplane.common.acl import AclOperation, AclResourceType
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode

log = structlog.get_logger(__name__)


class ShareGroupApis:
    """ApiFamily for ShareGroupHeartbeat and ShareGroupDescribe."""

    def __init__(
        self,
        coordinator: GroupCoordinator,
        *,
        topic_name_of: Callable[[uuid.UUID], str | None],
        owns: Callable[[str], bool],
    ) -> None:
        self.coordinator = coordinator
        self._topic_name_of = topic_name_of
        self._owns = owns

    def handlers(self) -> Mapping[int, Handler]:
        return {
            ApiKey.SHARE_GROUP_HEARTBEAT: self.heartbeat,
            ApiKey.SHARE_GROUP_DESCRIBE: self.describe,
        }

    def heartbeat(self, ctx: RequestContext) -> None:
        req = ctx.body
        names = req.subscribed_topic_names
        if not self._owns(req.group_id):
            result = HeartbeatResult(ErrorCode.not_coordinator)
        elif not ctx.authorized(AclOperation.READ, AclResourceType.GROUP, req.group_id):
            result = HeartbeatResult(ErrorCode.group_authorization_failed)
        elif names is not None and any(
            not ctx.authorized(AclOperation.DESCRIBE, AclResourceType.TOPIC, n, False)
            for n in names
        ):
            result = HeartbeatResult(ErrorCode.topic_authorization_failed)
        else:
            result = self.coordinator.share.heartbeat(
                ShareGroupHeartbeat(
                    group_id=req.group_id,
                    member_id=req.member_id,
                    member_epoch=req.member_epoch,
                    rack_id=req.rack_id,
                    subscribed_topic_names=tuple(names) if names is not None else None,
                    client_id=ctx.client_id or "",
                    client_host=f"/{ctx.request.client_host}",
                )
            )
        if result.error is ErrorCode.invalid_request:
            log.warning(
                "share group heartbeat refused",
                group=req.group_id,
                member=req.member_id,
                error=result.error.name,
                message=result.message,
            )
        elif result.error not in (ErrorCode.none, ErrorCode.not_coordinator):
            log.info(
                "share group heartbeat refused",
                group=req.group_id,
                member=req.member_id,
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
                                "TopicPartitions",
                                topic_id=topic_id,
                                partitions=tuple(sorted(parts)),
                            )
                            for topic_id, parts in sorted(result.assignment.items())
                        ),
                    )
                    if result.assignment is not None
                    else None
                ),
            )
        )

    def describe(self, ctx: RequestContext) -> None:
        req = ctx.body
        include_ops = bool(req.include_authorized_operations)
        allowed = []
        refused: dict[str, ErrorCode] = {}
        for group_id in req.group_ids:
            if not self._owns(group_id):
                refused[group_id] = ErrorCode.not_coordinator
            elif not ctx.authorized(AclOperation.DESCRIBE, AclResourceType.GROUP, group_id):
                refused[group_id] = ErrorCode.group_authorization_failed
            else:
                allowed.append(group_id)
        described = {d.group_id: d for d in self.coordinator.describe_share_groups(allowed)}
        groups = []
        for group_id in req.group_ids:
            d = described.get(group_id)
            if d is None or d.error is not ErrorCode.none:
                error = refused[group_id] if d is None else d.error
                groups.append(
                    ctx.make(
                        "DescribedGroup",
                        error_code=error,
                        error_message=None if d is None else d.message,
                        group_id=group_id,
                        group_state="",
                        group_epoch=0,
                        assignment_epoch=0,
                        assignor_name="",
                        members=(),
                    )
                )
                continue

            def assignment(a: Assignment) -> Any:
                return ctx.make(
                    "Assignment",
                    topic_partitions=tuple(
                        ctx.make(
                            "TopicPartitions",
                            topic_id=topic_id,
                            topic_name=self._topic_name_of(topic_id) or "",
                            partitions=tuple(sorted(parts)),
                        )
                        for topic_id, parts in sorted(a.items())
                    ),
                )

            groups.append(
                ctx.make(
                    "DescribedGroup",
                    error_code=ErrorCode.none,
                    group_id=group_id,
                    group_state=d.state,
                    group_epoch=d.group_epoch,
                    assignment_epoch=d.assignment_epoch,
                    assignor_name=d.assignor_name,
                    members=tuple(
                        ctx.make(
                            "Member",
                            member_id=m.member_id,
                            rack_id=m.rack_id,
                            member_epoch=m.member_epoch,
                            client_id=m.client_id,
                            client_host=m.client_host,
                            subscribed_topic_names=m.subscribed_topic_names,
                            assignment=assignment(m.assigned),
                        )
                        for m in d.members
                    ),
                    authorized_operations=(
                        ctx.authorized_operations(AclResourceType.GROUP, group_id)
                        if include_ops
                        else -(2**31)
                    ),
                )
            )
        ctx.respond(ctx.make_response(throttle_time=datetime.timedelta(0), groups=tuple(groups)))
