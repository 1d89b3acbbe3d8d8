"""Metadata, DescribeTopicPartitions, DescribeCluster and FindCoordinator: answers that
depend on the listener.

Each answers with the advertised endpoints of the listener the request arrived on, and
nothing else (KIP-103). A live broker without that listener is left out.
DescribeTopicPartitions (KIP-966) pages through topics in name order, at most
``ResponsePartitionLimit`` partitions (and ``max.request.partition.size.limit``) a
response, with a cursor to the next.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from kplane.broker.metadata.cache import MetadataCache, PartitionInfo, TopicInfo
from kplane.broker.quota.client_quotas import ClientQuotas
from kplane.broker.server.admin_manager import AdminManager
from kplane.broker.server.context import Handler, RequestContext
from kplane.common.acl import AclOperation, AclResourceType
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode, KafkaError
from kplane.protocol.topic_names import validate_topic_name

log = structlog.get_logger(__name__)

AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
ZERO_UUID = uuid.UUID(int=0)


class MetadataApis:
    """Listener-aware cluster metadata."""

    def __init__(
        self,
        broker_id: int,
        cache: MetadataCache,
        admin: AdminManager,
        auto_create_topics: Callable[[], bool],
        coordinator_of: Callable[[str], int | None],
        txn_coordinator_of: Callable[[str], int | None],
        partition_size_limit: Callable[[], int],
        quotas: ClientQuotas | None = None,
    ) -> None:
        self.broker_id = broker_id
        self._quotas = quotas
        self.cache = cache
        self.admin = admin
        self._auto_create = auto_create_topics
        self._coordinator_of = {
            GROUP_KEY_TYPE: coordinator_of,
            TRANSACTION_KEY_TYPE: txn_coordinator_of,
        }
        self._partition_size_limit = partition_size_limit

    def handlers(self) -> Mapping[int, Handler]:
        return {
            ApiKey.METADATA: self.handle_metadata,
            ApiKey.DESCRIBE_TOPIC_PARTITIONS: self.handle_describe_topic_partitions,
            ApiKey.DESCRIBE_CLUSTER: self.handle_describe_cluster,
            ApiKey.FIND_COORDINATOR: self.handle_find_coordinator,
        }

    # Metadata ------------------------------------------------------------------------
    def handle_metadata(self, ctx: RequestContext) -> None:
        req = ctx.body
        version = ctx.api_version
        snapshot = self.cache.snapshot
        requested = req.topics
        if requested is None or (version == 0 and not requested):
            # Listing every topic shows only those the principal may describe.
            wanted: list[tuple[str | None, Any]] = [
                (t, None)
                for t in sorted(snapshot.topics)
                if ctx.authorized(AclOperation.DESCRIBE, AclResourceType.TOPIC, t, False)
            ]
        elif version < 12 and any(t.name is None for t in requested):
            # Kafka: "Topic name can not be null for version 10/11"; its error answer could
            # not carry the null name either, so the connection closes.
            log.warning(
                "closing connection: topic by id in Metadata before v12",
                connection=ctx.request.connection_id,
                listener=ctx.listener_name,
                api_version=version,
            )
            ctx.close_connection()
            return
        else:
            wanted = []
            for t in requested:
                name = t.name
                topic_id = getattr(t, "topic_id", None)
                if name is None and topic_id is not None:
                    name = self.cache.topic_name(topic_id)
                wanted.append((name, topic_id))
        allow_auto = getattr(req, "allow_auto_topic_creation", True) and self._auto_create()
        topic_ops = bool(getattr(req, "include_topic_authorized_operations", False))
        topics = [
            self._topic(ctx, name, topic_id, allow_auto, topic_ops) for name, topic_id in wanted
        ]
        cluster_ops = getattr(req, "include_cluster_authorized_operations", False)
        ctx.respond(
            ctx.make_response(
                brokers=self._brokers(ctx, "MetadataResponseBroker", "node_id"),
                cluster_id=snapshot.cluster_id,
                controller_id=self._controller_for(ctx.listener_name),
                topics=tuple(topics),
                cluster_authorized_operations=ctx.authorized_operations(AclResourceType.CLUSTER)
                if cluster_ops
                else AUTHORIZED_OPERATIONS_OMITTED,
            )
        )

    def _topic(
        self,
        ctx: RequestContext,
        name: str | None,
        topic_id: Any,
        allow_auto: bool,
        include_operations: bool,
    ) -> Any:
        error = ErrorCode.none
        info: TopicInfo | None = None
        if name is None:
            error = ErrorCode.unknown_topic_id
        elif not ctx.authorized(AclOperation.DESCRIBE, AclResourceType.TOPIC, name):
            error = ErrorCode.topic_authorization_failed
        else:
            info = self.cache.topic(name)
            if info is None:
                may_create = ctx.authorized(
                    AclOperation.CREATE, AclResourceType.CLUSTER, log_denied=False
                ) or ctx.authorized(AclOperation.CREATE, AclResourceType.TOPIC, name)
                if allow_auto and not may_create:
                    error = ErrorCode.topic_authorization_failed
                else:
                    error, info = self._missing_topic(ctx, name, allow_auto)
        partitions = tuple(self._partitions(ctx, info)) if info else ()
        return ctx.make(
            "MetadataResponseTopic",
            error_code=error,
            name=name,
            topic_id=info.topic_id if info else topic_id,
            is_internal=info.is_internal if info else False,
            partitions=partitions,
            topic_authorized_operations=ctx.authorized_operations(AclResourceType.TOPIC, info.name)
            if include_operations and info is not None
            else AUTHORIZED_OPERATIONS_OMITTED,
        )

    def _missing_topic(
        self, ctx: RequestContext, name: str, allow_auto: bool
    ) -> tuple[ErrorCode, TopicInfo | None]:
        try:
            validate_topic_name(name)
        except KafkaError as exc:
            return exc.code, None
        if not self.cache.knows_itself:
            # No metadata from the controller (a new metadata-store session): the topic may
            # exist, so nothing is created and the client retries (Kafka answers so for a
            # topic being created).
            log.debug("topic unknown before the controller's metadata", topic=name)
            return ErrorCode.leader_not_available, None
        if not allow_auto:
            return ErrorCode.unknown_topic_or_partition, None
        try:
            created = self.admin.create_topic(name)
            quota = self._quotas.auto_creation_quota(ctx.request) if self._quotas else None
            if quota is not None:  # counted, not throttled: the create is not refused
                quota.record(len(created.partitions))
        except KafkaError as exc:
            if exc.code is not ErrorCode.topic_already_exists:
                log.info(
                    "auto topic creation failed",
                    topic=name,
                    error=exc.code.name,
                    reason=exc.message,
                )
                return exc.code, None
        info = self.cache.topic(name)
        return (ErrorCode.none, info) if info else (ErrorCode.leader_not_available, None)

    def _partitions(self, ctx: RequestContext, info: TopicInfo) -> list[Any]:
        out = []
        for index, p in sorted(info.partitions.items()):
            error = ErrorCode.none
            leader = p.leader
            if leader < 0:
                error = ErrorCode.leader_not_available
            elif self.cache.endpoint(leader, ctx.listener_name) is None:
                error = (
                    ErrorCode.listener_not_found
                    if ctx.api_version >= 6
                    else ErrorCode.leader_not_available
                )
                leader = -1
            out.append(
                ctx.make(
                    "MetadataResponsePartition",
                    error_code=error,
                    partition_index=index,
                    leader_id=leader,
                    leader_epoch=p.leader_epoch,
                    replica_nodes=p.replicas,
                    isr_nodes=p.isr,
                    offline_replicas=p.offline_replicas,
                )
            )
        return out

    def _brokers(self, ctx: RequestContext, entity: str, id_field: str) -> tuple[Any, ...]:
        return tuple(
            ctx.make(entity, **{id_field: broker_id}, host=ep.host, port=ep.port, rack=rack)
            for broker_id, ep, rack in sorted(
                self.cache.alive_endpoints(ctx.listener_name), key=lambda b: b[0]
            )
        )

    def _controller_for(self, listener_name: str) -> int:
        controller = self.cache.snapshot.controller_id
        if controller >= 0 and self.cache.endpoint(controller, listener_name) is not None:
            return controller
        return -1

    # DescribeTopicPartitions (KIP-966) ---------------------------------------------------
    def handle_describe_topic_partitions(self, ctx: RequestContext) -> None:
        """Kafka's DescribeTopicPartitionsRequestHandler: the requested topics (none: every
        topic the principal may describe) from the cursor on, in name order, until the
        partition limit; the topics refused DESCRIBE come last."""
        req = ctx.body
        cursor = req.cursor
        start_topic = cursor.topic_name if cursor is not None else ""
        every_topic = not req.topics
        names = self.cache.snapshot.topics if every_topic else {t.name for t in req.topics}
        wanted = sorted(n for n in names if n >= start_topic)
        problem = None
        if cursor is not None and not every_topic and cursor.topic_name not in wanted:
            problem = f"the topic list should contain the cursor topic {cursor.topic_name}"
        elif cursor is not None and cursor.partition_index < 0:
            problem = f"the cursor partition {cursor.partition_index} is not valid"
        if problem is not None:
            log.warning(
                "invalid DescribeTopicPartitions",
                connection=ctx.request.connection_id,
                listener=ctx.listener_name,
                reason=problem,
            )
            self._describe_topic_partitions_error(ctx, ErrorCode.invalid_request)
            return
        allowed, refused = [], []
        for name in wanted:
            if ctx.authorized(AclOperation.DESCRIBE, AclResourceType.TOPIC, name, not every_topic):
                allowed.append(name)
            elif not every_topic:
                refused.append(name)
        remaining = max(min(self._partition_size_limit(), req.response_partition_limit), 1)
        topics = []
        next_cursor = None
        for name in allowed:
            if remaining == 0:
                next_cursor = ctx.make("Cursor", topic_name=name, partition_index=0)
                break
            info = self.cache.topic(name)
            if info is None:
                if not every_topic:
                    topics.append(self._described_topic(ctx, name, _missing_topic_error(name)))
                continue
            first = cursor.partition_index if cursor is not None and name == start_topic else 0
            last = min(len(info.partitions), first + remaining)
            partitions = [
                self._described_partition(ctx, info.partitions[index])
                for index in range(first, last)
                if index in info.partitions
            ]
            topics.append(self._described_topic(ctx, name, ErrorCode.none, info, partitions))
            if last < len(info.partitions):
                next_cursor = ctx.make("Cursor", topic_name=name, partition_index=last)
                break
            remaining -= len(partitions)
        topics.extend(
            self._described_topic(ctx, name, ErrorCode.topic_authorization_failed)
            for name in refused
        )
        ctx.respond(ctx.make_response(topics=tuple(topics), next_cursor=next_cursor))

    def _describe_topic_partitions_error(self, ctx: RequestContext, error: ErrorCode) -> None:
        """Kafka's error response: ``error`` for each requested topic."""
        topics = tuple(
            ctx.make("DescribeTopicPartitionsResponseTopic", error_code=error, name=t.name)
            for t in ctx.body.topics
        )
        ctx.respond(ctx.make_response(topics=topics, next_cursor=None))

    def _described_topic(
        self,
        ctx: RequestContext,
        name: str,
        error: ErrorCode,
        info: TopicInfo | None = None,
        partitions: list[Any] | None = None,
    ) -> Any:
        return ctx.make(
            "DescribeTopicPartitionsResponseTopic",
            error_code=error,
            name=name,
            topic_id=info.topic_id if info else ZERO_UUID,
            is_internal=info.is_internal if info else name.startswith("__"),
            partitions=tuple(partitions or ()),
            # Kafka's handler fills in every topic but those refused DESCRIBE (unknown ones too)
            topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED
            if error is ErrorCode.topic_authorization_failed
            else ctx.authorized_operations(AclResourceType.TOPIC, name),
        )

    def _described_partition(self, ctx: RequestContext, p: PartitionInfo) -> Any:
        """No error code: a leader without this listener (or not alive) is -1, and the
        replicas without it are offline, as Kafka's KRaftMetadataCache answers."""
        listener = ctx.listener_name
        leader = p.leader if self.cache.endpoint(p.leader, listener) is not None else -1
        return ctx.make(
            "DescribeTopicPartitionsResponsePartition",
            error_code=ErrorCode.none,
            partition_index=p.partition,
            leader_id=leader,
            leader_epoch=p.leader_epoch,
            replica_nodes=p.replicas,
            isr_nodes=p.isr,
            eligible_leader_replicas=None,
            last_known_elr=None,
            offline_replicas=tuple(
                r
                for r in p.replicas
                if r in p.offline_replicas or self.cache.endpoint(r, listener) is None
            ),
        )

    # DescribeCluster -----------------------------------------------------------------
    def handle_describe_cluster(self, ctx: RequestContext) -> None:
        endpoint_type = getattr(ctx.body, "endpoint_type", 1)
        denied = not ctx.authorized(AclOperation.DESCRIBE, AclResourceType.CLUSTER)
        if endpoint_type != 1 or denied:
            ctx.respond(
                ctx.make_response(
                    error_code=ErrorCode.cluster_authorization_failed
                    if denied
                    else ErrorCode.unsupported_endpoint_type,
                    error_message=None
                    if denied
                    else f"endpoint type {endpoint_type} is not supported by a broker",
                    endpoint_type=endpoint_type,
                    cluster_id=self.cache.snapshot.cluster_id,
                    controller_id=-1,
                    brokers=(),
                    cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
                )
            )
            return
        ctx.respond(
            ctx.make_response(
                error_code=ErrorCode.none,
                error_message=None,
                endpoint_type=1,
                cluster_id=self.cache.snapshot.cluster_id,
                controller_id=self._controller_for(ctx.listener_name),
                brokers=self._brokers(ctx, "DescribeClusterBroker", "broker_id"),
                cluster_authorized_operations=ctx.authorized_operations(AclResourceType.CLUSTER)
                if ctx.body.include_cluster_authorized_operations
                else AUTHORIZED_OPERATIONS_OMITTED,
            )
        )

    # FindCoordinator -----------------------------------------------------------------
    def handle_find_coordinator(self, ctx: RequestContext) -> None:
        req = ctx.body
        if ctx.api_version >= 4:
            coordinators = tuple(
                ctx.make("Coordinator", key=key, **self._coordinator(ctx, req.key_type, key))
                for key in req.coordinator_keys
            )
            ctx.respond(ctx.make_response(coordinators=coordinators))
            return
        key_type = getattr(req, "key_type", GROUP_KEY_TYPE)
        ctx.respond(ctx.make_response(**self._coordinator(ctx, key_type, req.key)))

    def _coordinator(self, ctx: RequestContext, key_type: int, key: str) -> dict[str, Any]:
        not_found = {"node_id": -1, "host": "", "port": -1}
        coordinator_of = self._coordinator_of.get(key_type)
        if coordinator_of is None:
            return {
                "error_code": ErrorCode.invalid_request,
                "error_message": f"unknown coordinator key type {key_type}",
                **not_found,
            }
        resource, denied = (
            (AclResourceType.GROUP, ErrorCode.group_authorization_failed)
            if key_type == GROUP_KEY_TYPE
            else (AclResourceType.TRANSACTIONAL_ID, ErrorCode.transactional_id_authorization_failed)
        )
        if not ctx.authorized(AclOperation.DESCRIBE, resource, key):
            return {"error_code": denied, "error_message": None, **not_found}
        coordinator = coordinator_of(key)
        endpoint = (
            self.cache.endpoint(coordinator, ctx.listener_name) if coordinator is not None else None
        )
        if coordinator is None or endpoint is None:
            return {
                "error_code": ErrorCode.coordinator_not_available,
                "error_message": f"no coordinator endpoint for listener {ctx.listener_name}",
                **not_found,
            }
        return {
            "error_code": ErrorCode.none,
            "error_message": None,
            "node_id": coordinator,
            "host": endpoint.host,
            "port": endpoint.port,
        }


def _missing_topic_error(name: str) -> ErrorCode:
    """UNKNOWN_TOPIC_OR_PARTITION, or INVALID_TOPIC_EXCEPTION for a name Kafka refuses."""
    try:
        validate_topic_name(name)
    except KafkaError:
        return ErrorCode.invalid_topic_exception
    return ErrorCode.unknown_topic_or_partition
