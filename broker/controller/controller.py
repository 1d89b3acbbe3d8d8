"""KafkaController: elects itself through ``/controller`` and decides partition leaders.

It watches ``/brokers/ids`` and ``/brokers/topics`` and turns what it sees into partition
states and metadata. On the embedded store the broker is its own controller and applies
leadership locally; on ZooKeeper the same decisions travel as LeaderAndIsr and
UpdateMetadata over the control plane (a later issue).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable

import structlog

from broker.metadata.cache import MetadataCache, PartitionInfo, TopicInfo
from broker.metadata.kafka_store import KafkaMetadataClient, PartitionStateRecord
from broker.metadata.store import NodeExistsError, NoNodeError

log = structlog.get_logger(__name__)

LeadershipListener = Callable[[str, dict[int, PartitionInfo]], None]
DeletionListener = Callable[[str], None]


class KafkaController:
    """Controller duties for the partitions of every topic in the store."""

    def __init__(
        self,
        broker_id: int,
        client: KafkaMetadataClient,
        cache: MetadataCache,
        on_leadership: LeadershipListener,
        on_topic_deleted: DeletionListener,
    ) -> None:
        self.broker_id = broker_id
        self.client = client
        self.cache = cache
        self._on_leadership = on_leadership
        self._on_topic_deleted = on_topic_deleted
        self.epoch = 0
        self._lock = threading.RLock()
        self._known_topics: set[str] = set()
        self._watched_brokers: set[int] = set()
        self._watched: set[str] = set()

    def startup(self) -> None:
        """Become controller, load every topic, and watch for changes."""
        store = self.client.store
        store.create(
            "/controller",
            json.dumps(
                {
                    "version": 1,
                    "brokerid": self.broker_id,
                    "timestamp": str(int(time.time() * 1000)),
                }
            ).encode(),
            ephemeral=True,
            makepath=True,
        )
        try:
            data, stat = store.get("/controller_epoch")
            self.epoch = int(data) + 1
            store.set("/controller_epoch", str(self.epoch).encode(), version=stat.version)
        except NoNodeError:
            self.epoch = 1
            with contextlib.suppress(NodeExistsError):
                store.create("/controller_epoch", b"1")
        self.cache.update(controller_id=self.broker_id)
        for path in ("/brokers/topics", "/brokers/ids"):
            if store.exists(path) is None:
                store.create(path, makepath=True)
        store.watch_children("/brokers/ids", lambda _p: self._brokers_changed())
        store.watch_children("/brokers/topics", lambda _p: self._topics_changed())
        self._brokers_changed()
        self._topics_changed()
        log.info("controller elected", broker_id=self.broker_id, controller_epoch=self.epoch)

    def _brokers_changed(self, _path: str | None = None) -> None:
        with self._lock:
            brokers = self.client.get_brokers()
            for broker in brokers:
                if broker.broker_id not in self._watched_brokers:
                    # A registration rewritten at runtime (listeners changed, KIP-226).
                    self._watched_brokers.add(broker.broker_id)
                    self.client.store.watch_data(
                        f"/brokers/ids/{broker.broker_id}", self._brokers_changed
                    )
            self.cache.update(brokers=brokers)

    def _topics_changed(self) -> None:
        with self._lock:
            current = set(self.client.get_topics())
            for topic in sorted(current - self._known_topics):
                if topic not in self._watched:
                    self._watched.add(topic)
                    self.client.store.watch_data(
                        f"/brokers/topics/{topic}", self._assignment_changed
                    )
                self._elect_leaders(topic)
            for topic in sorted(self._known_topics - current):
                self.cache.update(removed_topics=[topic])
                self._on_topic_deleted(topic)
                log.info("topic deleted", topic=topic)
            self._known_topics = current

    def _assignment_changed(self, path: str) -> None:
        topic = path.rsplit("/", 1)[-1]
        with self._lock:
            if topic in self._known_topics and self.client.get_assignment(topic) is not None:
                self._elect_leaders(topic)

    def _elect_leaders(self, topic: str) -> None:
        assignment = self.client.get_assignment(topic)
        if assignment is None:
            return
        live = set(self.cache.snapshot.brokers)
        partitions: dict[int, PartitionInfo] = {}
        for index, replicas in sorted(assignment.partitions.items()):
            state = self.client.get_partition_state(topic, index)
            if state is None:
                leader = next((r for r in replicas if r in live), -1)
                state = PartitionStateRecord(
                    leader, 0, tuple(r for r in replicas if r in live), self.epoch
                )
                self.client.set_partition_state(topic, index, state)
            elif state.leader not in live:
                leader = next((r for r in state.isr if r in live), -1)
                state = PartitionStateRecord(
                    leader,
                    state.leader_epoch + 1,
                    tuple(r for r in state.isr if r in live),
                    self.epoch,
                )
                self.client.set_partition_state(topic, index, state)
            partitions[index] = PartitionInfo(
                index,
                state.leader,
                state.leader_epoch,
                replicas,
                state.isr,
                tuple(r for r in replicas if r not in live),
            )
        self.cache.update(
            topics=[
                TopicInfo(
                    topic, assignment.topic_id, partitions, is_internal=topic.startswith("__")
                )
            ]
        )
        self._on_leadership(topic, partitions)
