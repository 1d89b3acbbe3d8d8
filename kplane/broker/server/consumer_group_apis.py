"""KIP-848's APIs: ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69), on top of the
GroupCoordinator's consumer protocol. Topics travel by id on the wire; the MetadataCache
names them for ConsumerGroupDescribe."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from kplane.broker.group.consumer_group import ConsumerGroupDescription, assignment_of
from kplane.broker.group.consumer_protocol import ConsumerGroupHeartbeat
from kplane.broker.group.coordinator import GroupCoordinator
from kplane.broker.server.context import Handler, RequestContext
from kplane.broker.server.modern_group_apis import (
    described_assignment,
    heartbeat_refusal,
    respond_to_describe,
    respond_to_heartbeat,
)
from kplane.common.acl import AclOperation, AclResourceType
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode

_MEMBER_TYPE_CLASSIC = 0
_MEMBER_TYPE_CONSUMER = 1
_BAD_INPUT = (
    ErrorCode.invalid_request,
    ErrorCode.invalid_regular_expression,
    ErrorCode.unsupported_assignor,
)
"""Refusals of a request no client should send: a warning; the protocol's own (fenced, an
unknown member) are logged as information."""


def _ms(value: datetime.timedelta | int) -> int:
    if isinstance(value, datetime.timedelta):
        return round(value / datetime.timedelta(milliseconds=1))
    return int(value)


class ConsumerGroupApis:
    """ApiFamily for ConsumerGroupHeartbeat and ConsumerGroupDescribe."""

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
            ApiKey.CONSUMER_GROUP_HEARTBEAT: self.heartbeat,
            ApiKey.CONSUMER_GROUP_DESCRIBE: self.describe,
        }

    def heartbeat(self, ctx: RequestContext) -> None:
        req = ctx.body
        names = req.subscribed_topic_names
        result = heartbeat_refusal(ctx, self._owns, req.group_id, names)
        if result is None:
            owned = req.topic_partitions
            member_id = req.member_id
            if not member_id and ctx.api_version == 0 and req.member_epoch == 0:
                member_id = str(uuid.uuid4())  # v0: the coordinator names new members
            result = self.coordinator.consumer.heartbeat(
                ConsumerGroupHeartbeat(
                    group_id=req.group_id,
                    member_id=member_id,
                    member_epoch=req.member_epoch,
                    instance_id=req.instance_id,
                    rack_id=req.rack_id,
                    rebalance_timeout_ms=_ms(req.rebalance_timeout),
                    subscribed_topic_names=tuple(names) if names is not None else None,
                    subscribed_topic_regex=getattr(req, "subscribed_topic_regex", None),
                    server_assignor=req.server_assignor,
                    owned=(
                        assignment_of((t.topic_id, t.partitions) for t in owned)
                        if owned is not None
                        else None
                    ),
                    client_id=ctx.client_id or "",
                    client_host=f"/{ctx.request.client_host}",
                )
            )
        respond_to_heartbeat(ctx, "consumer", req.group_id, req.member_id, result, _BAD_INPUT)

    def describe(self, ctx: RequestContext) -> None:
        def members(d: ConsumerGroupDescription) -> tuple[Any, ...] | ErrorCode:
            topics = {
                topic_id
                for member, target in d.members
                for assignment in (member.assigned, target)
                for topic_id in assignment
            }
            names = {topic_id: self._topic_name_of(topic_id) for topic_id in topics}
            if any(
                name is not None
                and not ctx.authorized(AclOperation.DESCRIBE, AclResourceType.TOPIC, name, False)
                for name in names.values()
            ):
                return ErrorCode.topic_authorization_failed
            return tuple(
                ctx.make(
                    "Member",
                    member_id=m.member_id,
                    instance_id=m.instance_id,
                    rack_id=m.rack_id,
                    member_epoch=m.member_epoch,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    subscribed_topic_names=m.subscribed_topic_names,
                    subscribed_topic_regex=m.subscribed_topic_regex,
                    assignment=described_assignment(ctx, m.assigned, names.get),
                    target_assignment=described_assignment(ctx, target, names.get),
                    member_type=(
                        _MEMBER_TYPE_CLASSIC if m.classic is not None else _MEMBER_TYPE_CONSUMER
                    ),
                )
                for m, target in d.members
            )

        respond_to_describe(ctx, self._owns, self.coordinator.describe_consumer_groups, members)
