"""AdminManager: validates and writes topic creations, deletions and partition additions.

It writes to the metadata store only; the controller reacts to what it wrote.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import structlog

from kplane.broker.config.errors import ConfigException
from kplane.broker.config.topic_configs import validate_topic_configs
from kplane.broker.metadata.cache import MetadataCache
from kplane.broker.metadata.kafka_store import KafkaMetadataClient, TopicAssignment
from kplane.broker.metadata.store import NodeExistsError
from kplane.protocol.errors import ErrorCode, KafkaError
from kplane.protocol.topic_names import validate_topic_name

log = structlog.get_logger(__name__)

MAX_PARTITIONS_PER_REQUEST = 10_000
"""Kafka's ``ReplicationControlManager.MAX_PARTITIONS_PER_BATCH``: the most partitions one
CreateTopics or CreatePartitions request may make."""

Assignments = Sequence[tuple[int, Sequence[int]]]
"""Replica assignments as sent: (partition index, broker ids) pairs."""


def excessive_partitions(counts: Iterable[int]) -> KafkaError | None:
    """Why a request whose topics would make ``counts`` partitions is refused as a whole:
    POLICY_VIOLATION over MAX_PARTITIONS_PER_REQUEST, as Kafka's controller, decided
    before any replica assignment is computed. None when within the bound."""
    if sum(counts) <= MAX_PARTITIONS_PER_REQUEST:
        return None
    return KafkaError(
        ErrorCode.policy_violation, "Excessively large number of partitions per request."
    )


@dataclass(frozen=True, slots=True)
class TopicDefaults:
    """Broker defaults applied to a creation that leaves them at -1."""

    num_partitions: int
    replication_factor: int


class AdminManager:
    """Topic administration against the metadata store."""

    def __init__(
        self, client: KafkaMetadataClient, cache: MetadataCache, defaults: TopicDefaults
    ) -> None:
        self.client = client
        self.cache = cache
        self.defaults = defaults

    def requested_partitions(self, num_partitions: int, assignments: int) -> int:
        """Partitions a creation asks for, as Kafka counts them against the per-request bound:
        its assignments, else ``num_partitions`` (the default for -1, none when invalid)."""
        if assignments:
            return assignments
        if num_partitions == -1:
            return self.defaults.num_partitions
        return max(num_partitions, 0)

    def create_topic(
        self,
        name: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        assignments: Assignments = (),
        configs: Mapping[str, str | None] | None = None,
        validate_only: bool = False,
    ) -> TopicAssignment:
        """Create ``name``; raises KafkaError with Kafka's code and message on refusal."""
        validate_topic_name(name)
        try:
            checked_configs = validate_topic_configs(configs or {})
        except ConfigException as exc:
            raise KafkaError(ErrorCode.invalid_config, str(exc)) from None
        live = sorted(self.cache.snapshot.brokers)
        if assignments:
            if num_partitions != -1 or replication_factor != -1:
                raise KafkaError(
                    ErrorCode.invalid_request,
                    "Both numPartitions or replicationFactor and replicasAssignments were set. "
                    "Both cannot be used at the same time.",
                )
            partitions = self._checked_assignment(assignments, live)
        else:
            if replication_factor < -1 or replication_factor == 0:
                raise KafkaError(
                    ErrorCode.invalid_replication_factor,
                    "Replication factor must be larger than 0, or -1 to use the default value.",
                )
            if num_partitions < -1 or num_partitions == 0:
                raise KafkaError(
                    ErrorCode.invalid_partitions,
                    "Number of partitions was set to an invalid non-positive value.",
                )
            count = self.defaults.num_partitions if num_partitions == -1 else num_partitions
            factor = (
                self.defaults.replication_factor if replication_factor == -1 else replication_factor
            )
            if factor > len(live):
                raise KafkaError(
                    ErrorCode.invalid_replication_factor,
                    f"Replication factor: {factor} larger than available brokers: {len(live)}.",
                )
            partitions = assign_replicas(live, count, factor, self._racks())
        if name in self.client.get_topics():
            raise KafkaError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
        if self.cache.topic(name) is not None:  # deleted, not yet gone from the metadata
            raise KafkaError(
                ErrorCode.topic_already_exists, f"Topic '{name}' is marked for deletion."
            )
        assignment = TopicAssignment(uuid.uuid4(), partitions)
        if validate_only:
            return assignment
        try:
            self.client.create_topic(name, assignment, checked_configs)
        except NodeExistsError:
            raise KafkaError(
                ErrorCode.topic_already_exists, f"Topic '{name}' already exists."
            ) from None
        log.info(
            "topic created",
            topic=name,
            partitions=len(partitions),
            replication_factor=len(next(iter(partitions.values()))),
        )
        return assignment

    def _racks(self) -> dict[int, str | None]:
        return {b.broker_id: b.rack for b in self.cache.snapshot.brokers.values()}

    def _checked_assignment(
        self, assignments: Assignments, live: list[int]
    ) -> dict[int, tuple[int, ...]]:
        partitions: dict[int, tuple[int, ...]] = {}
        for index, replicas in assignments:
            if index in partitions:
                raise KafkaError(
                    ErrorCode.invalid_replica_assignment,
                    f"Found multiple manual partition assignments for partition {index}",
                )
            if not replicas:
                raise KafkaError(
                    ErrorCode.invalid_replica_assignment,
                    "The manual partition assignment includes an empty replica list.",
                )
            partitions[index] = tuple(replicas)
        if sorted(partitions) != list(range(len(partitions))):
            raise KafkaError(
                ErrorCode.invalid_replica_assignment,
                "Partitions should be a consecutive 0-based integer sequence",
            )
        if len({len(r) for r in partitions.values()}) != 1:
            raise KafkaError(
                ErrorCode.invalid_replica_assignment,
                "All partitions should have the same number of replicas",
            )
        for replicas in partitions.values():
            if len(set(replicas)) != len(replicas):
                raise KafkaError(
                    ErrorCode.invalid_replica_assignment, "Duplicate replica assignment found"
                )
            unknown = [r for r in replicas if r not in live]
            if unknown:
                raise KafkaError(
                    ErrorCode.broker_not_available,
                    f"Unknown broker(s) in replica assignment: {unknown}",
                )
        return dict(sorted(partitions.items()))

    def delete_topic(self, name: str) -> uuid.UUID:
        """Delete ``name``; returns its id."""
        topic = self.cache.topic(name)
        if topic is None:
            raise KafkaError(
                ErrorCode.unknown_topic_or_partition,
                "This server does not host this topic-partition.",
            )
        self.client.delete_topic(name)
        return topic.topic_id

    def added_partitions(self, name: str, count: int) -> int:
        """Partitions a CreatePartitions entry would add (none for an unknown topic)."""
        topic = self.cache.topic(name)
        return max(count - len(topic.partitions), 0) if topic is not None else 0

    def _assignment(self, name: str) -> TopicAssignment:
        """The stored assignment of an existing topic; UNKNOWN_TOPIC_OR_PARTITION otherwise
        (the cache is asked first: it only knows valid names)."""
        current = self.client.get_assignment(name) if self.cache.topic(name) else None
        if current is None:
            raise KafkaError(
                ErrorCode.unknown_topic_or_partition, f"The topic '{name}' does not exist."
            )
        return current

    def create_partitions(
        self,
        name: str,
        count: int,
        assignments: Sequence[Sequence[int]] | None,
        validate_only: bool,
    ) -> None:
        """Grow ``name`` to ``count`` partitions."""
        current = self._assignment(name)
        existing = len(current.partitions)
        if count < existing:
            raise KafkaError(
                ErrorCode.invalid_partitions,
                f"Topic currently has {existing} partitions, which is higher than the "
                f"requested {count}.",
            )
        if count == existing:
            raise KafkaError(
                ErrorCode.invalid_partitions, f"Topic already has {existing} partitions."
            )
        live = sorted(self.cache.snapshot.brokers)
        factor = len(next(iter(current.partitions.values())))
        if assignments is not None:
            if len(assignments) != count - existing:
                raise KafkaError(
                    ErrorCode.invalid_replica_assignment,
                    f"Increasing the number of partitions by {count - existing} but "
                    f"{len(assignments)} assignments provided.",
                )
            added = self._checked_assignment(
                [*current.partitions.items(), *enumerate(assignments, start=existing)], live
            )
        else:
            if factor > len(live):
                raise KafkaError(
                    ErrorCode.invalid_replication_factor,
                    f"Replication factor: {factor} larger than available brokers: {len(live)}.",
                )
            fresh = assign_replicas(live, count, factor, self._racks())
            added = dict(current.partitions) | {p: fresh[p] for p in range(existing, count)}
        if validate_only:
            return
        self.client.set_assignment(name, dataclasses.replace(current, partitions=added))
        log.info("partitions added", topic=name, partitions=count)


def assign_replicas(
    brokers: list[int], partitions: int, factor: int, racks: Mapping[int, str | None] | None = None
) -> dict[int, tuple[int, ...]]:
    """Replicas round-robin over ``brokers`` from a per-topic offset. When every broker has
    a rack, the brokers are interleaved by rack and each partition's replicas take a broker
    from every rack before any rack repeats (Kafka's rack-aware assignment)."""
    if not brokers:
        raise KafkaError(ErrorCode.broker_not_available, "No live brokers")
    racks = racks or {}
    rack_aware = bool(racks) and all(racks.get(b) for b in brokers)
    ordered = _rack_alternated(brokers, racks) if rack_aware else list(brokers)
    n = len(ordered)
    start = uuid.uuid4().int % n
    out = {}
    for p in range(partitions):
        first = (start + p) % n
        replicas = [ordered[first]]
        used = {racks.get(ordered[first])}
        for step in range(1, n):
            if len(replicas) == factor:
                break
            candidate = ordered[(first + step) % n]
            all_racks_used = len(used) == len({racks.get(b) for b in ordered})
            if rack_aware and racks.get(candidate) in used and not all_racks_used:
                continue
            replicas.append(candidate)
            used.add(racks.get(candidate))
        for candidate in ordered:  # racks exhausted: fill with the brokers skipped above
            if len(replicas) == factor:
                break
            if candidate not in replicas:
                replicas.append(candidate)
        out[p] = tuple(replicas)
    return out


def _rack_alternated(brokers: list[int], racks: Mapping[int, str | None]) -> list[int]:
    """``a1, b1, c1, a2, b2, ...``: brokers interleaved by rack, racks in name order."""
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(brokers):
        by_rack.setdefault(str(racks[broker]), []).append(broker)
    columns = [by_rack[r] for r in sorted(by_rack)]
    return [col[i] for i in range(max(map(len, columns))) for col in columns if i < len(col)]
