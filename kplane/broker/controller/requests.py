"""The controller's requests to brokers — LeaderAndIsr, UpdateMetadata, StopReplica — built
for any version from one description of the cluster (``api.make`` drops what a version lacks).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kplane.broker.config.endpoint import SecurityProtocol
from kplane.broker.metadata.kafka_store import BrokerRegistration
from kplane.broker.network.broker_channels import Build
from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey

LEADER_DURING_DELETE = -2  # UpdateMetadata: the partition is being deleted
EPOCH_DURING_DELETE = -2  # StopReplica: delete whatever the leader epoch
PROTOCOL_CODES = {
    SecurityProtocol.PLAINTEXT: 0,
    SecurityProtocol.SSL: 1,
    SecurityProtocol.SASL_PLAINTEXT: 2,
    SecurityProtocol.SASL_SSL: 3,
}


@dataclass(frozen=True)
class PartitionState:
    """What the controller decided for one partition."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    topic_id: uuid.UUID | None = None
    zk_version: int = 0
    """The version of the partition's state znode (Kafka's zkVersion): bumped by every
    change, the controller's and a leader's ISR change alike."""
    adding: tuple[int, ...] = ()
    """A reassignment's replicas joining (KIP-455)."""
    removing: tuple[int, ...] = ()
    """A reassignment's replicas leaving."""
    offline: tuple[int, ...] = ()
    """Replicas in a failed log dir (KIP-112): UpdateMetadata's ``offline_replicas``."""

    @property
    def partition_epoch(self) -> int:
        """Kafka's partition epoch in ZooKeeper mode: the state znode's version."""
        return self.zk_version


def _partition_state(cls: type[Any], s: PartitionState, controller_epoch: int) -> Any:
    """One partition's state entity of LeaderAndIsr or UpdateMetadata (any version: the
    fields a version lacks are dropped)."""
    return api.make(
        cls,
        topic_name=s.topic,
        partition_index=s.partition,
        controller_epoch=controller_epoch,
        leader=s.leader,
        leader_epoch=s.leader_epoch,
        isr=s.isr,
        partition_epoch=s.partition_epoch,
        zk_version=s.partition_epoch,
        replicas=s.replicas,
        adding_replicas=s.adding,
        removing_replicas=s.removing,
        offline_replicas=s.offline,
        is_new=False,
    )


def _state_fields(
    module: Any, prefix: str, states: Sequence[PartitionState], controller_epoch: int
) -> dict[str, Any]:
    """``ungrouped_partition_states`` (old versions) or ``topic_states`` (grouped by topic)."""
    cls = getattr(module, f"{prefix}PartitionState")
    topic_cls = getattr(module, f"{prefix}TopicState", None)
    if topic_cls is None:
        return {
            "ungrouped_partition_states": tuple(
                _partition_state(cls, s, controller_epoch) for s in states
            )
        }
    return {
        "topic_states": tuple(
            api.make(
                topic_cls,
                topic_name=topic,
                topic_id=group[0].topic_id,
                partition_states=tuple(_partition_state(cls, s, controller_epoch) for s in group),
            )
            for topic, group in _by_topic(states).items()
        )
    }


def _by_topic(states: Iterable[PartitionState]) -> dict[str, list[PartitionState]]:
    out: dict[str, list[PartitionState]] = {}
    for s in states:
        out.setdefault(s.topic, []).append(s)
    return out


def leader_and_isr(
    controller_id: int,
    controller_epoch: int,
    states: Sequence[PartitionState],
    leaders: Sequence[tuple[int, str, int]],
    full: bool = False,
) -> Build:
    """LeaderAndIsr of ``states``; ``leaders`` are (id, host, port) of the leaders."""

    def build(version: int) -> Any:
        module = api.request_module(ApiKey.LEADER_AND_ISR, version)
        return api.make(
            api.request_class(ApiKey.LEADER_AND_ISR, version),
            controller_id=controller_id,
            controller_epoch=controller_epoch,
            broker_epoch=-1,
            type_=1 if full else 0,
            **_state_fields(module, "LeaderAndIsr", states, controller_epoch),
            live_leaders=tuple(
                api.make(module.LeaderAndIsrLiveLeader, broker_id=b, host_name=h, port=p)
                for b, h, p in leaders
            ),
        )

    return build


def update_metadata(
    controller_id: int,
    controller_epoch: int,
    states: Sequence[PartitionState],
    brokers: Sequence[BrokerRegistration],
) -> Build:
    """UpdateMetadata: every live broker with all its endpoints, and ``states``."""

    def build(version: int) -> Any:
        module = api.request_module(ApiKey.UPDATE_METADATA, version)

        def broker(b: BrokerRegistration) -> Any:
            plaintext = b.endpoint("PLAINTEXT") or (b.endpoints[0] if b.endpoints else None)
            return api.make(
                module.UpdateMetadataBroker,
                id=b.broker_id,
                v0_host=plaintext.host if plaintext else "",
                v0_port=plaintext.port if plaintext else -1,
                endpoints=tuple(
                    api.make(
                        module.UpdateMetadataEndpoint,
                        port=e.port,
                        host=e.host,
                        listener=e.listener_name,
                        security_protocol=PROTOCOL_CODES[e.security_protocol],
                    )
                    for e in b.endpoints
                )
                if hasattr(module, "UpdateMetadataEndpoint")
                else (),
                rack=b.rack,
            )

        return api.make(
            api.request_class(ApiKey.UPDATE_METADATA, version),
            controller_id=controller_id,
            controller_epoch=controller_epoch,
            broker_epoch=-1,
            **_state_fields(module, "UpdateMetadata", states, controller_epoch),
            live_brokers=tuple(broker(b) for b in brokers),
        )

    return build


def stop_replica(
    controller_id: int, controller_epoch: int, partitions: Sequence[tuple[str, int]], delete: bool
) -> Build:
    """StopReplica of ``partitions`` (topic, index), deleting their logs with ``delete``."""

    def build(version: int) -> Any:
        module = api.request_module(ApiKey.STOP_REPLICA, version)
        by_topic: dict[str, list[int]] = {}
        for topic, index in partitions:
            by_topic.setdefault(topic, []).append(index)
        return api.make(
            api.request_class(ApiKey.STOP_REPLICA, version),
            controller_id=controller_id,
            controller_epoch=controller_epoch,
            broker_epoch=-1,
            delete_partitions=delete,
            ungrouped_partitions=tuple(
                api.make(module.StopReplicaPartitionV0, topic_name=t, partition_index=i)
                for t, i in partitions
            )
            if hasattr(module, "StopReplicaPartitionV0")
            else (),
            topics=tuple(
                api.make(module.StopReplicaTopicV1, name=t, partition_indexes=tuple(ix))
                for t, ix in by_topic.items()
            )
            if hasattr(module, "StopReplicaTopicV1")
            else (),
            topic_states=tuple(
                api.make(
                    module.StopReplicaTopicState,
                    topic_name=t,
                    partition_states=tuple(
                        api.make(
                            module.StopReplicaPartitionState,
                            partition_index=i,
                            leader_epoch=EPOCH_DURING_DELETE,
                            delete_partition=delete,
                        )
                        for i in ix
                    ),
                )
                for t, ix in by_topic.items()
            )
            if hasattr(module, "StopReplicaTopicState")
            else (),
        )

    return build
