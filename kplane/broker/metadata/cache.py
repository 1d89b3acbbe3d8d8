"""MetadataCache: what this broker believes about live brokers and partitions.

Readers get an immutable snapshot; writers replace it whole, so handlers never lock.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kplane.broker.config.endpoint import EndPoint
from kplane.broker.metadata.kafka_store import BrokerRegistration


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """Leader, epochs and replicas of one partition."""

    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic's id and partitions."""

    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionInfo]
    is_internal: bool = False


@dataclass(frozen=True, slots=True)
class MetadataSnapshot:
    """One consistent view of the cluster."""

    cluster_id: str
    controller_id: int
    brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    topics: dict[str, TopicInfo] = field(default_factory=dict)
    topic_ids: dict[uuid.UUID, str] = field(default_factory=dict)


class MetadataCache:
    """Holds the current MetadataSnapshot and answers listener-aware questions."""

    def __init__(self, cluster_id: str, broker_id: int) -> None:
        self.broker_id = broker_id
        self.snapshot = MetadataSnapshot(cluster_id, -1)
        self._topic_listeners: list[Callable[[str], object]] = []
        self._updated = threading.Condition()

    def wait_for(self, predicate: Callable[[MetadataSnapshot], bool], timeout_s: float) -> bool:
        """Block until ``predicate(snapshot)`` holds after an update (or already does);
        False when ``timeout_s`` passed first."""
        with self._updated:
            return self._updated.wait_for(lambda: predicate(self.snapshot), timeout_s)

    @property
    def knows_itself(self) -> bool:
        """Whether the controller's metadata names this broker yet: until then (start-up,
        a new metadata-store session) a topic missing here may well exist."""
        return self.broker_id in self.snapshot.brokers

    def add_topic_listener(self, listener: Callable[[str], object]) -> None:
        """Call ``listener(name)`` after each update that adds, changes or removes topic
        ``name`` (requests waiting for a topic's metadata, such as CreateTopics and
        DeleteTopics, are so completed)."""
        self._topic_listeners.append(listener)

    def update(
        self,
        *,
        controller_id: int | None = None,
        brokers: Iterable[BrokerRegistration] | None = None,
        topics: Iterable[TopicInfo] | None = None,
        removed_topics: Iterable[str] = (),
    ) -> None:
        """Replace parts of the snapshot; ``topics`` are upserted, ``removed_topics`` dropped."""
        old = self.snapshot
        upserted = list(topics or ())
        changed = [*removed_topics, *(t.name for t in upserted)]
        new_topics = dict(old.topics)
        topic_ids = dict(old.topic_ids)  # copied, not rebuilt: no UUID hashed per topic held
        for name in changed:
            gone = new_topics.pop(name, None)
            if gone is not None:
                topic_ids.pop(gone.topic_id, None)
        for topic in upserted:
            new_topics[topic.name] = topic
            topic_ids[topic.topic_id] = topic.name
        self.snapshot = MetadataSnapshot(
            old.cluster_id,
            old.controller_id if controller_id is None else controller_id,
            old.brokers if brokers is None else {b.broker_id: b for b in brokers},
            new_topics,
            topic_ids,
        )
        with self._updated:
            self._updated.notify_all()
        for name in changed:
            for listener in self._topic_listeners:
                listener(name)

    def alive_endpoints(self, listener_name: str) -> list[tuple[int, EndPoint, str | None]]:
        """(broker id, endpoint, rack) of every live broker that has ``listener_name``."""
        out = []
        for broker in self.snapshot.brokers.values():
            endpoint = broker.endpoint(listener_name)
            if endpoint is not None:
                out.append((broker.broker_id, endpoint, broker.rack))
        return out

    def endpoint(self, broker_id: int, listener_name: str) -> EndPoint | None:
        """The advertised endpoint of ``broker_id`` on ``listener_name``, or None."""
        broker = self.snapshot.brokers.get(broker_id)
        return broker.endpoint(listener_name) if broker else None

    def topic(self, name: str) -> TopicInfo | None:
        """Topic by name."""
        return self.snapshot.topics.get(name)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        """Topic name by id."""
        return self.snapshot.topic_ids.get(topic_id)
