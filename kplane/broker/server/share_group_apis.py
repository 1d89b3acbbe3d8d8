"""KIP-932's membership APIs: ShareGroupHeartbeat (76) and ShareGroupDescribe (77), on top
of the GroupCoordinator's share protocol. Topics travel by id on the wire; the MetadataCache
names them for ShareGroupDescribe."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Mapping

from kplane.broker.group.coordinator import GroupCoordinator
from kplane.broker.group.share_protocol import ShareGroupHeartbeat
from kplane.broker.server.context import Handler, RequestContext
from kplane.broker.server.modern_group_apis import (
    describable_groups,
    described_assignment,
    described_group_error,
    heartbeat_refusal,
    respond_to_heartbeat,
)
from kplane.common.acl import AclResourceType
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode


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
        result = heartbeat_refusal(ctx, self._owns, req.group_id, names)
        if result is None:
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
        respond_to_heartbeat(
            ctx, "share", req.group_id, req.member_id, result, (ErrorCode.invalid_request,)
        )

    def describe(self, ctx: RequestContext) -> None:
        req = ctx.body
        include_ops = bool(req.include_authorized_operations)
        allowed, refused = describable_groups(ctx, self._owns, req.group_ids)
        described = {d.group_id: d for d in self.coordinator.describe_share_groups(allowed)}
        groups = []
        for group_id in req.group_ids:
            d = described.get(group_id)
            if d is None:
                groups.append(described_group_error(ctx, group_id, refused[group_id], None))
                continue
            if d.error is not ErrorCode.none:
                groups.append(described_group_error(ctx, group_id, d.error, d.message))
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
                    members=tuple(
                        ctx.make(
                            "Member",
                            member_id=m.member_id,
                            rack_id=m.rack_id,
                            member_epoch=m.member_epoch,
                            client_id=m.client_id,
                            client_host=m.client_host,
                            subscribed_topic_names=m.subscribed_topic_names,
                            assignment=described_assignment(ctx, m.assigned, self._topic_name_of),
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
