"""Metadata, DescribeCluster and FindCoordinator: answers that depend on the listener.

Each answers with the advertised endpoints of the listener the request arrived on, and
nothing else (KIP-103). A live broker without that listener is left out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import structlog

from kplane.broker.metadata.cache import MetadataCache, TopicInfo
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
    ) -> None:
        self.broker_id = broker_id
        self.cache = cache
        self.admin = admin
        self._auto_create = auto_create_topics
        self._coordinator_of = {
            GROUP_KEY_TYPE: coordinator_of,
            TRANSACTION_KEY_TYPE: txn_coordinator_of,
        }

    def handlers(self) -> Mapping[int, Handler]:
        return {
            ApiKey.METADATA: self.handle_metadata,
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
        topics = [self._topic(ctx, name, topic_id, allow_auto) for name, topic_id in wanted]
        ctx.respond(
            ctx.make_response(
                brokers=self._brokers(ctx, "MetadataResponseBroker", "node_id"),
                cluster_id=snapshot.cluster_id,
                controller_id=self._controller_for(ctx.listener_name),
                topics=tuple(topics),
                cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
            )
        )

    def _topic(self, ctx: RequestContext, name: str | None, topic_id: Any, allow_auto: bool) -> Any:
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
                    error, info = self._missing_topic(name, allow_auto)
        partitions = tuple(self._partitions(ctx, info)) if info else ()
        return ctx.make(
            "MetadataResponseTopic",
            error_code=error,
            name=name,
            topic_id=info.topic_id if info else topic_id,
            is_internal=info.is_internal if info else False,
            partitions=partitions,
            topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
        )

    def _missing_topic(self, name: str, allow_auto: bool) -> tuple[ErrorCode, TopicInfo | None]:
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
            self.admin.create_topic(name)
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
                cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
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
