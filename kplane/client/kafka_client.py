"""KafkaClient: connections, cluster metadata, and rebootstrap (KIP-899).

The client bootstraps from ``bootstrap.servers``, then talks only to the brokers it
learned from metadata. When none of those is available — no connection and none can be
made now (reconnect backoff) — ``metadata.recovery.strategy=rebootstrap`` forgets them
and bootstraps again, while ``none`` fails the operation naming the brokers tried. A TLS or
SASL authentication failure (AuthenticationError) is raised at once, not retried.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import structlog

from kplane.common.network.config import ClientConfig
from kplane.common.network.connection import BrokerConnection, BrokerConnectionError
from kplane.common.network.security import AuthenticationError, client_ssl_context
from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode, KafkaError

log = structlog.get_logger(__name__)

NodeKey = int | tuple[str, int]  # a learned broker id, or a bootstrap address


class NoBrokersAvailable(ConnectionError):
    """None of the brokers the client knows is available."""


class RebootstrapRequired(ConnectionError):
    """A broker answered REBOOTSTRAP_REQUIRED; the client bootstrapped again."""


class CoordinatorType(IntEnum):
    """FindCoordinator's key types."""

    GROUP = 0
    TRANSACTION = 1


@dataclass(frozen=True, slots=True)
class BrokerNode:
    """A broker as metadata describes it."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    """Leader and replicas of one partition, with its metadata error."""

    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error: ErrorCode = ErrorCode.none

    @classmethod
    def of(cls, partition: Any) -> PartitionMetadata:
        """From a Metadata response's partition entry."""
        return cls(
            int(partition.partition_index),
            int(partition.leader_id),
            int(partition.leader_epoch),
            tuple(int(r) for r in partition.replica_nodes),
            tuple(int(r) for r in partition.isr_nodes),
            partition.error_code,
        )


@dataclass
class ClusterMetadata:
    """What the client learned: brokers, controller, topics."""

    cluster_id: str | None = None
    controller_id: int = -1
    brokers: dict[int, BrokerNode] = field(default_factory=dict)
    topics: dict[str, dict[int, PartitionMetadata]] = field(default_factory=dict)
    topic_errors: dict[str, ErrorCode] = field(default_factory=dict)
    topic_ids: dict[str, Any] = field(default_factory=dict)


@dataclass
class _NodeState:
    failures: int = 0
    retry_at: float = 0.0


class KafkaClient:
    """Shared by the producer, the consumer and the admin client."""

    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self._ssl_context = client_ssl_context(config) if config.uses_ssl else None
        self._sasl = config.sasl_credentials() if config.uses_sasl else None
        self.cluster = ClusterMetadata()
        self._connections: dict[NodeKey, BrokerConnection] = {}
        self._connecting: dict[NodeKey, asyncio.Future[BrokerConnection]] = {}
        self._states: dict[NodeKey, _NodeState] = {}
        self._metadata_at = 0.0
        self._last_metadata_success = time.monotonic()
        self._wanted_topics: set[str] = set()
        self.rebootstraps = 0

    # lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        """Bootstrap: learn the cluster's brokers."""
        await self.refresh_metadata()

    async def close(self) -> None:
        """Close every connection."""
        for conn in list(self._connections.values()):
            conn.close()
        self._connections.clear()

    async def __aenter__(self) -> KafkaClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # nodes ---------------------------------------------------------------------------
    def _address(self, key: NodeKey) -> tuple[str, int]:
        if isinstance(key, tuple):
            return key
        node = self.cluster.brokers[key]
        return node.host, node.port

    def _candidates(self) -> list[NodeKey]:
        if self.cluster.brokers:
            return list(self.cluster.brokers)
        return list(self.config.bootstrap_servers)

    def _in_backoff(self, key: NodeKey, now: float) -> bool:
        state = self._states.get(key)
        return state is not None and now < state.retry_at

    def _failed(self, key: NodeKey) -> None:
        state = self._states.setdefault(key, _NodeState())
        base = self.config.reconnect_backoff_ms * (2 ** min(state.failures, 16))
        backoff_ms = min(base, self.config.reconnect_backoff_max_ms) * random.uniform(0.8, 1.2)
        state.failures += 1
        state.retry_at = time.monotonic() + backoff_ms / 1000.0

    def is_available(self, key: NodeKey) -> bool:
        """Connected, or a connection may be tried now (not in reconnect backoff)."""
        conn = self._connections.get(key)
        if conn is not None and not conn.closed:
            return True
        return not self._in_backoff(key, time.monotonic())

    async def connection(self, key: NodeKey) -> BrokerConnection:
        """The open connection to ``key``, connecting when needed."""
        conn = self._connections.get(key)
        if conn is not None and not conn.closed:
            return conn
        pending = self._connecting.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[BrokerConnection] = asyncio.get_running_loop().create_future()
        self._connecting[key] = future
        host, port = self._address(key)
        conn = BrokerConnection(
            host,
            port,
            self.config.client_id,
            self.config.request_timeout_ms,
            ssl_context=self._ssl_context,
            sasl=self._sasl,
        )
        try:
            await conn.connect(self.config.request_timeout_ms / 1000.0)
        except AuthenticationError as exc:
            # Not retriable: raised to the caller instead of trying the next broker.
            conn.close()
            self._failed(key)
            future.set_exception(exc)
            future.exception()
            raise
        except (OSError, TimeoutError, BrokerConnectionError) as exc:
            conn.close()
            self._failed(key)
            error = BrokerConnectionError(f"cannot connect to {host}:{port}: {exc!r}")
            future.set_exception(error)
            future.exception()  # retrieved: waiters get it through await
            raise error from exc
        except asyncio.CancelledError:
            conn.close()
            future.set_exception(BrokerConnectionError(f"connect to {host}:{port} cancelled"))
            future.exception()
            raise
        finally:
            self._connecting.pop(key, None)
        self._states.pop(key, None)
        self._connections[key] = conn
        future.set_result(conn)
        return conn

    async def least_loaded_connection(self) -> tuple[NodeKey, BrokerConnection]:
        """A connection to the least busy available broker; rebootstraps or fails when
        none is available (``metadata.recovery.strategy``)."""
        deadline = time.monotonic() + self.config.request_timeout_ms / 1000.0
        tried: list[str] = []
        while True:
            now = time.monotonic()
            candidates = self._candidates()
            connected = [
                (conn.in_flight, key)
                for key in candidates
                if (conn := self._connections.get(key)) is not None and not conn.closed
            ]
            if connected:
                key = min(connected, key=lambda c: c[0])[1]
                return key, self._connections[key]
            available = [k for k in candidates if not self._in_backoff(k, now)]
            random.shuffle(available)
            for key in available:
                try:
                    return key, await self.connection(key)
                except BrokerConnectionError:
                    host, port = self._address(key)
                    tried.append(f"{host}:{port}")
            learned = bool(self.cluster.brokers)
            if learned and all(self._in_backoff(k, time.monotonic()) for k in candidates):
                if self.config.metadata_recovery_strategy == "rebootstrap":
                    self.rebootstrap("none of the known brokers is available")
                    continue
                known = ", ".join("{}:{}".format(*self._address(k)) for k in candidates)
                raise NoBrokersAvailable(
                    f"none of the known brokers ({known}) is available and "
                    "metadata.recovery.strategy=none"
                )
            if time.monotonic() >= deadline:
                raise NoBrokersAvailable(
                    f"no broker available within request.timeout.ms: tried "
                    f"{', '.join(sorted(set(tried))) or 'nothing'}"
                )
            waits = [s.retry_at for k in candidates if (s := self._states.get(k))]
            await asyncio.sleep(max(0.001, min(waits, default=now + 0.05) - time.monotonic()))

    def rebootstrap(self, reason: str) -> None:
        """Forget the learned brokers; the next request bootstraps again."""
        self.rebootstraps += 1
        log.info(
            "rebootstrapping",
            reason=reason,
            bootstrap_servers=",".join(f"{h}:{p}" for h, p in self.config.bootstrap_servers),
            forgotten=sorted(self.cluster.brokers),
        )
        for key in list(self._connections):
            if not isinstance(key, tuple):
                self._connections.pop(key).close()
        self.cluster = ClusterMetadata()
        self._states = {k: s for k, s in self._states.items() if isinstance(k, tuple)}
        for key in self.config.bootstrap_servers:
            self._states.pop(key, None)

    # requests ------------------------------------------------------------------------
    async def request(
        self,
        node_id: int | None,
        api_key: int,
        build: Callable[[int], Any],
        extra_timeout_ms: int = 0,
        max_version: int | None = None,
    ) -> Any:
        """Send ``build(version)`` to ``node_id`` (None: the least loaded broker).

        ``extra_timeout_ms`` lengthens this request's timeout beyond ``request.timeout.ms``
        (a Fetch adds its ``max_wait_ms``, as Kafka's consumer does); ``max_version`` caps
        the negotiated version.
        """
        self._close_idle()
        if node_id is None:
            _, conn = await self.least_loaded_connection()
        else:
            if node_id not in self.cluster.brokers:
                await self.refresh_metadata()
            if node_id not in self.cluster.brokers:
                raise NoBrokersAvailable(f"broker {node_id} is not in the cluster metadata")
            conn = await self.connection(node_id)
        response = await conn.request(api_key, build, extra_timeout_ms, max_version)
        if getattr(response, "error_code", None) == ErrorCode.rebootstrap_required:
            if self.config.metadata_recovery_strategy == "rebootstrap":
                self.rebootstrap(f"{conn.address} answered REBOOTSTRAP_REQUIRED")
            raise RebootstrapRequired(f"{conn.address} answered REBOOTSTRAP_REQUIRED")
        return response

    def _close_idle(self) -> None:
        """Close connections unused for ``connections.max.idle.ms``."""
        now = asyncio.get_running_loop().time()
        limit = self.config.connections_max_idle_ms / 1000.0
        for key, conn in list(self._connections.items()):
            if conn.in_flight == 0 and now - conn.last_used > limit:
                log.debug("closing idle connection", broker=conn.address)
                self._connections.pop(key).close()

    # metadata ------------------------------------------------------------------------
    def want_topics(self, topics: Iterable[str]) -> None:
        """Topics whose metadata every refresh should include."""
        self._wanted_topics.update(topics)

    @property
    def metadata_stale(self) -> bool:
        """Older than ``metadata.max.age.ms``."""
        age_ms = (time.monotonic() - self._metadata_at) * 1000.0
        return age_ms >= self.config.metadata_max_age_ms

    async def refresh_metadata(
        self, topics: Iterable[str] | None = None, allow_auto_create: bool = True
    ) -> ClusterMetadata:
        """Fetch metadata for ``topics`` plus every wanted topic (None and nothing wanted:
        brokers only)."""
        wanted = set(self._wanted_topics) | set(topics or ())
        names = sorted(wanted)

        def build(version: int) -> Any:
            module = api.request_module(ApiKey.METADATA, version)
            return api.make(
                api.request_class(ApiKey.METADATA, version),
                topics=tuple(api.make(module.MetadataRequestTopic, name=n) for n in names),
                allow_auto_topic_creation=allow_auto_create,
                include_topic_authorized_operations=False,
            )

        try:
            response = await self.request(None, ApiKey.METADATA, build)
        except (NoBrokersAvailable, BrokerConnectionError, TimeoutError):
            trigger_ms = self.config.metadata_recovery_rebootstrap_trigger_ms
            stale_ms = (time.monotonic() - self._last_metadata_success) * 1000.0
            if self.config.metadata_recovery_strategy == "rebootstrap" and stale_ms >= trigger_ms:
                self.rebootstrap(f"no metadata for {int(stale_ms)} ms")
            raise
        self._apply(response)
        return self.cluster

    def _apply(self, response: Any) -> None:
        cluster = ClusterMetadata(
            cluster_id=getattr(response, "cluster_id", None),
            controller_id=int(getattr(response, "controller_id", -1)),
            brokers={
                int(b.node_id): BrokerNode(int(b.node_id), b.host, int(b.port), b.rack)
                for b in response.brokers
            },
            topics=dict(self.cluster.topics),
            topic_errors=dict(self.cluster.topic_errors),
            topic_ids=dict(self.cluster.topic_ids),
        )
        for topic in response.topics:
            name = topic.name
            cluster.topic_errors[name] = topic.error_code
            if topic.error_code != ErrorCode.none:
                cluster.topics.pop(name, None)
                continue
            cluster.topics[name] = {
                int(p.partition_index): PartitionMetadata.of(p) for p in topic.partitions
            }
            topic_id = getattr(topic, "topic_id", None)
            if topic_id is not None:
                cluster.topic_ids[name] = topic_id
        for key in [k for k in self._connections if not isinstance(k, tuple)]:
            if key not in cluster.brokers:
                self._connections.pop(key).close()
        self.cluster = cluster
        now = time.monotonic()
        self._metadata_at = now
        self._last_metadata_success = now

    async def partitions_for(self, topic: str) -> dict[int, PartitionMetadata]:
        """Partition metadata of ``topic``, refreshing when unknown or stale; a topic
        still being created (LEADER_NOT_AVAILABLE) is asked again, backing off, for at
        most ``request.timeout.ms``."""
        self.want_topics([topic])
        if topic not in self.cluster.topics or self.metadata_stale:
            await self.refresh_metadata([topic])
        deadline = time.monotonic() + self.config.request_timeout_ms / 1000.0
        while (
            topic not in self.cluster.topics
            and self.cluster.topic_errors.get(topic) == ErrorCode.leader_not_available
            and time.monotonic() < deadline
        ):
            await asyncio.sleep(self.config.reconnect_backoff_ms / 1000.0)
            await self.refresh_metadata([topic])
        partitions = self.cluster.topics.get(topic)
        if partitions is None:
            error = self.cluster.topic_errors.get(topic, ErrorCode.unknown_topic_or_partition)
            raise LookupError(f"topic {topic!r}: {error.name}")
        return partitions

    async def leader_for(self, topic: str, partition: int) -> int:
        """The leader id of ``topic``/``partition`` (refreshing metadata when unknown)."""
        partitions = await self.partitions_for(topic)
        meta = partitions.get(partition)
        if meta is None or meta.leader < 0:
            await self.refresh_metadata([topic])
            meta = self.cluster.topics.get(topic, {}).get(partition)
        if meta is None or meta.leader < 0:
            raise LookupError(f"{topic}-{partition} has no leader")
        return meta.leader

    async def find_coordinator(self, key_type: CoordinatorType, key: str) -> int:
        """The id of the broker coordinating ``key`` (a group id or a transactional id),
        asked of the least loaded broker with FindCoordinator; KafkaError with the answered
        code when it names none (COORDINATOR_NOT_AVAILABLE while it is being elected)."""

        def build(version: int) -> Any:
            return api.make(  # v4+ asks for several keys at once: one here
                api.request_class(ApiKey.FIND_COORDINATOR, version),
                key=key,
                key_type=int(key_type),
                coordinator_keys=(key,),
            )

        response = await self.request(None, ApiKey.FIND_COORDINATOR, build)
        found = response.coordinators[0] if hasattr(response, "coordinators") else response
        code = found.error_code
        if code != ErrorCode.none:
            raise KafkaError(
                code,
                f"FindCoordinator({key_type.name} {key!r}): {found.error_message or code.name}",
            )
        node = int(found.node_id)
        if node not in self.cluster.brokers:
            await self.refresh_metadata()
            if node not in self.cluster.brokers:
                raise KafkaError(
                    ErrorCode.coordinator_not_available,
                    f"coordinator {node} of {key!r} is not in the cluster metadata",
                )
        return node
