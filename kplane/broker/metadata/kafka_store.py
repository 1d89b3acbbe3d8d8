"""KafkaMetadataClient: Kafka's ZooKeeper layout on top of any MetadataStore."""

from __future__ import annotations

import base64
import contextlib
import json
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import quote, unquote

from kplane.broker.config.endpoint import EndPoint, SecurityProtocol
from kplane.broker.metadata.config_changes import CHANGES, purge_notifications
from kplane.broker.metadata.store import (
    BadVersionError,
    CheckOp,
    CreateOp,
    DeleteOp,
    MetadataStore,
    MultiOpError,
    NodeExistsError,
    NoNodeError,
    SetDataOp,
    Stat,
    StoreError,
    StoreOp,
)

PRODUCER_ID_BLOCK_SIZE = 1000
LOG_DIR_EVENT_PATH = "/log_dir_event_notification"
LOG_DIR_FAILURE_EVENT = 1
"""Kafka's LogDirEventNotification ``event`` for a failed log dir (the only one)."""
CONTROLLER_PATH = "/controller"
CONTROLLER_EPOCH_PATH = "/controller_epoch"
ISR_CHANGE_PATH = "/isr_change_notification"


class ControllerMovedError(StoreError):
    """A controller's write found ``/controller_epoch`` past the version it was elected at:
    another broker is controller now (Kafka's ControllerMovedException). Nothing was
    written."""


class PartitionStateChangedError(BadVersionError):
    """A leader's ISR write found the partition state at another version than its own;
    ``stored`` is the state there now (None: the partition is gone)."""

    def __init__(self, path: str, stored: PartitionStateRecord | None) -> None:
        super().__init__(path)
        self.stored = stored


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A live broker: id, advertised endpoints by listener name, rack."""

    broker_id: int
    endpoints: tuple[EndPoint, ...]
    rack: str | None = None

    def endpoint(self, listener_name: str) -> EndPoint | None:
        """The advertised endpoint of ``listener_name``, or None."""
        for endpoint in self.endpoints:
            if endpoint.listener_name == listener_name:
                return endpoint
        return None

    def to_json(self) -> bytes:
        """The ``/brokers/ids/<id>`` document (KIP-103 / KIP-291 layout, version 4)."""
        plaintext = self.endpoint("PLAINTEXT")
        doc = {
            "listener_security_protocol_map": {
                e.listener_name: e.security_protocol.value for e in self.endpoints
            },
            "endpoints": [e.connection_string for e in self.endpoints],
            "rack": self.rack,
            "jmx_port": -1,
            "host": plaintext.host if plaintext else None,
            "port": plaintext.port if plaintext else -1,
            "timestamp": str(int(time.time() * 1000)),
            "version": 4,
        }
        return json.dumps(doc).encode()

    @classmethod
    def from_json(cls, broker_id: int, data: bytes) -> BrokerRegistration:
        """Parse a ``/brokers/ids/<id>`` document."""
        doc = json.loads(data)
        protocols = doc.get("listener_security_protocol_map") or {}
        endpoints = []
        for text in doc.get("endpoints", []):
            name, _, rest = text.partition("://")
            host, _, port = rest.rpartition(":")
            endpoints.append(
                EndPoint(
                    name,
                    host.strip("[]"),
                    int(port),
                    SecurityProtocol(protocols.get(name, name)),
                )
            )
        return cls(broker_id, tuple(endpoints), doc.get("rack"))


@dataclass(frozen=True, slots=True)
class PartitionStateRecord:
    """``/brokers/topics/<t>/partitions/<p>/state``: leader, epochs, ISR."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    version: int = 0
    """The znode's version when read (Kafka's zkVersion, the partition epoch): a leader's
    ISR change is written only if the node is still at it."""

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "controller_epoch": self.controller_epoch,
                "leader": self.leader,
                "version": 1,
                "leader_epoch": self.leader_epoch,
                "isr": list(self.isr),
            }
        ).encode()

    @classmethod
    def from_json(cls, data: bytes, version: int = 0) -> PartitionStateRecord:
        doc = json.loads(data)
        return cls(
            doc["leader"], doc["leader_epoch"], tuple(doc["isr"]), doc["controller_epoch"], version
        )


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """``/brokers/topics/<t>``: the topic id and each partition's replicas."""

    topic_id: uuid.UUID
    partitions: dict[int, tuple[int, ...]]
    adding: dict[int, tuple[int, ...]] = field(default_factory=dict)
    """Partitions being reassigned (KIP-455): the replicas joining them."""
    removing: dict[int, tuple[int, ...]] = field(default_factory=dict)
    """Partitions being reassigned: the replicas leaving them."""

    def to_json(self) -> bytes:
        def listed(replicas: dict[int, tuple[int, ...]]) -> dict[str, list[int]]:
            return {str(p): list(r) for p, r in sorted(replicas.items())}

        return json.dumps(
            {
                "version": 3,
                "topic_id": _encode_uuid(self.topic_id),
                "partitions": listed(self.partitions),
                "adding_replicas": listed(self.adding),
                "removing_replicas": listed(self.removing),
            }
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> TopicAssignment:
        doc = json.loads(data)

        def read(key: str) -> dict[int, tuple[int, ...]]:
            return {int(p): tuple(r) for p, r in (doc.get(key) or {}).items()}

        return cls(
            _decode_uuid(doc["topic_id"]),
            read("partitions"),
            read("adding_replicas"),
            read("removing_replicas"),
        )


def _config_json(configs: dict[str, str]) -> bytes:
    """A ``/config/<type>/<name>`` document."""
    return json.dumps({"version": 1, "config": configs}).encode()


def _encode_uuid(value: uuid.UUID) -> str:
    """Kafka writes topic ids in URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def _group_node(group_id: str) -> str:
    """A group id as one znode name (any character may appear in a group id)."""
    return quote(group_id, safe="")


def _offset_path(group_id: str, topic: str, partition: int) -> str:
    return f"/consumers/{_group_node(group_id)}/offsets/{topic}/{partition}"


def _decode_uuid(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


class KafkaMetadataClient:
    """Typed reads and writes of Kafka's znodes (KafkaZkClient's job)."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    # cluster -------------------------------------------------------------------------
    def get_or_create_cluster_id(self) -> str:
        """The cluster id at ``/cluster/id``, generated once."""
        try:
            return str(json.loads(self.store.get("/cluster/id")[0])["id"])
        except NoNodeError:
            cluster_id = _encode_uuid(uuid.uuid4())
            try:
                self.store.create(
                    "/cluster/id",
                    json.dumps({"version": "1", "id": cluster_id}).encode(),
                    makepath=True,
                )
            except NodeExistsError:
                return self.get_or_create_cluster_id()
            return cluster_id

    # the controller ------------------------------------------------------------------
    def register_controller(self, broker_id: int) -> tuple[int, int] | None:
        """Become controller (Kafka's registerControllerAndIncrementControllerEpoch): create
        the ephemeral ``/controller`` and bump ``/controller_epoch`` in one multi. Returns
        the new controller epoch and the version ``/controller_epoch`` is then at, which
        every write of this controller is checked against; None when another broker is
        controller."""
        doc = json.dumps(
            {"version": 1, "brokerid": broker_id, "timestamp": str(int(time.time() * 1000))}
        ).encode()
        while True:
            epoch, version = self._controller_epoch()
            try:
                _, stat = self.store.multi(
                    [
                        CreateOp(CONTROLLER_PATH, doc, ephemeral=True),
                        SetDataOp(CONTROLLER_EPOCH_PATH, str(epoch + 1).encode(), version),
                    ]
                )
            except MultiOpError as exc:
                if isinstance(exc.error, NodeExistsError):
                    return None
                if isinstance(exc.error, BadVersionError):
                    continue  # another broker was elected meanwhile: read the epoch again
                raise
            return epoch + 1, cast(Stat, stat).version

    def get_controller_id(self) -> int | None:
        """The broker ``/controller`` names; None while nobody is controller."""
        try:
            return int(json.loads(self.store.get(CONTROLLER_PATH)[0])["brokerid"])
        except NoNodeError:
            return None

    def _controller_epoch(self) -> tuple[int, int]:
        """``/controller_epoch``: the epoch and the node's version (created at 0)."""
        while True:
            try:
                data, stat = self.store.get(CONTROLLER_EPOCH_PATH)
                return int(data), stat.version
            except NoNodeError:
                with contextlib.suppress(NodeExistsError):
                    self.store.create(CONTROLLER_EPOCH_PATH, b"0")
                    return 0, 0

    def _as_controller(self, epoch_zk_version: int, *ops: StoreOp) -> list[str | Stat | None]:
        """Apply ``ops`` only while ``/controller_epoch`` is at ``epoch_zk_version`` (Kafka's
        MultiRequest with a CheckOp): ControllerMovedError when another broker was elected
        since, else the error of the op that failed."""
        try:
            return self.store.multi([CheckOp(CONTROLLER_EPOCH_PATH, epoch_zk_version), *ops])[1:]
        except MultiOpError as exc:
            if exc.index == 0:
                raise ControllerMovedError(
                    f"{CONTROLLER_EPOCH_PATH} is past version {epoch_zk_version}"
                ) from exc
            raise exc.error from exc

    def _create_as_controller(self, epoch_zk_version: int, path: str, data: bytes = b"") -> None:
        """Create ``path`` and its missing parents, each only while ``epoch_zk_version``
        holds."""
        try:
            self._as_controller(epoch_zk_version, CreateOp(path, data))
        except NoNodeError:
            with contextlib.suppress(NodeExistsError):
                self._create_as_controller(epoch_zk_version, path.rsplit("/", 1)[0])
            self._as_controller(epoch_zk_version, CreateOp(path, data))

    def _set_as_controller(self, epoch_zk_version: int, path: str, data: bytes) -> int:
        """Write ``path`` only while ``epoch_zk_version`` holds; the node's new version."""
        (stat,) = self._as_controller(epoch_zk_version, SetDataOp(path, data))
        return cast(Stat, stat).version

    def create_controller_paths(self, epoch_zk_version: int) -> None:
        """The nodes the controller watches, created when missing."""
        for path in ("/brokers/topics", "/brokers/ids", ISR_CHANGE_PATH):
            if self.store.exists(path) is None:
                with contextlib.suppress(NodeExistsError):
                    self._create_as_controller(epoch_zk_version, path)

    # brokers -------------------------------------------------------------------------
    def register_broker(self, registration: BrokerRegistration) -> None:
        """Create the ephemeral ``/brokers/ids/<id>`` (NodeExistsError when taken)."""
        self.store.create(
            f"/brokers/ids/{registration.broker_id}",
            registration.to_json(),
            ephemeral=True,
            makepath=True,
        )

    def update_broker(self, registration: BrokerRegistration) -> None:
        """Rewrite this broker's registration (its endpoints changed at runtime)."""
        self.store.set(f"/brokers/ids/{registration.broker_id}", registration.to_json())

    def get_broker(self, broker_id: int) -> BrokerRegistration | None:
        """``/brokers/ids/<id>``; None when that broker is not registered."""
        try:
            data, _ = self.store.get(f"/brokers/ids/{broker_id}")
        except NoNodeError:
            return None
        return BrokerRegistration.from_json(broker_id, data)

    def get_brokers(self) -> list[BrokerRegistration]:
        """Every registered broker."""
        try:
            ids = self.store.get_children("/brokers/ids")
        except NoNodeError:
            return []
        found = (self.get_broker(int(text)) for text in ids)  # one may go meanwhile
        return sorted((b for b in found if b is not None), key=lambda b: b.broker_id)

    # topics --------------------------------------------------------------------------
    def get_topics(self) -> list[str]:
        """Names of every topic."""
        try:
            return self.store.get_children("/brokers/topics")
        except NoNodeError:
            return []

    def get_assignment(self, topic: str) -> TopicAssignment | None:
        """The assignment of ``topic`` or None."""
        try:
            return TopicAssignment.from_json(self.store.get(f"/brokers/topics/{topic}")[0])
        except NoNodeError:
            return None

    def create_topic(
        self, topic: str, assignment: TopicAssignment, configs: dict[str, str]
    ) -> None:
        """Write the topic's config then its assignment (NodeExistsError if it exists), as
        one durable batch with what the controller writes when it sees the assignment.
        Like Kafka's ``AdminZkClient``, no config change notification: nobody has the new
        topic's config yet."""
        if self.store.exists(f"/brokers/topics/{topic}") is not None:
            raise NodeExistsError(topic)
        with self.store.batch():
            self.store.set_or_create(f"/config/topics/{topic}", _config_json(configs))
            self.store.create(f"/brokers/topics/{topic}", assignment.to_json(), makepath=True)

    def set_assignment(
        self, topic: str, assignment: TopicAssignment, epoch_zk_version: int | None = None
    ) -> None:
        """Replace the assignment of an existing topic: partitions added by an admin, or a
        reassignment by the controller elected at ``epoch_zk_version`` (written only while
        it is controller, ControllerMovedError otherwise)."""
        path, data = f"/brokers/topics/{topic}", assignment.to_json()
        if epoch_zk_version is None:
            self.store.set(path, data)
        else:
            self._set_as_controller(epoch_zk_version, path, data)

    def delete_topic(self, topic: str) -> None:
        """Remove the topic's assignment, partition states and config."""
        with self.store.batch():
            for path in (f"/brokers/topics/{topic}", f"/config/topics/{topic}"):
                with contextlib.suppress(NoNodeError):
                    self.store.delete(path, recursive=True)

    def set_partition_state(
        self, topic: str, partition: int, state: PartitionStateRecord, epoch_zk_version: int
    ) -> int:
        """Write a partition's leader and ISR, the decision of the controller elected at
        ``epoch_zk_version`` (ControllerMovedError once another broker is); returns the
        node's new version."""
        path, data = _partition_state_path(topic, partition), state.to_json()
        try:
            return self._set_as_controller(epoch_zk_version, path, data)
        except NoNodeError:
            pass
        try:
            self._create_as_controller(epoch_zk_version, path, data)
        except NodeExistsError:
            return self._set_as_controller(epoch_zk_version, path, data)
        return 0

    def update_isr(self, topic: str, partition: int, state: PartitionStateRecord) -> int:
        """A leader's ISR change, written only if the node is still at ``state.version``;
        then a notification under ``/isr_change_notification`` tells the controller.
        Returns the new version. A node that moved on is read again (Kafka's
        checkLeaderAndIsrZkData): if it holds this change already (a write whose answer was
        lost) its version is returned, else PartitionStateChangedError tells what it holds."""
        path = _partition_state_path(topic, partition)
        try:
            version = self.store.set(path, state.to_json(), version=state.version).version
        except BadVersionError:
            stored = self.get_partition_state(topic, partition)
            if stored is None or (stored.leader, stored.leader_epoch, stored.isr) != (
                state.leader,
                state.leader_epoch,
                state.isr,
            ):
                raise PartitionStateChangedError(path, stored) from None
            version = stored.version
        self.store.create(
            f"{ISR_CHANGE_PATH}/isr_change_",
            json.dumps(
                {"version": 1, "partitions": [{"topic": topic, "partition": partition}]}
            ).encode(),
            makepath=True,
            sequential=True,
        )
        return version

    def isr_change_notifications(self) -> list[tuple[str, list[tuple[str, int]]]]:
        """(node name, partitions) of every pending ISR change notification."""
        out: list[tuple[str, list[tuple[str, int]]]] = []
        try:
            names = self.store.get_children(ISR_CHANGE_PATH)
        except NoNodeError:
            return out
        for name in sorted(names):
            with contextlib.suppress(NoNodeError, ValueError, KeyError, TypeError):
                doc = json.loads(self.store.get(f"{ISR_CHANGE_PATH}/{name}")[0])
                out.append(
                    (name, [(str(p["topic"]), int(p["partition"])) for p in doc["partitions"]])
                )
        return out

    def delete_isr_change_notification(self, name: str, epoch_zk_version: int) -> None:
        """Remove one ISR change notification the controller elected at
        ``epoch_zk_version`` processed (ControllerMovedError once another broker is)."""
        with contextlib.suppress(NoNodeError):
            self._as_controller(epoch_zk_version, DeleteOp(f"{ISR_CHANGE_PATH}/{name}"))

    def get_partition_state(self, topic: str, partition: int) -> PartitionStateRecord | None:
        """A partition's leader and ISR with the node's version, or None."""
        try:
            data, stat = self.store.get(_partition_state_path(topic, partition))
        except NoNodeError:
            return None
        return PartitionStateRecord.from_json(data, stat.version)

    # log dir failures (KIP-112) --------------------------------------------------------
    def propagate_log_dir_event(self, broker_id: int) -> None:
        """Tell the controller a log dir of ``broker_id`` failed: a sequential node under
        ``/log_dir_event_notification`` as Kafka writes it."""
        self.store.create(
            f"{LOG_DIR_EVENT_PATH}/log_dir_event_",
            json.dumps(
                {"version": 1, "broker": broker_id, "event": LOG_DIR_FAILURE_EVENT}
            ).encode(),
            makepath=True,
            sequential=True,
        )

    def log_dir_event_notifications(self) -> list[tuple[str, int]]:
        """(node name, broker id) of every pending log dir failure notification, oldest
        first; a node that does not parse is named with broker id -1."""
        try:
            names = self.store.get_children(LOG_DIR_EVENT_PATH)
        except NoNodeError:
            return []
        out = []
        for name in sorted(names):
            try:
                doc = json.loads(self.store.get(f"{LOG_DIR_EVENT_PATH}/{name}")[0])
                out.append((name, int(doc["broker"])))
            except NoNodeError:
                continue
            except (ValueError, KeyError, TypeError):
                out.append((name, -1))
        return out

    def delete_log_dir_event_notification(self, name: str, epoch_zk_version: int) -> None:
        """Remove one log dir failure notification the controller elected at
        ``epoch_zk_version`` processed (ControllerMovedError once another broker is)."""
        with contextlib.suppress(NoNodeError):
            self._as_controller(epoch_zk_version, DeleteOp(f"{LOG_DIR_EVENT_PATH}/{name}"))

    # configs -------------------------------------------------------------------------
    def get_entity_config(self, entity_type: str, name: str) -> dict[str, str]:
        """``/config/<type>/<name>`` as a dict (empty when missing, or when the node is only
        the parent of others, as ``/config/users/<user>`` of a user and client id quota)."""
        try:
            data = self.store.get(f"/config/{entity_type}/{name}")[0]
        except NoNodeError:
            return {}
        if not data:
            return {}
        doc: dict[str, Any] = json.loads(data)
        return {str(k): str(v) for k, v in doc.get("config", {}).items()}

    def set_entity_config(self, entity_type: str, name: str, configs: dict[str, str]) -> None:
        """Write ``/config/<type>/<name>`` and announce it under ``/config/changes``."""
        with self.store.batch():
            self.store.set_or_create(f"/config/{entity_type}/{name}", _config_json(configs))
            self.store.create(
                "/config/changes/config_change_",
                json.dumps({"version": 2, "entity_path": f"{entity_type}/{name}"}).encode(),
                sequential=True,
                makepath=True,
            )
            purge_notifications(self.store, CHANGES)

    def get_entities(self, entity_type: str) -> list[str]:
        """Names under ``/config/<type>``."""
        try:
            return sorted(self.store.get_children(f"/config/{entity_type}"))
        except NoNodeError:
            return []

    # committed offsets -----------------------------------------------------------------
    # Kafka's ZooKeeper offset storage layout: /consumers/<group>/offsets/<topic>/<partition>.
    def write_offsets(self, group_id: str, offsets: Mapping[tuple[str, int], bytes]) -> None:
        """Store a group's committed offsets (one durable write for them all)."""
        with self.store.batch():
            for (topic, partition), data in offsets.items():
                self.store.set_or_create(_offset_path(group_id, topic, partition), data)

    def delete_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]]) -> None:
        """Remove committed offsets of a group (gone ones are ignored)."""
        with self.store.batch():
            for topic, partition in partitions:
                with contextlib.suppress(NoNodeError):
                    self.store.delete(_offset_path(group_id, topic, partition))

    def delete_group_offsets(self, group_id: str) -> None:
        """Remove every committed offset of a group, and the group's node."""
        with contextlib.suppress(NoNodeError):
            self.store.delete(f"/consumers/{_group_node(group_id)}", recursive=True)

    def read_offsets(self, group_id: str) -> dict[tuple[str, int], bytes]:
        """A group's committed offsets as stored."""
        out: dict[tuple[str, int], bytes] = {}
        base = f"/consumers/{_group_node(group_id)}/offsets"
        try:
            topics = self.store.get_children(base)
        except NoNodeError:
            return out
        for topic in topics:
            with contextlib.suppress(NoNodeError):
                for partition in self.store.get_children(f"{base}/{topic}"):
                    with contextlib.suppress(NoNodeError, ValueError):
                        data = self.store.get(f"{base}/{topic}/{partition}")[0]
                        out[(topic, int(partition))] = data
        return out

    def groups_with_offsets(self) -> list[str]:
        """Groups that have a node under ``/consumers``."""
        try:
            return sorted(unquote(name) for name in self.store.get_children("/consumers"))
        except NoNodeError:
            return []

    # producer ids --------------------------------------------------------------------
    def next_producer_id_block(self, broker_id: int) -> range:
        """Claim the next block of producer ids at ``/latest_producer_id_block``."""
        path = "/latest_producer_id_block"
        while True:
            try:
                data, stat = self.store.get(path)
            except NoNodeError:
                block = {
                    "version": 1,
                    "broker": broker_id,
                    "block_start": "0",
                    "block_end": str(PRODUCER_ID_BLOCK_SIZE - 1),
                }
                try:
                    self.store.create(path, json.dumps(block).encode())
                    return range(0, PRODUCER_ID_BLOCK_SIZE)
                except NodeExistsError:
                    continue
            start = int(json.loads(data)["block_end"]) + 1
            block = {
                "version": 1,
                "broker": broker_id,
                "block_start": str(start),
                "block_end": str(start + PRODUCER_ID_BLOCK_SIZE - 1),
            }
            try:
                self.store.set(path, json.dumps(block).encode(), version=stat.version)
            except BadVersionError:  # another broker won: try the next block
                continue
            return range(start, start + PRODUCER_ID_BLOCK_SIZE)

    # transactions --------------------------------------------------------------------
    # kplane's layout (Kafka keeps this in __transaction_state): one document per
    # transactional id at /transactions/<id>, and a group's offsets committed in a
    # transaction not yet completed at /consumers/<group>/pending_txn_offsets/<producer id>.
    def read_transaction(self, transactional_id: str) -> tuple[bytes, int] | None:
        """A transactional id's stored state and its version, or None."""
        try:
            data, stat = self.store.get(_transaction_path(transactional_id))
        except NoNodeError:
            return None
        return data, stat.version

    def write_transaction(self, transactional_id: str, data: bytes, version: int) -> int:
        """Store a transactional id's state if the stored version is still ``version`` (-1:
        none is stored yet); returns the new version. BadVersionError or NodeExistsError
        when another coordinator wrote it since."""
        path = _transaction_path(transactional_id)
        if version < 0:
            self.store.create(path, data, makepath=True)
            return 0
        return self.store.set(path, data, version=version).version

    def delete_transaction(self, transactional_id: str, version: int) -> None:
        """Remove an expired transactional id's state (BadVersionError if it changed)."""
        path = _transaction_path(transactional_id)
        with contextlib.suppress(NoNodeError):
            _, stat = self.store.get(path)
            if stat.version != version:
                raise BadVersionError(path)
            self.store.delete(path)

    def transactional_ids(self) -> list[str]:
        """Every transactional id with stored state."""
        try:
            return sorted(unquote(name) for name in self.store.get_children("/transactions"))
        except NoNodeError:
            return []

    def write_pending_txn_offsets(self, group_id: str, producer_id: int, data: bytes) -> None:
        """Store the offsets ``producer_id`` committed for a group in its open transaction."""
        self.store.set_or_create(_pending_path(group_id, producer_id), data)

    def read_pending_txn_offsets(self, group_id: str) -> dict[int, bytes]:
        """producer id -> its pending transactional offsets of a group, as stored."""
        base = f"/consumers/{_group_node(group_id)}/pending_txn_offsets"
        try:
            names = self.store.get_children(base)
        except NoNodeError:
            return {}
        out = {}
        for name in names:
            with contextlib.suppress(NoNodeError, ValueError):
                out[int(name)] = self.store.get(f"{base}/{name}")[0]
        return out

    def complete_pending_txn_offsets(
        self, group_id: str, producer_id: int, offsets: Mapping[tuple[str, int], bytes]
    ) -> None:
        """End a transaction's offsets for a group in one durable write: ``offsets`` become
        committed (none for an abort) and the pending ones are removed."""
        with self.store.batch():
            for (topic, partition), data in offsets.items():
                self.store.set_or_create(_offset_path(group_id, topic, partition), data)
            with contextlib.suppress(NoNodeError):
                self.store.delete(_pending_path(group_id, producer_id))


    # consumer groups (KIP-848) ----------------------------------------------------------
    # kplane's layout (Kafka keeps these in __consumer_offsets): one document per group at
    # /consumer_groups/<group>, written conditionally on the version read.
    def read_consumer_group(self, group_id: str) -> tuple[bytes, int] | None:
        """A consumer group's stored state and its version, or None."""
        try:
            data, stat = self.store.get(_consumer_group_path(group_id))
        except NoNodeError:
            return None
        return data, stat.version

    def write_consumer_group(self, group_id: str, data: bytes, version: int) -> int:
        """Store a consumer group's state if the stored version is still ``version`` (-1:
        none is stored yet); returns the new version. BadVersionError or NodeExistsError
        when another coordinator wrote it since."""
        path = _consumer_group_path(group_id)
        if version < 0:
            self.store.create(path, data, makepath=True)
            return 0
        return self.store.set(path, data, version=version).version

    def delete_consumer_group(self, group_id: str) -> None:
        """Remove a consumer group's state (gone already: nothing to do)."""
        with contextlib.suppress(NoNodeError):
            self.store.delete(_consumer_group_path(group_id))

    def consumer_group_ids(self) -> list[str]:
        """Every consumer group with stored state."""
        try:
            return sorted(unquote(n) for n in self.store.get_children("/consumer_groups"))
        except NoNodeError:
            return []


def _consumer_group_path(group_id: str) -> str:
    return f"/consumer_groups/{_group_node(group_id)}"


def _partition_state_path(topic: str, partition: int) -> str:
    return f"/brokers/topics/{topic}/partitions/{partition}/state"


def _transaction_path(transactional_id: str) -> str:
    return f"/transactions/{quote(transactional_id, safe='')}"


def _pending_path(group_id: str, producer_id: int) -> str:
    return f"/consumers/{_group_node(group_id)}/pending_txn_offsets/{producer_id}"
