"""CreateTopics, DeleteTopics and CreatePartitions.

Each topic's partitions are recorded against the client's controller mutation quota
(KIP-599) once the change is known to be valid and before it is made: strict versions
(CreateTopics v6+, DeleteTopics v5+, CreatePartitions v3+) refuse the topics past it with
THROTTLING_QUOTA_EXCEEDED, older ones make every change; the response carries the
throttle."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any

from kplane.broker.metadata.cache import MetadataCache
from kplane.broker.quota.client_quotas import ClientQuotas
from kplane.broker.quota.controller_mutation import ControllerMutationQuota
from kplane.broker.server.admin_manager import AdminManager, excessive_partitions
from kplane.broker.server.context import Handler, RequestContext
from kplane.broker.utils.purgatory import DelayedOperation, DelayedOperationPurgatory
from kplane.common.acl import AclOperation, AclResourceType
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode, KafkaError

ZERO_UUID = uuid.UUID(int=0)
CREATE_TOPICS_STRICT_SINCE = 6
DELETE_TOPICS_STRICT_SINCE = 5
CREATE_PARTITIONS_STRICT_SINCE = 3
"""The versions whose clients know THROTTLING_QUOTA_EXCEEDED (KIP-599)."""


class DelayedTopicOperation(DelayedOperation):
    """Kafka's topic purgatory: a CreateTopics or DeleteTopics answered once every topic it
    changed is ``settled`` in this broker's metadata, so the client may act on what it is
    told at once; topics not settled at the request's timeout are REQUEST_TIMED_OUT."""

    def __init__(
        self,
        settled: Callable[[str], bool],
        answer: Callable[[RequestContext, list[dict[str, Any]]], None],
        ctx: RequestContext,
        results: list[dict[str, Any]],
        delay_ms: float,
    ) -> None:
        super().__init__(delay_ms)
        self.settled = settled
        self.answer = answer
        self.ctx = ctx
        self.results = results

    def _waiting(self) -> list[dict[str, Any]]:
        return [
            r
            for r in self.results
            if r["error_code"] == ErrorCode.none and not self.settled(r["name"])
        ]

    def try_complete(self) -> bool:
        return not self._waiting() and self.force_complete()

    def on_complete(self) -> None:
        for result in self._waiting():
            result |= {
                "error_code": ErrorCode.request_timed_out,
                "error_message": "Operation timed out.",
            }
        self.answer(self.ctx, self.results)


class TopicApis:
    """Topic administration requests, answered per topic."""

    def __init__(
        self,
        admin: AdminManager,
        cache: MetadataCache,
        delete_enabled: Callable[[], bool],
        purgatory: DelayedOperationPurgatory,
        quotas: ClientQuotas | None = None,
    ) -> None:
        self.admin = admin
        self._quotas = quotas
        self.cache = cache
        self._delete_enabled = delete_enabled
        self.purgatory = purgatory  # Kafka's "topic" purgatory
        cache.add_topic_listener(purgatory.check_and_complete)

    def has_leaders(self, topic: str) -> bool:
        """Whether ``topic`` is in this broker's metadata with a leader for every partition."""
        info = self.cache.topic(topic)
        return info is not None and all(p.leader >= 0 for p in info.partitions.values())

    def _mutation_quota(
        self, ctx: RequestContext, strict_since: int
    ) -> ControllerMutationQuota | None:
        """The request's controller mutation quota, ``None`` when it is not limited."""
        if self._quotas is None:
            return None
        return self._quotas.controller_mutation_quota(ctx.request, strict_since)

    def handlers(self) -> Mapping[int, Handler]:
        return {
            ApiKey.CREATE_TOPICS: self.handle_create_topics,
            ApiKey.DELETE_TOPICS: self.handle_delete_topics,
            ApiKey.CREATE_PARTITIONS: self.handle_create_partitions,
        }

    def handle_create_topics(self, ctx: RequestContext) -> None:
        req = ctx.body
        names = [t.name for t in req.topics]
        quota = None if req.validate_only else self._mutation_quota(ctx, CREATE_TOPICS_STRICT_SINCE)
        cluster_create = ctx.authorized(
            AclOperation.CREATE, AclResourceType.CLUSTER, log_denied=False
        )
        too_big = excessive_partitions(
            self.admin.requested_partitions(int(t.num_partitions), len(t.assignments))
            for t in req.topics
        )
        results = []
        for topic in req.topics:
            values: dict[str, Any] = {"name": topic.name, "configs": None}
            try:
                if too_big is not None:
                    raise too_big
                if names.count(topic.name) > 1:
                    raise KafkaError(
                        ErrorCode.invalid_request,
                        f"Create topics request contains duplicate topic name {topic.name}",
                    )
                if not cluster_create and not ctx.authorized(
                    AclOperation.CREATE, AclResourceType.TOPIC, topic.name
                ):
                    raise KafkaError(ErrorCode.topic_authorization_failed, "Authorization failed.")
                configs = {c.name: c.value for c in topic.configs}
                args = (
                    topic.name,
                    int(topic.num_partitions),
                    int(topic.replication_factor),
                    [(int(a.partition_index), list(a.broker_ids)) for a in topic.assignments],
                    configs,
                )
                if quota is not None:  # a valid creation only, before it is made
                    valid = self.admin.create_topic(*args, validate_only=True)
                    quota.record(len(valid.partitions))
                assignment = self.admin.create_topic(*args, validate_only=bool(req.validate_only))
                values |= {
                    "error_code": ErrorCode.none,
                    "error_message": None,
                    "topic_id": assignment.topic_id,
                    "num_partitions": len(assignment.partitions),
                    "replication_factor": len(next(iter(assignment.partitions.values()))),
                    "configs": tuple(
                        ctx.make(
                            "CreatableTopicConfigs",
                            name=k,
                            value=v,
                            read_only=False,
                            config_source=1,
                            is_sensitive=False,
                        )
                        for k, v in sorted(configs.items())
                    )
                    if ctx.api_version >= 5  # CreateTopics v5 added the effective configs
                    else None,
                }
            except KafkaError as exc:
                values |= {
                    "error_code": exc.code,
                    "error_message": exc.message,
                    "num_partitions": -1,
                    "replication_factor": -1,
                }
            results.append(values)
        timeout_ms = req.timeout.total_seconds() * 1000.0
        if req.validate_only or timeout_ms <= 0:
            self.answer_create_topics(ctx, results)
            return
        # Kafka's DelayedCreatePartitions: until each topic has its leaders here
        self._park(self.has_leaders, self.answer_create_topics, ctx, results, timeout_ms)

    def answer_create_topics(self, ctx: RequestContext, results: list[dict[str, Any]]) -> None:
        """The CreateTopics answer, one result per topic."""
        topics = tuple(ctx.make("CreatableTopicResult", **values) for values in results)
        ctx.respond(ctx.make_response(topics=topics))

    @staticmethod
    def answer_delete_topics(ctx: RequestContext, results: list[dict[str, Any]]) -> None:
        """The DeleteTopics answer, one result per topic."""
        topics = tuple(ctx.make("DeletableTopicResult", **values) for values in results)
        ctx.respond(ctx.make_response(responses=topics))

    def _gone(self, topic: str) -> bool:
        return self.cache.topic(topic) is None

    def _park(
        self,
        settled: Callable[[str], bool],
        answer: Callable[[RequestContext, list[dict[str, Any]]], None],
        ctx: RequestContext,
        results: list[dict[str, Any]],
        timeout_ms: float,
    ) -> None:
        """Answer once every topic of ``results`` is ``settled``, at ``timeout_ms``, or at
        once when the client leaves (its connection then closes without waiting)."""
        delayed = DelayedTopicOperation(settled, answer, ctx, results, timeout_ms)
        self.purgatory.try_complete_else_watch(delayed, [r["name"] for r in results])
        ctx.request.on_disconnect(delayed.force_complete)

    def handle_delete_topics(self, ctx: RequestContext) -> None:
        req = ctx.body
        if ctx.api_version >= 6:
            wanted = [(t.name, t.topic_id) for t in req.topics]
        else:
            wanted = [(name, None) for name in req.topic_names]
        quota = self._mutation_quota(ctx, DELETE_TOPICS_STRICT_SINCE)
        results = []
        for name, topic_id in wanted:
            error, message = ErrorCode.none, None
            try:
                if not self._delete_enabled():
                    raise KafkaError(
                        ErrorCode.topic_deletion_disabled,
                        "Topic deletion is disabled (delete.topic.enable=false).",
                    )
                _check_name_or_id(name, topic_id, wanted)
                if name is None and topic_id is not None:
                    name = self.cache.topic_name(topic_id)
                if name is None:
                    raise KafkaError(ErrorCode.unknown_topic_id, f"Topic id {topic_id} not found")
                if not ctx.authorized(AclOperation.DELETE, AclResourceType.TOPIC, name):
                    raise KafkaError(ErrorCode.topic_authorization_failed, "Authorization failed.")
                if quota is not None and (info := self.cache.topic(name)) is not None:
                    quota.record(len(info.partitions))
                topic_id = self.admin.delete_topic(name)
            except KafkaError as exc:
                error, message = exc.code, exc.message
            results.append(
                {"name": name, "topic_id": topic_id, "error_code": error, "error_message": message}
            )
        timeout_ms = req.timeout.total_seconds() * 1000.0
        if timeout_ms <= 0:
            self.answer_delete_topics(ctx, results)
            return
        # Kafka's DelayedDeleteTopics: until each topic is gone from the metadata here
        self._park(self._gone, self.answer_delete_topics, ctx, results, timeout_ms)

    def handle_create_partitions(self, ctx: RequestContext) -> None:
        req = ctx.body
        names = [t.name for t in req.topics]
        too_big = excessive_partitions(
            self.admin.added_partitions(t.name, int(t.count)) for t in req.topics
        )
        quota = (
            None if req.validate_only else self._mutation_quota(ctx, CREATE_PARTITIONS_STRICT_SINCE)
        )
        results = []
        for topic in req.topics:
            error, message = ErrorCode.none, None
            try:
                if too_big is not None:
                    raise too_big
                if names.count(topic.name) > 1:
                    raise KafkaError(ErrorCode.invalid_request, "Duplicate topic in request.")
                if not ctx.authorized(AclOperation.ALTER, AclResourceType.TOPIC, topic.name):
                    raise KafkaError(ErrorCode.topic_authorization_failed, "Authorization failed.")
                assignments = (
                    [list(a.broker_ids) for a in topic.assignments]
                    if topic.assignments is not None
                    else None
                )
                if quota is not None:  # a valid change only, before it is made
                    self.admin.create_partitions(topic.name, int(topic.count), assignments, True)
                    quota.record(self.admin.added_partitions(topic.name, int(topic.count)))
                self.admin.create_partitions(
                    topic.name, int(topic.count), assignments, bool(req.validate_only)
                )
            except KafkaError as exc:
                error, message = exc.code, exc.message
            results.append(
                ctx.make(
                    "CreatePartitionsTopicResult",
                    name=topic.name,
                    error_code=error,
                    error_message=message,
                )
            )
        ctx.respond(ctx.make_response(results=tuple(results)))


def _check_name_or_id(
    name: str | None, topic_id: uuid.UUID | None, wanted: list[tuple[str | None, uuid.UUID | None]]
) -> None:
    """A DeleteTopics entry names its topic by name or by id, once (Kafka's ControllerApis)."""
    has_id = topic_id is not None and topic_id != ZERO_UUID
    if name is None and not has_id:
        raise KafkaError(ErrorCode.invalid_request, "Neither topic name nor id were specified.")
    if name is not None and has_id:
        raise KafkaError(
            ErrorCode.invalid_request, "You may not specify both topic name and topic id."
        )
    if wanted.count((name, topic_id)) > 1:
        raise KafkaError(
            ErrorCode.invalid_request,
            "Duplicate topic name." if name is not None else "Duplicate topic id.",
        )
