"""DescribeLogDirs (API 35) and AlterReplicaLogDirs (API 34), KIP-113: the log dirs of
``log.dirs`` and the replicas each holds, and moves of replicas between them, as Kafka's
ReplicaManager.describeLogDirs and alterReplicaLogDirs answer them."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import structlog

from kplane.broker.log.log_manager import DirReplica, LogDirReplicas, LogManager
from kplane.broker.log.partition import TopicPartition
from kplane.broker.server.context import Handler, RequestContext
from kplane.common.acl import AclOperation, AclResourceType
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode, KafkaError

log = structlog.get_logger(__name__)

INVALID_OFFSET_LAG = -1
"""A replica whose partition is no longer hosted here (Kafka's INVALID_OFFSET_LAG)."""


class LogDirApis:
    """Serves the log dir APIs over the LogManager."""

    def __init__(self, log_manager: LogManager) -> None:
        self.log_manager = log_manager

    def handlers(self) -> Mapping[int, Handler]:
        return {
            ApiKey.DESCRIBE_LOG_DIRS: self.handle_describe_log_dirs,
            ApiKey.ALTER_REPLICA_LOG_DIRS: self.handle_alter_replica_log_dirs,
        }

    # DescribeLogDirs -----------------------------------------------------------------
    def handle_describe_log_dirs(self, ctx: RequestContext) -> None:
        """Every log dir with its replicas (those of the topics and partitions asked for,
        all when ``topics`` is null); CLUSTER_AUTHORIZATION_FAILED and no dirs without
        DESCRIBE on the cluster."""
        if not ctx.authorized(AclOperation.DESCRIBE, AclResourceType.CLUSTER):
            ctx.respond(
                ctx.make_response(error_code=ErrorCode.cluster_authorization_failed, results=())
            )
            return
        topics = ctx.body.topics
        wanted = (
            None if topics is None else {(t.topic, int(p)) for t in topics for p in t.partitions}
        )
        results = tuple(
            self._dir_result(ctx, d, wanted) for d in self.log_manager.replicas_by_dir()
        )
        ctx.respond(ctx.make_response(error_code=ErrorCode.none, results=results))

    def _dir_result(
        self, ctx: RequestContext, d: LogDirReplicas, wanted: set[tuple[str, int]] | None
    ) -> Any:
        path = os.path.abspath(d.path)
        failed = ctx.make(
            "DescribeLogDirsResult",
            error_code=ErrorCode.kafka_storage_error,
            log_dir=path,
            topics=(),
        )
        if d.offline:  # its failure was logged when it went offline
            return failed
        try:
            space = os.statvfs(path)
        except OSError as exc:
            log.warning("log dir not described", log_dir=path, reason=str(exc))
            return failed
        by_topic: dict[str, list[Any]] = {}
        for replica in sorted(d.replicas, key=lambda r: (r.tp.topic, r.tp.partition)):
            tp = replica.tp
            if wanted is not None and (tp.topic, tp.partition) not in wanted:
                continue
            by_topic.setdefault(tp.topic, []).append(
                ctx.make(
                    "DescribeLogDirsPartition",
                    partition_index=tp.partition,
                    partition_size=replica.log.size_bytes,
                    offset_lag=self._offset_lag(replica),
                    is_future_key=replica.is_future,
                )
            )
        return ctx.make(
            "DescribeLogDirsResult",
            error_code=ErrorCode.none,
            log_dir=path,
            topics=tuple(
                ctx.make("DescribeLogDirsTopic", name=topic, partitions=tuple(partitions))
                for topic, partitions in by_topic.items()
            ),
            total_bytes=space.f_blocks * space.f_frsize,
            usable_bytes=space.f_bavail * space.f_frsize,
            is_cordoned=False,
        )

    def _offset_lag(self, replica: DirReplica) -> int:
        """Kafka's getLogEndOffsetLag: a current log's end behind the high watermark (0 but
        while a follower truncates), a future log's end behind the current log's."""
        partition = self.log_manager.get(replica.tp)
        if partition is None:
            return INVALID_OFFSET_LAG
        end = replica.log.log_end_offset
        if replica.is_future:
            return partition.log.log_end_offset - end
        return max(partition.high_watermark - end, 0)

    # AlterReplicaLogDirs -------------------------------------------------------------
    def handle_alter_replica_log_dirs(self, ctx: RequestContext) -> None:
        """Move each named replica to its dir (the last dir naming a partition wins), one
        error per partition; CLUSTER_AUTHORIZATION_FAILED for all without ALTER on the
        cluster. Refusals are one warning line for the request."""
        moves: dict[TopicPartition, str] = {}
        for d in ctx.body.dirs:
            for t in d.topics:
                for p in t.partitions:
                    moves[TopicPartition(t.name, int(p))] = d.path
        errors: dict[TopicPartition, ErrorCode] = {}
        if not ctx.authorized(AclOperation.ALTER, AclResourceType.CLUSTER):
            errors = dict.fromkeys(moves, ErrorCode.cluster_authorization_failed)
        else:
            refused: dict[str, str] = {}
            for tp, destination in moves.items():
                try:
                    self.log_manager.alter_log_dir(tp, destination)
                    errors[tp] = ErrorCode.none
                except KafkaError as exc:
                    errors[tp] = exc.code
                    refused[f"{tp}:{destination}"] = exc.code.name
            if refused:
                log.warning(
                    "replica log dir moves refused",
                    connection=ctx.request.connection_id,
                    refused=refused,
                )
        by_topic: dict[str, list[Any]] = {}
        for tp, error in errors.items():
            by_topic.setdefault(tp.topic, []).append(
                ctx.make(
                    "AlterReplicaLogDirPartitionResult",
                    partition_index=tp.partition,
                    error_code=error,
                )
            )
        ctx.respond(
            ctx.make_response(
                results=tuple(
                    ctx.make(
                        "AlterReplicaLogDirTopicResult",
                        topic_name=topic,
                        partitions=tuple(partitions),
                    )
                    for topic, partitions in by_topic.items()
                )
            )
        )
