"""BrokerView: what a test may read of an in-process broker, and what it may do to it.

The testing package's one module that reaches into KafkaServer: tests and the plugin's
fixtures go through these methods, named in Kafka's vocabulary and returning this module's
plain data, so the broker's internals can move without breaking them. Like the plugin,
it imports the broker only inside methods.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import uuid

    from kplane.broker.log.partition import Partition
    from kplane.broker.server.context import RequestContext
    from kplane.broker.server.kafka_server import KafkaServer
    from kplane.broker.server.replica_fetcher import ReplicaFetcherThread
    from kplane.broker.server.replica_manager import ReplicaManager
    from kplane.common.acl import AclBinding


@dataclass(frozen=True)
class PartitionInfo:
    """A partition as the broker's MetadataCache has it: leader, epoch, replicas, ISR."""

    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]


@dataclass(frozen=True)
class Replica:
    """The broker's own replica of a partition: its leader and epoch, its log's offsets."""

    leader: int
    leader_epoch: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    last_stable_offset: int
    size_bytes: int


@dataclass(frozen=True)
class RequestInfo:
    """A request about to be handled: its version, where it came from, its decoded body."""

    api_version: int
    listener: str
    security_protocol: str
    principal: str
    plane: str
    body: Any


@dataclass(frozen=True)
class ReplicaFetcher:
    """A replica fetcher thread: leader, fetcher id, its socket's SO_RCVBUF (None unconnected)."""

    leader: int
    fetcher_id: int
    receive_buffer: int | None


@dataclass
class BrokerView:
    """An in-process broker as a test reads it, and the faults (librdkafka mock's) it injects."""

    server: KafkaServer
    """The KafkaServer itself: internal, not a stable seam (use the methods instead)."""

    # identity and network --------------------------------------------------------------
    @property
    def broker_id(self) -> int:
        """``broker.id``."""
        return self.server.broker_id

    @property
    def cluster_id(self) -> str:
        """The cluster id in the metadata store."""
        return self.server.cluster_id

    def address(self, listener: str | None = None) -> tuple[str, int]:
        """(host, port) actually bound by ``listener`` (the first one by default)."""
        endpoint = self.server.bound[self._listener(listener)]
        return endpoint.host or "127.0.0.1", endpoint.port

    def advertised(self, listener: str | None = None) -> tuple[str, int]:
        """(host, port) advertised for ``listener``, port 0 replaced by the bound one."""
        name = self._listener(listener)
        endpoint = self.server.advertised(name)
        if endpoint is None:
            raise ValueError(f"no advertised listener {name}")
        return endpoint.host, endpoint.port

    def connections(self) -> dict[str, int]:
        """Open client connections: Kafka's connection id -> bytes queued unsent on it."""
        socket_server = self.server.socket_server
        assert socket_server is not None
        return {
            c.connection_id: c.transport.get_write_buffer_size() if c.transport else 0
            for p in socket_server.all_processors()
            for c in list(p.connections.values())
        }

    def processors(self, listener: str | None = None) -> int:
        """Network threads (Processors) serving ``listener``: ``num.network.threads``."""
        socket_server = self.server.socket_server
        assert socket_server is not None
        return len(socket_server.processors[self._listener(listener)])

    def request_handlers(self, plane: str = "data") -> list[threading.Thread]:
        """Request handler threads of ``plane`` (``data``: ``num.io.threads``; ``control``)."""
        pool = self.server.handler_pool if plane == "data" else self.server.control_handler_pool
        return list(pool._threads) if pool is not None else []

    # metadata -------------------------------------------------------------------------
    def alive_brokers(self) -> set[int]:
        """Ids of the brokers this broker's metadata shows alive."""
        return set(self.server.cache.snapshot.brokers)

    def controller_id(self) -> int:
        """The controller this broker's metadata names (-1 before any)."""
        return self.server.cache.snapshot.controller_id

    def is_controller(self) -> bool:
        """Whether this broker is the active controller."""
        return self.server.controller.active

    def topics(self) -> dict[str, uuid.UUID]:
        """Topics this broker's metadata knows: name -> topic id."""
        return {name: t.topic_id for name, t in self.server.cache.snapshot.topics.items()}

    def partitions(self, topic: str) -> dict[int, PartitionInfo]:
        """``topic``'s partitions by index as this broker's metadata has them ({} if none)."""
        info = self.server.cache.topic(topic)
        if info is None:
            return {}
        return {
            index: PartitionInfo(
                index, p.leader, p.leader_epoch, p.replicas, p.isr, p.offline_replicas
            )
            for index, p in info.partitions.items()
        }

    # replicas and logs ----------------------------------------------------------------
    def replica(self, topic: str, partition: int) -> Replica | None:
        """This broker's replica of ``topic``-``partition``, or None when it hosts none."""
        hosted = self._hosted(topic, partition)
        if hosted is None:
            return None
        log = hosted.log
        return Replica(
            hosted.leader_id,
            hosted.leader_epoch,
            log.log_start_offset,
            log.log_end_offset,
            hosted.high_watermark,
            hosted.last_stable_offset,
            log.size_bytes,
        )

    def set_leader(self, topic: str, partition: int, leader: int, leader_epoch: int) -> None:
        """Only what a LeaderAndIsr sets: the hosted replica's leader, and an epoch at its end."""
        hosted = self._hosted(topic, partition)
        if hosted is None:
            raise ValueError(f"{topic}-{partition} is not hosted on broker {self.broker_id}")
        with hosted.log.lock:
            hosted.leader_id = leader
            hosted.leader_epoch = leader_epoch
            hosted.log.maybe_assign_epoch_start_offset(leader_epoch, hosted.log.log_end_offset)

    def replica_fetchers(self) -> list[ReplicaFetcher]:
        """The replica fetcher threads this broker runs (``num.replica.fetchers`` per leader)."""
        manager = self.server.replica_fetchers
        with manager._lock:
            threads = dict(manager._threads)
        return [
            ReplicaFetcher(leader, fetcher_id, _receive_buffer(thread))
            for (leader, fetcher_id), thread in threads.items()
        ]

    def purgatory_size(self, operation: str = "Fetch") -> int:
        """Requests waiting in the ``Fetch`` or ``Produce`` purgatory (Kafka's PurgatorySize)."""
        server = self.server
        purgatory = server.fetch_purgatory if operation == "Fetch" else server.produce_purgatory
        return purgatory.watched

    def replica_manager(self) -> ReplicaManager:
        """The ReplicaManager itself (internal), for tests of its own transaction handling."""
        return self.server.replica_manager

    # controller and coordinators ------------------------------------------------------
    def elect_leader(self, topic: str, partition: int, broker_id: int) -> None:
        """As controller: ``broker_id`` (in the ISR) reassigned first, then elected leader."""
        state = self.partitions(topic).get(partition)
        if state is None:
            raise ValueError(f"{topic}-{partition} does not exist")
        if broker_id not in state.isr:
            raise ValueError(f"broker {broker_id} is not in the ISR {list(state.isr)}")
        controller = self.server.controller
        order = (broker_id, *(r for r in state.replicas if r != broker_id))
        for step in (
            lambda: controller.alter_reassignments({(topic, partition): order}),
            lambda: controller.elect_leaders(False, [(topic, partition)]),
        ):
            for code, message in step().values():
                if code.value not in (0, 84):  # none; ELECTION_NOT_NEEDED
                    what = f"moving the leader of {topic}-{partition}"
                    raise RuntimeError(f"{what}: {message or code.name}")

    def move_coordinator(self, group: str, broker_id: int) -> None:
        """This broker names ``broker_id`` (while alive) the coordinator of ``group``."""
        self.server.coordinator_overrides[group] = broker_id

    def register_stand_in(self, broker_id: int, listener: str, host: str, port: int) -> None:
        """Register broker ``broker_id``, which does not run, with one endpoint (/brokers/ids)."""
        from kplane.broker.config.endpoint import EndPoint
        from kplane.broker.metadata.kafka_store import BrokerRegistration

        protocol = self.server.config.listener_security_protocol_map[listener]
        endpoint = EndPoint(listener, host, port, protocol)
        self.server.client.register_broker(BrokerRegistration(broker_id, (endpoint,)))

    # configs, ACLs, the metadata store, metrics ---------------------------------------
    def current_config(self, name: str) -> Any:
        """The value of config ``name`` now: static, with KIP-226 dynamic values on top."""
        return self.server.config.get(name)

    def dynamic_config(self, entity: str) -> dict[str, str]:
        """The dynamic configs of ``entity`` (a broker id or ``<default>``), decoded."""
        return self.server.dynamic.entity_configs(entity)

    def znode(self, path: str) -> bytes:
        """Data of ``path`` in the metadata store (Kafka's ZooKeeper layout); KeyError if none."""
        from kplane.broker.metadata.store import NoNodeError

        try:
            return self.server.store.get(path)[0]
        except NoNodeError:
            raise KeyError(path) from None

    def znode_children(self, path: str) -> list[str]:
        """Children of ``path`` in the metadata store; KeyError if there is no such node."""
        from kplane.broker.metadata.store import NoNodeError

        try:
            return self.server.store.get_children(path)
        except NoNodeError:
            raise KeyError(path) from None

    def create_acls(self, bindings: Iterable[AclBinding]) -> None:
        """Add ACLs to the broker's authorizer directly (no request, so no authorization)."""
        authorizer = self.server.authorizer
        if authorizer is None:
            raise RuntimeError("the broker has no authorizer.class.name")
        authorizer.create_acls(bindings)

    def metrics_text(self) -> str:
        """Every metric of the broker in Prometheus' text format, as /metrics serves it."""
        from prometheus_client import generate_latest

        return generate_latest(self.server.metrics.registry).decode()

    def metrics_url(self) -> str | None:
        """The /metrics URL when ``kplane.metrics.port`` is set (None otherwise)."""
        http = self.server.metrics_http
        return http.url if http is not None else None

    # requests and faults (librdkafka mock cluster's, on this real broker) -------------
    def on_request(self, api: int | str, hook: Callable[[RequestInfo], object]) -> None:
        """Call ``hook`` in the handler thread before each request of ``api`` is handled."""
        handlers = self.server.apis.handlers
        key = _api_key(api)
        handle = handlers[key]

        def hooked(ctx: RequestContext) -> None:
            hook(
                RequestInfo(
                    ctx.api_version,
                    ctx.listener_name,
                    ctx.security_protocol.value,
                    ctx.principal,
                    ctx.request.plane,
                    ctx.body,
                )
            )
            handle(ctx)

        handlers[key] = hooked

    def push_request_errors(self, api: int | str, *errors: int | str) -> None:
        """Answer the next requests of ``api`` with ``errors`` in turn (names, numbers, enums)."""
        from kplane.tools.faults import error_named

        self.server.fault_injector().push_request_errors(
            _api_key(api), *(e if isinstance(e, int) else error_named(e) for e in errors)
        )

    def injected_error_count(self, api: int | str) -> int:
        """Errors still queued for ``api``."""
        return self.server.fault_injector().injected_error_count(_api_key(api))

    def set_rtt(self, ms: float, listener: str | None = None) -> None:
        """Delay every response on ``listener`` (every listener by default) by ``ms``."""
        self.server.fault_injector().set_rtt(ms, listener)

    def broker_down(self) -> None:
        """Close every listener (connections dropped, ports kept) until ``broker_up``."""
        self.server.fault_injector().broker_down()

    def broker_up(self) -> None:
        """Reopen the listeners ``broker_down`` closed, on the same ports."""
        self.server.fault_injector().broker_up()

    def drop_connections(self, listener: str | None = None) -> None:
        """Drop every connection of ``listener`` (the first by default)."""
        self.server.fault_injector().drop_connections(self._listener(listener))

    # ----------------------------------------------------------------------------------
    def _listener(self, listener: str | None) -> str:
        return listener or self.server.static_config.listeners[0].listener_name

    def _hosted(self, topic: str, partition: int) -> Partition | None:
        from kplane.broker.log.partition import TopicPartition

        return self.server.log_manager.get(TopicPartition(topic, partition))


def _api_key(api: int | str) -> int:
    from kplane.tools.faults import api_key_named

    return api if isinstance(api, int) else api_key_named(api)


def _receive_buffer(thread: ReplicaFetcherThread) -> int | None:
    connection = thread._connection
    writer = connection._writer if connection is not None else None
    sock = writer.get_extra_info("socket") if writer is not None else None
    return sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) if sock is not None else None
