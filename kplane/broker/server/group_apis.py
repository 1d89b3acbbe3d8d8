"""Group APIs: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch,
ListGroups, DescribeGroups, DeleteGroups and OffsetDelete, on top of the GroupCoordinator.

One code path per API for every version: requests are read with ``getattr`` defaults for
fields old versions lack, and responses are built with ``ctx.make`` which drops the fields
a version lacks. Parked requests (JoinGroup, SyncGroup) are answered from whichever thread
completes them.
"""

from __future__ import annotations

import datetime
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import structlog

from kplane.broker.group.classic_group import (
    UNKNOWN_MEMBER_ID,
    GroupDescription,
    JoinGroupResult,
    SyncGroupResult,
)
from kplane.broker.group.classic_protocol import LeaveGroupResult, MemberIdentity
from kplane.broker.group.coordinator import GroupCoordinator
from kplane.broker.group.group import GroupOverview, OffsetAndMetadata, TopicPartition
from kplane.broker.group.offset_manager import (
    OffsetDeleteResult,
    OffsetFetchPartition,
    OffsetFetchResult,
)
from kplane.broker.server.context import Handler, RequestContext
from kplane.common.acl import AclOperation, AclResourceType
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode

log = structlog.get_logger(__name__)


# Read, Delete and Describe: what a group allows when no authorizer is configured.
_GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
_ZERO_UUID = uuid.UUID(int=0)


def _ms(value: datetime.timedelta | int | None, default: int = -1) -> int:
    if value is None:
        return default
    if isinstance(value, datetime.timedelta):
        return round(value / datetime.timedelta(milliseconds=1))
    return int(value)


def _nested(ctx: RequestContext, *names: str) -> str:
    """The first of ``names`` this version's response module defines (names change with v8)."""
    module = ctx.response_module
    for name in names:
        if hasattr(module, name):
            return name
    raise LookupError(f"none of {names} in {module.__name__}")


def _coordinated(
    handler: Handler, owns: Callable[[str], bool], operation: AclOperation | None
) -> Handler:
    """Answer NOT_COORDINATOR for a group another broker coordinates, and
    GROUP_AUTHORIZATION_FAILED without ``operation`` on the group; else run ``handler``."""

    def guarded(ctx: RequestContext) -> None:
        group_id = ctx.body.group_id
        if not owns(group_id):
            ctx.respond(ctx.make_response(error_code=ErrorCode.not_coordinator))
        elif operation is None or ctx.authorized(operation, AclResourceType.GROUP, group_id):
            handler(ctx)
        else:
            ctx.respond(ctx.make_response(error_code=ErrorCode.group_authorization_failed))

    return guarded


class GroupApis:
    """ApiFamily for the group coordinator's APIs.

    ``topic_name_of`` / ``topic_id_of`` map topic ids and names for OffsetCommit and
    OffsetFetch v10 (which name topics by id); without them those topics are unknown.
    """

    def __init__(
        self,
        coordinator: GroupCoordinator,
        *,
        topic_name_of: Callable[[uuid.UUID], str | None] | None = None,
        topic_id_of: Callable[[str], uuid.UUID | None] | None = None,
        owns: Callable[[str], bool] = lambda _group: True,
    ) -> None:
        self.coordinator = coordinator
        self.owns = owns
        self._topic_name_of = topic_name_of or (lambda _id: None)
        self._topic_id_of = topic_id_of or (lambda _name: None)

    def handlers(self) -> Mapping[int, Handler]:
        return {
            ApiKey.JOIN_GROUP: _coordinated(self.join_group, self.owns, AclOperation.READ),
            ApiKey.SYNC_GROUP: _coordinated(self.sync_group, self.owns, AclOperation.READ),
            ApiKey.HEARTBEAT: _coordinated(self.heartbeat, self.owns, AclOperation.READ),
            ApiKey.LEAVE_GROUP: _coordinated(self.leave_group, self.owns, AclOperation.READ),
            ApiKey.OFFSET_COMMIT: _coordinated(self.offset_commit, self.owns, None),
            ApiKey.OFFSET_FETCH: self.offset_fetch,
            ApiKey.LIST_GROUPS: self.list_groups,
            ApiKey.DESCRIBE_GROUPS: self.describe_groups,
            ApiKey.DELETE_GROUPS: self.delete_groups,
            ApiKey.OFFSET_DELETE: _coordinated(self.offset_delete, self.owns, None),
            ApiKey.TXN_OFFSET_COMMIT: self.txn_offset_commit,
        }

    # -- membership -----------------------------------------------------------------------

    def join_group(self, ctx: RequestContext) -> None:
        req = ctx.body
        version = ctx.api_version
        session_timeout_ms = _ms(req.session_timeout)
        rebalance_timeout_ms = _ms(getattr(req, "rebalance_timeout", None))
        if rebalance_timeout_ms < 0:  # v0 has none: Kafka uses the session timeout
            rebalance_timeout_ms = session_timeout_ms

        def done(result: JoinGroupResult) -> None:
            members = tuple(
                ctx.make(
                    "JoinGroupResponseMember",
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    metadata=m.metadata,
                )
                for m in result.members
            )
            protocol_name = result.protocol_name
            if protocol_name is None and version < 7:  # nullable from v7 on
                protocol_name = ""
            ctx.respond(
                ctx.make_response(
                    error_code=result.error,
                    generation_id=result.generation_id,
                    protocol_type=result.protocol_type,
                    protocol_name=protocol_name,
                    leader=result.leader_id,
                    skip_assignment=result.skip_assignment,
                    member_id=result.member_id,
                    members=members,
                )
            )

        self.coordinator.join_group(
            group_id=req.group_id,
            member_id=req.member_id,
            group_instance_id=getattr(req, "group_instance_id", None),
            client_id=ctx.client_id or "",
            client_host=f"/{ctx.request.client_host}",
            rebalance_timeout_ms=rebalance_timeout_ms,
            session_timeout_ms=session_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=[(p.name, p.metadata) for p in req.protocols],
            callback=ctx.guarded(done),
            require_known_member_id=version >= 4,
            supports_skip_assignment=version >= 9,
            reason=getattr(req, "reason", None),
        )

    def sync_group(self, ctx: RequestContext) -> None:
        req = ctx.body

        def done(result: SyncGroupResult) -> None:
            ctx.respond(
                ctx.make_response(
                    error_code=result.error,
                    protocol_type=result.protocol_type,
                    protocol_name=result.protocol_name,
                    assignment=result.assignment,
                )
            )

        protocol_type = getattr(req, "protocol_type", None)
        protocol_name = getattr(req, "protocol_name", None)
        if ctx.api_version >= 5 and (protocol_type is None or protocol_name is None):
            # v5+ must name the protocol type and name (Kafka's mandatory check).
            done(SyncGroupResult(ErrorCode.inconsistent_group_protocol))
            return
        self.coordinator.sync_group(
            group_id=req.group_id,
            generation_id=req.generation_id,
            member_id=req.member_id,
            group_instance_id=getattr(req, "group_instance_id", None),
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            assignments={a.member_id: a.assignment for a in req.assignments},
            callback=ctx.guarded(done),
        )

    def heartbeat(self, ctx: RequestContext) -> None:
        req = ctx.body
        self.coordinator.heartbeat(
            group_id=req.group_id,
            member_id=req.member_id,
            group_instance_id=getattr(req, "group_instance_id", None),
            generation_id=req.generation_id,
            callback=ctx.guarded(lambda error: ctx.respond(ctx.make_response(error_code=error))),
        )

    def leave_group(self, ctx: RequestContext) -> None:
        req = ctx.body
        if hasattr(req, "members"):  # v3+: a batch
            leaving = [
                MemberIdentity(m.member_id, m.group_instance_id, getattr(m, "reason", None))
                for m in req.members
            ]
        else:
            leaving = [MemberIdentity(req.member_id)]

        def done(result: LeaveGroupResult) -> None:
            error = result.error
            if ctx.api_version < 3 and error is ErrorCode.none and result.members:
                error = result.members[0].error  # one member: its error is the answer
            members = ()
            if ctx.api_version >= 3:
                members = tuple(
                    ctx.make(
                        "MemberResponse",
                        member_id=m.member_id,
                        group_instance_id=m.group_instance_id,
                        error_code=m.error,
                    )
                    for m in result.members
                )
            ctx.respond(ctx.make_response(error_code=error, members=members))

        self.coordinator.leave_group(req.group_id, leaving, done)

    # -- offsets --------------------------------------------------------------------------

    def _topic_of(self, topic: Any) -> tuple[str | None, uuid.UUID | None]:
        """(name, id) of a request topic: v10 names topics by id only."""
        name = getattr(topic, "name", None)
        if name is not None:
            return name, None
        topic_id = topic.topic_id
        return self._topic_name_of(topic_id), topic_id

    def offset_commit(self, ctx: RequestContext) -> None:
        req = ctx.body
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        # Request order of (name, id, partitions) for the response; name is None for an
        # unknown topic id.
        order: list[tuple[str | None, uuid.UUID | None, list[int]]] = []
        group_denied = not ctx.authorized(AclOperation.READ, AclResourceType.GROUP, req.group_id)
        denied: set[str] = set()
        for topic in req.topics:
            name, topic_id = self._topic_of(topic)
            if name is not None and (
                group_denied or not ctx.authorized(AclOperation.READ, AclResourceType.TOPIC, name)
            ):
                denied.add(name)
            partitions = []
            for p in topic.partitions:
                partitions.append(p.partition_index)
                if name is None or name in denied:
                    continue
                offsets[TopicPartition(name, p.partition_index)] = OffsetAndMetadata(
                    offset=p.committed_offset,
                    leader_epoch=getattr(p, "committed_leader_epoch", -1),
                    metadata=p.committed_metadata or "",
                )
            order.append((name, topic_id, partitions))

        def done(errors: dict[TopicPartition, ErrorCode]) -> None:
            topics = []
            for name, topic_id, partitions in order:
                parts = []
                for index in partitions:
                    if group_denied:
                        error = ErrorCode.group_authorization_failed
                    elif name is None:
                        error = ErrorCode.unknown_topic_id
                    elif name in denied:
                        error = ErrorCode.topic_authorization_failed
                    else:
                        error = errors.get(TopicPartition(name, index), ErrorCode.none)
                    parts.append(
                        ctx.make(
                            "OffsetCommitResponsePartition", partition_index=index, error_code=error
                        )
                    )
                topics.append(
                    ctx.make(
                        "OffsetCommitResponseTopic",
                        name=name or "",
                        topic_id=topic_id or _ZERO_UUID,
                        partitions=tuple(parts),
                    )
                )
            ctx.respond(ctx.make_response(topics=tuple(topics)))

        if not offsets:
            done({})
            return
        self.coordinator.commit_offsets(
            group_id=req.group_id,
            member_id=req.member_id,
            group_instance_id=getattr(req, "group_instance_id", None),
            generation_id=req.generation_id_or_member_epoch,
            offsets=offsets,
            callback=ctx.guarded(done),
            retention_ms=_ms(getattr(req, "retention_time", None)),
            api_version=ctx.api_version,
        )

    def txn_offset_commit(self, ctx: RequestContext) -> None:
        """TxnOffsetCommit (KIP-98, KIP-447): offsets pending until the transaction ends.
        Errors go on every partition (the response has no other place): NOT_COORDINATOR,
        TRANSACTIONAL_ID_AUTHORIZATION_FAILED without Write on the transactional id,
        GROUP_AUTHORIZATION_FAILED without Read on the group, TOPIC_AUTHORIZATION_FAILED
        per topic without Read."""
        req = ctx.body
        group_error: ErrorCode | None = None
        if not self.owns(req.group_id):
            group_error = ErrorCode.not_coordinator
        elif not ctx.authorized(
            AclOperation.WRITE, AclResourceType.TRANSACTIONAL_ID, req.transactional_id
        ):
            group_error = ErrorCode.transactional_id_authorization_failed
        elif not ctx.authorized(AclOperation.READ, AclResourceType.GROUP, req.group_id):
            group_error = ErrorCode.group_authorization_failed
        errors: dict[TopicPartition, ErrorCode] = {}
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        for topic in req.topics:
            readable = ctx.authorized(AclOperation.READ, AclResourceType.TOPIC, topic.name)
            for p in topic.partitions:
                tp = TopicPartition(topic.name, int(p.partition_index))
                if group_error is not None:
                    errors[tp] = group_error
                elif not readable:
                    errors[tp] = ErrorCode.topic_authorization_failed
                else:
                    offsets[tp] = OffsetAndMetadata(
                        offset=int(p.committed_offset),
                        leader_epoch=int(getattr(p, "committed_leader_epoch", -1)),
                        metadata=p.committed_metadata or "",
                    )
        if offsets:
            errors.update(
                self.coordinator.commit_txn_offsets(
                    req.group_id,
                    int(req.producer_id),
                    getattr(req, "member_id", UNKNOWN_MEMBER_ID),
                    getattr(req, "group_instance_id", None),
                    int(getattr(req, "generation_id", -1)),
                    offsets,
                )
            )
        fenced_code = ErrorCode.invalid_producer_epoch if ctx.api_version < 3 else None
        topics = []
        for topic in req.topics:
            parts = []
            for p in topic.partitions:
                error = errors.get(TopicPartition(topic.name, int(p.partition_index)))
                if error is ErrorCode.producer_fenced and fenced_code is not None:
                    error = fenced_code
                parts.append(
                    ctx.make(
                        "TxnOffsetCommitResponsePartition",
                        partition_index=p.partition_index,
                        error_code=error or ErrorCode.none,
                    )
                )
            topics.append(
                ctx.make("TxnOffsetCommitResponseTopic", name=topic.name, partitions=tuple(parts))
            )
        ctx.respond(ctx.make_response(topics=tuple(topics)))

    def offset_fetch(self, ctx: RequestContext) -> None:
        req = ctx.body
        version = ctx.api_version
        if hasattr(req, "groups"):  # v8+: several groups (v9+: from a member, at its epoch)
            requests = [
                (
                    g.group_id,
                    g.topics,
                    getattr(g, "member_id", None),
                    getattr(g, "member_epoch", -1),
                )
                for g in req.groups
            ]
        else:
            requests = [(req.group_id, req.topics, None, -1)]
        require_stable = bool(getattr(req, "require_stable", False))
        topic_entity = _nested(ctx, "OffsetFetchResponseTopics", "OffsetFetchResponseTopic")
        partition_entity = _nested(
            ctx, "OffsetFetchResponsePartitions", "OffsetFetchResponsePartition"
        )
        results: list[tuple[str, ErrorCode, tuple[Any, ...]]] = [("", ErrorCode.none, ())] * len(
            requests
        )
        remaining = [len(requests)]
        lock = threading.Lock()

        def partition(index: int, data: OffsetFetchPartition) -> Any:
            return ctx.make(
                partition_entity,
                partition_index=index,
                committed_offset=data.offset,
                committed_leader_epoch=data.leader_epoch,
                metadata=data.metadata,
                error_code=data.error,
            )

        def finish() -> None:
            if version >= 8:
                groups = tuple(
                    ctx.make("OffsetFetchResponseGroup", group_id=g, error_code=e, topics=t)
                    for g, e, t in results
                )
                ctx.respond(ctx.make_response(groups=groups))
            else:
                _group_id, error, topics = results[0]
                ctx.respond(ctx.make_response(error_code=error, topics=topics))

        for slot, (group_id, req_topics, member_id, member_epoch) in enumerate(requests):
            # Request topics as (name or None, id or None, partitions).
            wanted: list[tuple[str | None, uuid.UUID | None, list[int]]] | None = None
            if req_topics is not None:
                wanted = []
                for t in req_topics:
                    name, topic_id = self._topic_of(t)
                    wanted.append((name, topic_id, list(t.partition_indexes)))

            def done(
                result: OffsetFetchResult,
                slot: int = slot,
                group_id: str = group_id,
                wanted: list[tuple[str | None, uuid.UUID | None, list[int]]] | None = wanted,
            ) -> None:
                topics = self._fetch_topics(ctx, topic_entity, partition, result, wanted)
                if result.error is not ErrorCode.none:
                    # v2+ answer a group error alone; v1 puts it on every partition.
                    topics = topics if version < 2 else ()
                with lock:
                    results[slot] = (group_id, result.error, topics)
                    remaining[0] -= 1
                    last = remaining[0] == 0
                if last:
                    finish()

            if not self.owns(group_id):
                done(OffsetFetchResult(ErrorCode.not_coordinator, {}))
                continue
            if not ctx.authorized(AclOperation.DESCRIBE, AclResourceType.GROUP, group_id):
                done(OffsetFetchResult(ErrorCode.group_authorization_failed, {}))
                continue
            partitions = None
            if wanted is not None:
                partitions = [
                    TopicPartition(name, index)
                    for name, _id, indexes in wanted
                    if name is not None
                    for index in indexes
                ]
            self.coordinator.fetch_offsets(
                group_id,
                partitions,
                done,
                require_stable=require_stable,
                member_id=member_id,
                member_epoch=member_epoch,
            )
        if not requests:
            finish()

    def _fetch_topics(
        self,
        ctx: RequestContext,
        topic_entity: str,
        partition: Callable[[int, OffsetFetchPartition], Any],
        result: OffsetFetchResult,
        wanted: list[tuple[str | None, uuid.UUID | None, list[int]]] | None,
    ) -> tuple[Any, ...]:
        group_error = result.error
        if wanted is None:  # every committed partition
            by_topic: dict[str, list[Any]] = {}
            for tp, data in result.partitions.items():
                if ctx.authorized(AclOperation.DESCRIBE, AclResourceType.TOPIC, tp.topic, False):
                    by_topic.setdefault(tp.topic, []).append(partition(tp.partition, data))
            return tuple(
                ctx.make(
                    topic_entity,
                    name=name,
                    topic_id=self._topic_id_of(name) or _ZERO_UUID,
                    partitions=tuple(parts),
                )
                for name, parts in by_topic.items()
            )
        topics = []
        for name, topic_id, indexes in wanted:
            parts = []
            describable = name is not None and ctx.authorized(
                AclOperation.DESCRIBE, AclResourceType.TOPIC, name
            )
            for index in indexes:
                if name is None:
                    data = OffsetFetchPartition(error=ErrorCode.unknown_topic_id)
                elif group_error is not ErrorCode.none:
                    data = OffsetFetchPartition(error=group_error)
                elif not describable:
                    data = OffsetFetchPartition(error=ErrorCode.topic_authorization_failed)
                else:
                    data = result.partitions.get(
                        TopicPartition(name, index), OffsetFetchPartition()
                    )
                parts.append(partition(index, data))
            topics.append(
                ctx.make(
                    topic_entity,
                    name=name or "",
                    topic_id=topic_id or _ZERO_UUID,
                    partitions=tuple(parts),
                )
            )
        return tuple(topics)

    def offset_delete(self, ctx: RequestContext) -> None:
        req = ctx.body
        order = [(t.name, [p.partition_index for p in t.partitions]) for t in req.topics]
        if not ctx.authorized(AclOperation.DELETE, AclResourceType.GROUP, req.group_id):
            ctx.respond(
                ctx.make_response(error_code=ErrorCode.group_authorization_failed, topics=())
            )
            return
        denied = {
            name
            for name, _ in order
            if not ctx.authorized(AclOperation.READ, AclResourceType.TOPIC, name)
        }

        def done(result: OffsetDeleteResult) -> None:
            if result.error is not ErrorCode.none:
                ctx.respond(ctx.make_response(error_code=result.error, topics=()))
                return
            topics = tuple(
                ctx.make(
                    "OffsetDeleteResponseTopic",
                    name=name,
                    partitions=tuple(
                        ctx.make(
                            "OffsetDeleteResponsePartition",
                            partition_index=index,
                            error_code=ErrorCode.topic_authorization_failed
                            if name in denied
                            else result.partitions.get(TopicPartition(name, index), ErrorCode.none),
                        )
                        for index in indexes
                    ),
                )
                for name, indexes in order
            )
            ctx.respond(ctx.make_response(error_code=ErrorCode.none, topics=topics))

        partitions = [
            TopicPartition(name, index)
            for name, indexes in order
            if name not in denied
            for index in indexes
        ]
        self.coordinator.delete_offsets(req.group_id, partitions, done)

    # -- admin ----------------------------------------------------------------------------

    def list_groups(self, ctx: RequestContext) -> None:
        req = ctx.body
        everything = ctx.authorized(
            AclOperation.DESCRIBE, AclResourceType.CLUSTER, log_denied=False
        )

        def done(groups: list[GroupOverview]) -> None:
            if not everything:
                groups = [
                    g
                    for g in groups
                    if ctx.authorized(
                        AclOperation.DESCRIBE, AclResourceType.GROUP, g.group_id, False
                    )
                ]
            ctx.respond(
                ctx.make_response(
                    error_code=ErrorCode.none,
                    groups=tuple(
                        ctx.make(
                            "ListedGroup",
                            group_id=g.group_id,
                            protocol_type=g.protocol_type,
                            group_state=g.state,
                            group_type=g.group_type,
                        )
                        for g in groups
                    ),
                )
            )

        self.coordinator.list_groups(
            done,
            states_filter=getattr(req, "states_filter", ()),
            types_filter=getattr(req, "types_filter", ()),
        )

    def describe_groups(self, ctx: RequestContext) -> None:
        req = ctx.body
        include_ops = bool(getattr(req, "include_authorized_operations", False))

        def done(groups: list[GroupDescription]) -> None:
            described = tuple(
                ctx.make(
                    "DescribedGroup",
                    error_code=g.error,
                    error_message=g.error_message,
                    group_id=g.group_id,
                    group_state=g.state,
                    protocol_type=g.protocol_type,
                    protocol_data=g.protocol_data,
                    members=tuple(
                        ctx.make(
                            "DescribedGroupMember",
                            member_id=m.member_id,
                            group_instance_id=m.group_instance_id,
                            client_id=m.client_id,
                            client_host=m.client_host,
                            member_metadata=m.metadata,
                            member_assignment=m.assignment,
                        )
                        for m in g.members
                    ),
                    authorized_operations=(
                        _GROUP_AUTHORIZED_OPERATIONS if include_ops else -(2**31)
                    ),
                )
                for g in groups
            )
            ctx.respond(ctx.make_response(groups=described))

        refused = self._refused(ctx, req.groups, AclOperation.DESCRIBE)
        allowed = [g for g in req.groups if g not in refused]

        def with_denied(groups: list[GroupDescription]) -> None:
            by_id = {g.group_id: g for g in groups}
            done(
                [
                    by_id.get(g) or GroupDescription(g, "", "", "", error=refused[g])
                    for g in req.groups
                ]
            )

        self.coordinator.describe_groups(allowed, with_denied)

    def _refused(
        self, ctx: RequestContext, groups: Iterable[str], operation: AclOperation
    ) -> dict[str, ErrorCode]:
        """Groups another broker coordinates (NOT_COORDINATOR) or the principal may not
        ``operation`` (GROUP_AUTHORIZATION_FAILED)."""
        out = {}
        for group in groups:
            if not self.owns(group):
                out[group] = ErrorCode.not_coordinator
            elif not ctx.authorized(operation, AclResourceType.GROUP, group):
                out[group] = ErrorCode.group_authorization_failed
        return out

    def delete_groups(self, ctx: RequestContext) -> None:
        req = ctx.body

        def done(errors: dict[str, ErrorCode]) -> None:
            ctx.respond(
                ctx.make_response(
                    results=tuple(
                        ctx.make("DeletableGroupResult", group_id=group_id, error_code=error)
                        for group_id, error in errors.items()
                    )
                )
            )

        refused = self._refused(ctx, req.groups_names, AclOperation.DELETE)
        allowed = [g for g in req.groups_names if g not in refused]

        def with_denied(errors: dict[str, ErrorCode]) -> None:
            done({g: errors.get(g, refused.get(g, ErrorCode.none)) for g in req.groups_names})

        self.coordinator.delete_groups(allowed, with_denied)
