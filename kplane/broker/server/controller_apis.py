"""LeaderAndIsr, StopReplica and UpdateMetadata: what a controller tells a broker (KIP-291).

These arrive on ``control.plane.listener.name`` when it is set (the control plane's own
Processor, queue and handler), else on the inter-broker listener with the data traffic.
Every version is served; older versions' flat partition lists are read like the grouped
ones. A controller older than the newest seen (a deposed one) is answered
STALE_CONTROLLER_EPOCH and nothing is applied; refusals are logged once per interval.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import structlog

from kplane.broker.config.endpoint import EndPoint, SecurityProtocol
from kplane.broker.controller.controller import KafkaController
from kplane.broker.log.partition import ReplicaAssignment, TopicPartition
from kplane.broker.metadata.cache import MetadataCache, PartitionInfo, TopicInfo
from kplane.broker.metadata.kafka_store import BrokerRegistration
from kplane.broker.server.context import Handler, RequestContext
from kplane.broker.server.replica_manager import ReplicaManager, ReplicaState, StopReplicaState
from kplane.broker.utils.interval_log import IntervalWarning
from kplane.common.acl import AclOperation, AclResourceType
from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode, KafkaError
from kplane.protocol.topic_names import validate_topic_name

log = structlog.get_logger(__name__)

LEADER_DURING_DELETE = -2  # UpdateMetadata's leader of a partition being deleted
_PROTOCOL_CODES = {0: "PLAINTEXT", 1: "SSL", 2: "SASL_PLAINTEXT", 3: "SASL_SSL"}


def _grouped(body: Any, flat: str, grouped: str, name: str) -> Iterator[tuple[str, Any, Any]]:
    """(topic name, topic id or None, partition state) of a request in either layout."""
    for state in getattr(body, flat, ()):
        yield state.topic_name, None, state
    for topic in getattr(body, grouped, ()):
        for state in topic.partition_states:
            yield getattr(topic, name), getattr(topic, "topic_id", None), state


class ControllerApis:
    """The three controller-to-broker APIs, and the requests the controller answers:
    ControlledShutdown (from a broker), ElectLeaders and the partition reassignments (from an
    admin); ``controller()`` is this broker's KafkaController (NOT_CONTROLLER unless it is
    the active one)."""

    def __init__(
        self,
        broker_id: int,
        replica_manager: ReplicaManager,
        cache: MetadataCache,
        controller: Callable[[], KafkaController],
    ) -> None:
        self.broker_id = broker_id
        self.replica_manager = replica_manager
        self.cache = cache
        self.controller = controller
        self._refused = IntervalWarning("controller request refused")

    def handlers(self) -> Mapping[int, Handler]:
        return {
            ApiKey.CONTROLLED_SHUTDOWN: self.handle_controlled_shutdown,
            ApiKey.ELECT_LEADERS: self.handle_elect_leaders,
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: self.handle_alter_partition_reassignments,
            ApiKey.LIST_PARTITION_REASSIGNMENTS: self.handle_list_partition_reassignments,
            ApiKey.LEADER_AND_ISR: self.handle_leader_and_isr,
            ApiKey.STOP_REPLICA: self.handle_stop_replica,
            ApiKey.UPDATE_METADATA: self.handle_update_metadata,
        }

    def _apply(
        self,
        ctx: RequestContext,
        topics: Iterable[str],
        action: Callable[[], Mapping[TopicPartition, ErrorCode]],
    ) -> tuple[ErrorCode, Mapping[TopicPartition, ErrorCode]]:
        """(the request's error, per-partition errors) of running ``action``: refused with
        CLUSTER_AUTHORIZATION_FAILED without ClusterAction (only brokers may send these), or
        with the code of the KafkaError it raises (a stale controller epoch), logged. A
        topic name no controller can send (``""``, ``..``) is refused before anything is
        applied: names become store paths and, later, directories. Refusals are logged
        once per interval, with a count."""
        if not ctx.authorized(AclOperation.CLUSTER_ACTION, AclResourceType.CLUSTER):
            return ErrorCode.cluster_authorization_failed, {}
        try:
            for name in set(topics):
                validate_topic_name(name)
            return ErrorCode.none, action()
        except KafkaError as exc:
            self._refused.record(
                api=api.API_NAMES.get(ctx.api_key),
                controller=int(ctx.body.controller_id),
                controller_epoch=int(ctx.body.controller_epoch),
                reason=exc.message,
            )
            return exc.code, {}

    # ControlledShutdown --------------------------------------------------------------
    def handle_controlled_shutdown(self, ctx: RequestContext) -> None:
        """A broker about to stop asks the controller to move its leaderships away."""
        remaining: list[tuple[str, int]] = []
        if not ctx.authorized(AclOperation.CLUSTER_ACTION, AclResourceType.CLUSTER):
            error = ErrorCode.cluster_authorization_failed
        else:
            try:
                remaining = self.controller().controlled_shutdown(int(ctx.body.broker_id))
                error = ErrorCode.none
            except KafkaError as exc:
                error = exc.code
        ctx.respond(
            ctx.make_response(
                error_code=error,
                remaining_partitions=tuple(
                    ctx.make("RemainingPartition", topic_name=t, partition_index=p)
                    for t, p in remaining
                ),
            )
        )

    # ElectLeaders ----------------------------------------------------------------------
    def handle_elect_leaders(self, ctx: RequestContext) -> None:
        """Preferred (0) or unclean (1) leader election, by the controller (Alter on the
        cluster)."""
        req = ctx.body
        wanted = (
            None
            if req.topic_partitions is None
            else [(t.topic, int(p)) for t in req.topic_partitions for p in t.partitions]
        )
        error = ErrorCode.none
        results: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {}
        if not ctx.authorized(AclOperation.ALTER, AclResourceType.CLUSTER):
            error = ErrorCode.cluster_authorization_failed
        else:
            try:
                results = self.controller().elect_leaders(
                    int(getattr(req, "election_type", 0)) == 1, wanted
                )
            except KafkaError as exc:
                error = exc.code
        if error is not ErrorCode.none and wanted is not None:
            results = dict.fromkeys(wanted, (error, None))
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), (code, message) in results.items():
            by_topic.setdefault(topic, []).append(
                ctx.make(
                    "PartitionResult",
                    partition_id=partition,
                    error_code=code,
                    error_message=message,
                )
            )
        ctx.respond(
            ctx.make_response(
                error_code=error,
                replica_election_results=tuple(
                    ctx.make("ReplicaElectionResult", topic=t, partition_result=tuple(ps))
                    for t, ps in by_topic.items()
                ),
            )
        )

    # Partition reassignments (KIP-455) ---------------------------------------------------
    def handle_alter_partition_reassignments(self, ctx: RequestContext) -> None:
        """Move partitions to new replicas, or cancel a move (Alter on the cluster)."""
        targets = {
            (t.name, int(p.partition_index)): (
                None if p.replicas is None else tuple(int(r) for r in p.replicas)
            )
            for t in ctx.body.topics
            for p in t.partitions
        }
        error, message = ErrorCode.none, None
        results: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {}
        if not ctx.authorized(AclOperation.ALTER, AclResourceType.CLUSTER):
            error = ErrorCode.cluster_authorization_failed
        else:
            try:
                results = self.controller().alter_reassignments(targets)
            except KafkaError as exc:
                error, message = exc.code, exc.message
        by_topic: dict[str, list[Any]] = {}
        for topic, partition in targets:
            code, text = results.get((topic, partition), (error, None))
            by_topic.setdefault(topic, []).append(
                ctx.make(
                    "ReassignablePartitionResponse",
                    partition_index=partition,
                    error_code=code,
                    error_message=text,
                )
            )
        ctx.respond(
            ctx.make_response(
                error_code=error,
                error_message=message,
                responses=tuple(
                    ctx.make("ReassignableTopicResponse", name=t, partitions=tuple(ps))
                    for t, ps in by_topic.items()
                ),
            )
        )

    def handle_list_partition_reassignments(self, ctx: RequestContext) -> None:
        """The ongoing reassignments (Describe on the cluster)."""
        req = ctx.body
        wanted = (
            None
            if req.topics is None
            else [(t.name, int(p)) for t in req.topics for p in t.partition_indexes]
        )
        error, message = ErrorCode.none, None
        ongoing: dict[tuple[str, int], Any] = {}
        if not ctx.authorized(AclOperation.DESCRIBE, AclResourceType.CLUSTER):
            error = ErrorCode.cluster_authorization_failed
        else:
            try:
                ongoing = self.controller().list_reassignments(wanted)
            except KafkaError as exc:
                error, message = exc.code, exc.message
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), s in ongoing.items():
            by_topic.setdefault(topic, []).append(
                ctx.make(
                    "OngoingPartitionReassignment",
                    partition_index=partition,
                    replicas=s.replicas,
                    adding_replicas=s.adding,
                    removing_replicas=s.removing,
                )
            )
        ctx.respond(
            ctx.make_response(
                error_code=error,
                error_message=message,
                topics=tuple(
                    ctx.make("OngoingTopicReassignment", name=t, partitions=tuple(ps))
                    for t, ps in by_topic.items()
                ),
            )
        )

    # LeaderAndIsr --------------------------------------------------------------------
    def handle_leader_and_isr(self, ctx: RequestContext) -> None:
        body = ctx.body
        entries = list(_grouped(body, "ungrouped_partition_states", "topic_states", "topic_name"))
        topic_ids = {name: topic_id for name, topic_id, _ in entries}
        states = [
            ReplicaState(
                TopicPartition(name, int(s.partition_index)),
                ReplicaAssignment(
                    int(s.leader),
                    int(s.leader_epoch),
                    int(s.partition_epoch),
                    tuple(int(r) for r in s.replicas),
                    tuple(int(r) for r in s.isr),
                ),
            )
            for name, _, s in entries
        ]
        top, errors = self._apply(
            ctx,
            (s.tp.topic for s in states),
            lambda: self.replica_manager.become_leader_or_follower(
                int(body.controller_epoch),
                states,
                {int(leader.broker_id) for leader in body.live_leaders},
            ),
        )
        per = {s.tp: errors.get(s.tp, top) for s in states}
        if ctx.api_version >= 5:
            by_topic: dict[str, list[Any]] = {}
            for tp, code in per.items():
                by_topic.setdefault(tp.topic, []).append(
                    ctx.make(
                        "LeaderAndIsrPartitionError", partition_index=tp.partition, error_code=code
                    )
                )
            topics = tuple(
                ctx.make(
                    "LeaderAndIsrTopicError",
                    topic_id=topic_ids.get(name),
                    partition_errors=tuple(parts),
                )
                for name, parts in by_topic.items()
            )
            ctx.respond(ctx.make_response(error_code=top, topics=topics))
            return
        ctx.respond(
            ctx.make_response(
                error_code=top,
                partition_errors=tuple(
                    ctx.make(
                        "LeaderAndIsrPartitionError",
                        topic_name=tp.topic,
                        partition_index=tp.partition,
                        error_code=code,
                    )
                    for tp, code in per.items()
                ),
            )
        )

    # StopReplica ---------------------------------------------------------------------
    def handle_stop_replica(self, ctx: RequestContext) -> None:
        body = ctx.body
        stops = list(self._stops(body))
        top, errors = self._apply(
            ctx,
            (s.tp.topic for s in stops),
            lambda: self.replica_manager.stop_replicas(int(body.controller_epoch), stops),
        )
        deleted = [s.tp.topic for s in stops if s.delete and errors.get(s.tp) is ErrorCode.none]
        if deleted:
            log.info("partitions deleted by the controller", count=len(deleted))
        ctx.respond(
            ctx.make_response(
                error_code=top,
                partition_errors=tuple(
                    ctx.make(
                        "StopReplicaPartitionError",
                        topic_name=s.tp.topic,
                        partition_index=s.tp.partition,
                        error_code=errors.get(s.tp, top),
                    )
                    for s in stops
                ),
            )
        )

    @staticmethod
    def _stops(body: Any) -> Iterator[StopReplicaState]:
        delete_all = bool(getattr(body, "delete_partitions", False))
        for p in getattr(body, "ungrouped_partitions", ()):  # v0
            yield StopReplicaState(TopicPartition(p.topic_name, int(p.partition_index)), delete_all)
        for t in getattr(body, "topics", ()):  # v1-2
            for index in t.partition_indexes:
                yield StopReplicaState(TopicPartition(t.name, int(index)), delete_all)
        for t in getattr(body, "topic_states", ()):  # v3+
            for p in t.partition_states:
                yield StopReplicaState(
                    TopicPartition(t.topic_name, int(p.partition_index)),
                    bool(p.delete_partition),
                    int(p.leader_epoch),
                )

    # UpdateMetadata ------------------------------------------------------------------
    def handle_update_metadata(self, ctx: RequestContext) -> None:
        body = ctx.body
        if any(
            not getattr(e, "listener", "") and int(e.security_protocol) not in _PROTOCOL_CODES
            for b in body.live_brokers
            for e in getattr(b, "endpoints", ())
        ):
            # Kafka cannot name the listener of such an endpoint: the request does not
            # parse there, and the connection closes.
            log.warning(
                "closing connection: malformed request",
                api=api.API_NAMES.get(ctx.api_key),
                api_version=ctx.api_version,
                error="an endpoint without a listener name has an unknown security protocol",
            )
            ctx.close_connection()
            return

        def update() -> Mapping[TopicPartition, ErrorCode]:
            self.replica_manager.check_controller_epoch(int(body.controller_epoch))
            self._update_cache(body)
            return {}

        names = (
            name
            for name, _, _ in _grouped(
                body, "ungrouped_partition_states", "topic_states", "topic_name"
            )
        )
        error, _ = self._apply(ctx, names, update)
        ctx.respond(ctx.make_response(error_code=error))

    def _update_cache(self, body: Any) -> None:
        """Replace the live brokers; merge the partition states (Kafka's incremental rule)."""
        brokers = [self._registration(b) for b in body.live_brokers]
        snapshot = self.cache.snapshot
        changed: dict[str, TopicInfo] = {}
        removed: list[str] = []
        for name, topic_id, s in _grouped(
            body, "ungrouped_partition_states", "topic_states", "topic_name"
        ):
            topic = changed.get(name) or snapshot.topics.get(name)
            partitions = dict(topic.partitions) if topic else {}
            index = int(s.partition_index)
            if int(s.leader) == LEADER_DURING_DELETE:
                partitions.pop(index, None)
            else:
                partitions[index] = PartitionInfo(
                    index,
                    int(s.leader),
                    int(s.leader_epoch),
                    tuple(int(r) for r in s.replicas),
                    tuple(int(r) for r in s.isr),
                    tuple(int(r) for r in getattr(s, "offline_replicas", ())),
                )
            known_id = topic.topic_id if topic else uuid.UUID(int=0)
            changed[name] = TopicInfo(
                name, topic_id or known_id, partitions, is_internal=name.startswith("__")
            )
        for name, topic in list(changed.items()):
            if not topic.partitions:
                removed.append(name)
                del changed[name]
        self.cache.update(
            controller_id=int(body.controller_id),
            brokers=brokers,
            topics=changed.values(),
            removed_topics=removed,
        )

    @staticmethod
    def _registration(broker: Any) -> BrokerRegistration:
        if hasattr(broker, "endpoints"):
            # An endpoint of a protocol unknown here is left out; Kafka keeps it without one.
            endpoints = tuple(
                EndPoint(
                    getattr(e, "listener", "") or protocol,
                    e.host,
                    int(e.port),
                    SecurityProtocol(protocol),
                )
                for e in broker.endpoints
                if (protocol := _PROTOCOL_CODES.get(int(e.security_protocol))) is not None
            )
        else:  # v0: one PLAINTEXT endpoint
            endpoints = (
                EndPoint(
                    "PLAINTEXT", broker.v0_host, int(broker.v0_port), SecurityProtocol.PLAINTEXT
                ),
            )
        return BrokerRegistration(int(broker.id), endpoints, getattr(broker, "rack", None))
