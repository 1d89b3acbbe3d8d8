"""KIP-932's admin APIs for a share group's progress: DescribeShareGroupOffsets (90),
AlterShareGroupOffsets (91) and DeleteShareGroupOffsets (92), at the group's coordinator,
over the stored share-partition state (the start offsets). Altering and deleting need an
empty group; altering makes the share group when it does not exist yet, as Kafka does."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from kplane.broker.group.coordinator import GroupCoordinator
from kplane.broker.log.partition import TopicPartition
from kplane.broker.metadata.cache import MetadataCache
from kplane.broker.server.context import Handler, RequestContext
from kplane.broker.share.share_partition_manager import SharePartitionManager
from kplane.common.acl import AclOperation, AclResourceType
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode, KafkaError

log = structlog.get_logger(__name__)


class ShareOffsetApis:
    """ApiFamily for the share-group offset APIs."""

    def __init__(
        self,
        coordinator: GroupCoordinator,
        partitions: SharePartitionManager,
        cache: MetadataCache,
        *,
        owns: Callable[[str], bool],
    ) -> None:
        self.coordinator = coordinator
        self.partitions = partitions
        self.cache = cache
        self._owns = owns

    def handlers(self) -> Mapping[int, Handler]:
        return {
            ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: self.handle_describe,
            ApiKey.ALTER_SHARE_GROUP_OFFSETS: self.handle_alter,
            ApiKey.DELETE_SHARE_GROUP_OFFSETS: self.handle_delete,
        }

    def _topic_id(self, topic: str) -> uuid.UUID | None:
        info = self.cache.snapshot.topics.get(topic)
        return info.topic_id if info is not None else None

    def _partition_count(self, topic: str) -> int:
        info = self.cache.snapshot.topics.get(topic)
        return len(info.partitions) if info is not None else 0

    def _group_error(
        self, ctx: RequestContext, group_id: str, operation: AclOperation
    ) -> ErrorCode | None:
        if not self._owns(group_id):
            return ErrorCode.not_coordinator
        if not ctx.authorized(operation, AclResourceType.GROUP, group_id):
            return ErrorCode.group_authorization_failed
        return None

    def _empty_group(
        self, ctx: RequestContext, group_id: str, operation: AclOperation, create: bool
    ) -> bool:
        """Whether the group may have its offsets changed now (an empty share group, made
        when ``create``); else answers the request with why not."""
        try:
            error = self._group_error(ctx, group_id, operation)
            if error is not None:
                raise KafkaError(error)
            self.coordinator.share.empty_group(group_id, create=create)
        except KafkaError as exc:
            ctx.respond(self._response(ctx, exc.code, exc.message, ()))
            return False
        return True

    def _topic_error(self, ctx: RequestContext, topic: str) -> ErrorCode:
        """A topic of an alter or delete: READ denied, or unknown; else none."""
        if not ctx.authorized(AclOperation.READ, AclResourceType.TOPIC, topic):
            return ErrorCode.topic_authorization_failed
        if self._topic_id(topic) is None:
            return ErrorCode.unknown_topic_or_partition
        return ErrorCode.none

    @staticmethod
    def _response(
        ctx: RequestContext, code: ErrorCode, message: str | None, topics: tuple[Any, ...]
    ) -> Any:
        """AlterShareGroupOffsets' and DeleteShareGroupOffsets' answer."""
        return ctx.make_response(
            throttle_time=datetime.timedelta(0),
            error_code=code,
            error_message=message,
            responses=topics,
        )

    # -- DescribeShareGroupOffsets ----------------------------------------------------

    def handle_describe(self, ctx: RequestContext) -> None:
        groups = [self._describe_group(ctx, g) for g in ctx.body.groups]
        ctx.respond(ctx.make_response(throttle_time=datetime.timedelta(0), groups=tuple(groups)))

    def _describe_group(self, ctx: RequestContext, req: Any) -> Any:
        group_id = str(req.group_id)
        error = self._group_error(ctx, group_id, AclOperation.DESCRIBE)
        if error is None and not self.coordinator.share.is_share_group(group_id):
            error = ErrorCode.group_id_not_found
        if error is not None:
            return ctx.make(
                "DescribeShareGroupOffsetsResponseGroup",
                group_id=group_id,
                topics=(),
                error_code=error,
            )
        if req.topics is None:
            wanted = None
        else:
            wanted = [
                TopicPartition(str(t.topic_name), int(p)) for t in req.topics for p in t.partitions
            ]
        found = self.partitions.stored_offsets(group_id, wanted)
        by_topic: dict[str, list[Any]] = {}
        for tp, offset in sorted(found.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
            code = ErrorCode.none
            if not ctx.authorized(AclOperation.DESCRIBE, AclResourceType.TOPIC, tp.topic):
                code = ErrorCode.topic_authorization_failed
            elif self._topic_id(tp.topic) is None or tp.partition >= self._partition_count(
                tp.topic
            ):
                code = ErrorCode.unknown_topic_or_partition
            ok = code is ErrorCode.none
            by_topic.setdefault(tp.topic, []).append(
                ctx.make(
                    "DescribeShareGroupOffsetsResponsePartition",
                    partition_index=tp.partition,
                    start_offset=offset.start_offset if ok else -1,
                    leader_epoch=offset.leader_epoch if ok else -1,
                    lag=offset.lag if ok else -1,
                    error_code=code,
                )
            )
        return ctx.make(
            "DescribeShareGroupOffsetsResponseGroup",
            group_id=group_id,
            error_code=ErrorCode.none,
            topics=tuple(
                ctx.make(
                    "DescribeShareGroupOffsetsResponseTopic",
                    topic_name=topic,
                    topic_id=self._topic_id(topic) or uuid.UUID(int=0),
                    partitions=tuple(parts),
                )
                for topic, parts in by_topic.items()
            ),
        )

    # -- AlterShareGroupOffsets -------------------------------------------------------

    def handle_alter(self, ctx: RequestContext) -> None:
        req = ctx.body
        group_id = str(req.group_id)
        if not self._empty_group(ctx, group_id, AclOperation.READ, create=True):
            return
        offsets: dict[TopicPartition, int] = {}
        topics = []
        for topic in req.topics:
            name = str(topic.topic_name)
            code = self._topic_error(ctx, name)
            parts = []
            for p in topic.partitions:
                index = int(p.partition_index)
                part_code = code
                if code is ErrorCode.none and index >= self._partition_count(name):
                    part_code = ErrorCode.unknown_topic_or_partition
                if part_code is ErrorCode.none:
                    offsets[TopicPartition(name, index)] = int(p.start_offset)
                parts.append(
                    ctx.make(
                        "AlterShareGroupOffsetsResponsePartition",
                        partition_index=index,
                        error_code=part_code,
                    )
                )
            topics.append(
                ctx.make(
                    "AlterShareGroupOffsetsResponseTopic",
                    topic_name=name,
                    topic_id=self._topic_id(name) or uuid.UUID(int=0),
                    partitions=tuple(parts),
                )
            )
        if offsets:
            self.partitions.alter_offsets(group_id, offsets)
            log.info(
                "share group offsets altered",
                group=group_id,
                partitions=[str(tp) for tp in offsets],
            )
        ctx.respond(self._response(ctx, ErrorCode.none, None, tuple(topics)))

    # -- DeleteShareGroupOffsets ------------------------------------------------------

    def handle_delete(self, ctx: RequestContext) -> None:
        req = ctx.body
        group_id = str(req.group_id)
        if not self._empty_group(ctx, group_id, AclOperation.DELETE, create=False):
            return
        stored = self.partitions.stored_partitions(group_id)
        gone: list[TopicPartition] = []
        topics = []
        for topic in req.topics:
            name = str(topic.topic_name)
            code = self._topic_error(ctx, name)
            if code is ErrorCode.none:
                gone += [tp for tp in stored if tp.topic == name]
            topics.append(
                ctx.make(
                    "DeleteShareGroupOffsetsResponseTopic",
                    topic_name=name,
                    topic_id=self._topic_id(name) or uuid.UUID(int=0),
                    error_code=code,
                )
            )
        if gone:
            self.partitions.delete_offsets(group_id, gone)
            log.info(
                "share group offsets deleted", group=group_id, partitions=[str(tp) for tp in gone]
            )
        ctx.respond(self._response(ctx, ErrorCode.none, None, tuple(topics)))
