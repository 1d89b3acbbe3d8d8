"""KIP-932's membership APIs: ShareGroupHeartbeat (76) and ShareGroupDescribe (77), on top
of the GroupCoordinator's share protocol. Topics travel by id on the wire; the MetadataCache
names them for ShareGroupDescribe."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any

from kplane.broker.group.coordinator import GroupCoordinator
from kplane.broker.group.share_group import ShareGroupDescription
from kplane.broker.group.share_protocol import ShareGroupHeartbeat
from kplane.broker.server.context import Handler, RequestContext
from kplane.broker.server.modern_group_apis import (
    described_assignment,
    heartbeat_refusal,
    respond_to_describe,
    respond_to_heartbeat,
)
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
        def members(d: ShareGroupDescription) -> tuple[Any, ...]:
            return tuple(
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
            )

        respond_to_describe(ctx, self._owns, self.coordinator.describe_share_groups, members)
