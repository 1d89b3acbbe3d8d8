"""OffsetForLeaderEpoch (API 23, KIP-101 and KIP-320): where a leader epoch ends in the
leader's log.

Followers ask it before fetching, to find how much of their log diverges from the leader's;
clients (librdkafka, Java) ask it after a leader change to check that the offset they are
at still exists. Kafka's KafkaApis.handleOffsetForLeaderEpochRequest and
Partition.lastOffsetForLeaderEpoch are the spec:

* ClusterAction on the cluster authorizes every topic (a broker); without it, Describe on
  each topic (a client, KIP-320), else TOPIC_AUTHORIZATION_FAILED for its partitions.
  ``replica_id`` plays no part.
* A partition not in the metadata: UNKNOWN_TOPIC_OR_PARTITION. Hosted here: its
  ``current_leader_epoch`` is checked first (-1 skips the check; older than the partition's
  leader epoch FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH), then leadership
  (NOT_LEADER_OR_FOLLOWER, as for a partition in the metadata that is not hosted here).
* The answer is the log's (leader epoch, end offset): the largest epoch at most the one
  asked and the offset where the next one begins (the log end for the latest epoch), or
  (-1, -1) with no error when the epoch is unknown (see
  :meth:`broker.log.leader_epoch_cache.LeaderEpochCache.end_offset_for`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kplane.broker.log.partition import TopicPartition
from kplane.broker.server.context import Handler, RequestContext
from kplane.broker.server.replica_manager import ReplicaManager
from kplane.common.acl import AclOperation, AclResourceType
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode, KafkaError


class OffsetForLeaderEpochApis:
    """OffsetForLeaderEpoch, every version kio knows, answered by partition leaders."""

    def __init__(self, replica_manager: ReplicaManager) -> None:
        self.replica_manager = replica_manager

    def handlers(self) -> Mapping[int, Handler]:
        return {ApiKey.OFFSET_FOR_LEADER_EPOCH: self.handle_offset_for_leader_epoch}

    def handle_offset_for_leader_epoch(self, ctx: RequestContext) -> None:
        cluster_action = ctx.authorized(
            AclOperation.CLUSTER_ACTION, AclResourceType.CLUSTER, log_denied=False
        )
        topics = []
        for topic in ctx.body.topics:
            allowed = cluster_action or ctx.authorized(
                AclOperation.DESCRIBE, AclResourceType.TOPIC, topic.topic
            )
            partitions = tuple(
                self._end_offset(ctx, topic.topic, p)
                if allowed
                else ctx.make(
                    "EpochEndOffset",
                    partition=p.partition,
                    error_code=ErrorCode.topic_authorization_failed,
                )
                for p in topic.partitions
            )
            topics.append(
                ctx.make("OffsetForLeaderTopicResult", topic=topic.topic, partitions=partitions)
            )
        ctx.respond(ctx.make_response(topics=tuple(topics)))

    def _end_offset(self, ctx: RequestContext, topic: str, request: Any) -> Any:
        tp = TopicPartition(topic, int(request.partition))
        error, epoch, end_offset = self.end_offset_for(
            tp, int(request.current_leader_epoch), int(request.leader_epoch)
        )
        return ctx.make(
            "EpochEndOffset",
            partition=request.partition,
            error_code=error,
            leader_epoch=epoch,
            end_offset=end_offset,
        )

    def end_offset_for(
        self, tp: TopicPartition, current_leader_epoch: int, leader_epoch: int
    ) -> tuple[ErrorCode, int, int]:
        """(error, leader epoch, end offset) of one partition (Kafka's
        ReplicaManager.lastOffsetForLeaderEpoch with fetchOnlyFromLeader)."""
        try:
            partition = self.replica_manager.leader_partition(tp, current_leader_epoch)
        except KafkaError as exc:
            return exc.code, -1, -1
        epoch, end_offset = partition.log.end_offset_for_epoch(leader_epoch)
        return ErrorCode.none, epoch, end_offset
