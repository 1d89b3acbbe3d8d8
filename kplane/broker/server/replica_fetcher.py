"""ReplicaFetcherManager: the follower side of replication (Kafka's ReplicaFetcherThread).

Each partition this broker follows is fetched from its leader by one of
``num.replica.fetchers`` fetcher threads per leader (the partition's hash picks it), over
the leader's ``inter.broker.listener.name`` endpoint with that listener's security. A thread
first makes each new partition's log agree with the leader's: it asks OffsetForLeaderEpoch
for its latest epoch and truncates where the logs diverge (KIP-101; to the high watermark
when its log has no epochs). Then it sends Fetch requests with its broker id as
``replica_id`` (``replica.fetch.*``): the leader answers from its log end, and the records
are appended as they are, offsets and all. A partition the leader refuses (not the leader,
a fenced epoch) waits ``replica.fetch.backoff.ms`` for the controller's next decision; one
whose log dir failed here (KAFKA_STORAGE_ERROR) is no longer fetched. Failed fetches and
refused partitions are logged once per interval with a count.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import threading
import time
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from kplane.broker.config.kafka_config import KafkaConfig
from kplane.broker.log.log_dir_failure_channel import KafkaStorageError
from kplane.broker.log.log_manager import LogManager
from kplane.broker.log.partition import Partition, TopicPartition
from kplane.broker.metadata.cache import MetadataCache
from kplane.broker.network.broker_channels import client_config_for
from kplane.broker.server.replication_quota import ReplicationQuota
from kplane.broker.utils.interval_log import IntervalWarning
from kplane.common.network.connection import BrokerConnection
from kplane.common.network.security import client_ssl_context
from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode

log = structlog.get_logger(__name__)

FETCH_VERSION = 12  # topics by name, replica_id in the body
OFFSET_FOR_LEADER_EPOCH_VERSION = 4
THROTTLED_PAUSE_S = 0.1


@dataclass(frozen=True, slots=True)
class FetcherConfig:
    """The replica.* settings a fetcher uses."""

    max_bytes: int = 1_048_576
    response_max_bytes: int = 10_485_760
    min_bytes: int = 1
    max_wait_ms: int = 500
    backoff_ms: int = 1000
    socket_timeout_ms: int = 30_000
    socket_receive_buffer_bytes: int = 65_536

    @classmethod
    def from_config(cls, config: KafkaConfig) -> FetcherConfig:
        return cls(
            config.get_int("replica.fetch.max.bytes"),
            config.get_int("replica.fetch.response.max.bytes"),
            config.get_int("replica.fetch.min.bytes"),
            config.get_int("replica.fetch.wait.max.ms"),
            config.get_int("replica.fetch.backoff.ms"),
            config.get_int("replica.socket.timeout.ms"),
            config.get_int("replica.socket.receive.buffer.bytes"),
        )


@dataclass(slots=True)
class _Fetched:
    partition: Partition
    truncating: bool = True
    delayed_until: float = 0.0
    lag: int = 0
    """The leader's high watermark at the last fetch minus this log's end after it."""


class ReplicaFetcherThread:
    """Fetches the partitions it is given from one leader, on its own thread and loop."""

    def __init__(self, manager: ReplicaFetcherManager, leader: int, fetcher_id: int) -> None:
        self.manager = manager
        self.leader = leader
        self.name = f"ReplicaFetcherThread-{fetcher_id}-{leader}"
        self._partitions: dict[TopicPartition, _Fetched] = {}
        self._lock = threading.Lock()
        self._stopped = False
        self._connection: BrokerConnection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._failed = IntervalWarning("replica fetch failed, retrying")
        self._refused = IntervalWarning("replica fetch of a partition refused, backing off")
        self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
        self._started = threading.Event()
        self._thread.start()
        self._started.wait(5)

    # the partitions ---------------------------------------------------------------------
    def add(self, tp: TopicPartition, partition: Partition) -> None:
        with self._lock:
            self._partitions[tp] = _Fetched(partition)
        self._poke()

    def remove(self, tp: TopicPartition) -> bool:
        with self._lock:
            return self._partitions.pop(tp, None) is not None

    def max_lag(self) -> int:
        with self._lock:
            return max((f.lag for f in self._partitions.values()), default=0)

    def items(self) -> list[tuple[TopicPartition, _Fetched]]:
        with self._lock:
            return list(self._partitions.items())

    def empty(self) -> bool:
        with self._lock:
            return not self._partitions

    def _poke(self) -> None:
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None and not loop.is_closed():
            loop.call_soon_threadsafe(wake.set)

    def stop(self) -> None:
        """End the thread without waiting for it: a Fetch in flight (it may wait up to
        ``replica.fetch.wait.max.ms`` at the leader) is cancelled, so the LeaderAndIsr that
        took this thread's last partition away is not held up."""
        self._stopped = True
        loop, task = self._loop, self._task
        if loop is not None and task is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(task.cancel)

    def shutdown(self) -> None:
        """Stop, and wait for the thread to end."""
        self.stop()
        self._thread.join(timeout=5)

    # the loop -------------------------------------------------------------------------
    def _main(self) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            asyncio.run(self._run())

    async def _run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._wake = asyncio.Event()
        self._started.set()
        if self._stopped:
            return
        try:
            while not self._stopped:
                ready = self._ready()
                if not ready:
                    self._wake.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), self._idle_wait())
                    continue
                try:
                    connection = await self._connect()
                    truncating = {tp: f for tp, f in ready.items() if f.truncating}
                    if truncating:
                        await self._truncate(connection, truncating)
                    fetching = {tp: f for tp, f in ready.items() if not f.truncating}
                    if fetching:
                        await self._fetch(connection, fetching)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    self._failed.record(fetcher=self.name, reason=str(exc) or type(exc).__name__)
                    self._close()
                    await asyncio.sleep(self.manager.config.backoff_ms / 1000)
        finally:
            self._close()

    def _ready(self) -> dict[TopicPartition, _Fetched]:
        now = time.monotonic()
        with self._lock:
            return {tp: f for tp, f in self._partitions.items() if f.delayed_until <= now}

    def _idle_wait(self) -> float:
        with self._lock:
            delays = [f.delayed_until for f in self._partitions.values()]
        return max(0.01, min(delays) - time.monotonic()) if delays else 1.0

    def _delay(self, tp: TopicPartition, fetched: _Fetched, error: ErrorCode) -> None:
        self._refused.record(partition=str(tp), leader=self.leader, error=error.name)
        fetched.delayed_until = time.monotonic() + self.manager.config.backoff_ms / 1000

    async def _connect(self) -> BrokerConnection:
        if self._connection is not None and not self._connection.closed:
            return self._connection
        manager = self.manager
        registration = manager.cache.snapshot.brokers.get(self.leader)
        endpoint = registration.endpoint(manager.listener) if registration else None
        if endpoint is None:
            raise ConnectionError(f"leader {self.leader} has no {manager.listener} endpoint")
        config = client_config_for(
            manager.kafka_config, manager.listener, endpoint, f"replica-{manager.broker_id}"
        )
        connection = BrokerConnection(
            endpoint.host,
            endpoint.port,
            config.client_id,
            manager.config.socket_timeout_ms,
            ssl_context=client_ssl_context(config) if config.uses_ssl else None,
            sasl=config.sasl_credentials() if config.uses_sasl else None,
            receive_buffer_bytes=manager.config.socket_receive_buffer_bytes,
        )
        await connection.connect(config.request_timeout_ms / 1000.0)
        self._connection = connection
        return connection

    def _close(self) -> None:
        if self._connection is not None:
            self._connection.close(None)
            self._connection = None

    # truncation (KIP-101) ---------------------------------------------------------------
    async def _truncate(
        self, connection: BrokerConnection, partitions: Mapping[TopicPartition, _Fetched]
    ) -> None:
        """Ask the leader where each log's latest epoch ends there; cut this log there."""
        asked = {tp: f for tp, f in partitions.items() if f.partition.log.latest_epoch >= 0}
        for tp, f in partitions.items():
            if tp not in asked:
                self._truncate_to(tp, f, f.partition.high_watermark)
        if not asked:
            return
        manager = self.manager

        def build(version: int) -> Any:
            module = api.request_module(ApiKey.OFFSET_FOR_LEADER_EPOCH, version)
            topics = _by_topic(
                (
                    tp,
                    api.make(
                        module.OffsetForLeaderPartition,
                        partition=tp.partition,
                        current_leader_epoch=f.partition.leader_epoch,
                        leader_epoch=f.partition.log.latest_epoch,
                    ),
                )
                for tp, f in asked.items()
            )
            return api.make(
                api.request_class(ApiKey.OFFSET_FOR_LEADER_EPOCH, version),
                replica_id=manager.broker_id,
                topics=tuple(
                    api.make(module.OffsetForLeaderTopic, topic=name, partitions=tuple(ps))
                    for name, ps in topics.items()
                ),
            )

        response = await connection.request(
            ApiKey.OFFSET_FOR_LEADER_EPOCH, build, max_version=OFFSET_FOR_LEADER_EPOCH_VERSION
        )
        for topic in response.topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.topic, int(p.partition))
                target = asked.get(tp)
                if target is None:
                    continue
                error = ErrorCode(int(p.error_code))
                if error is not ErrorCode.none:
                    self._delay(tp, target, error)
                    continue
                partition = target.partition
                self._truncate_to(
                    tp, target, partition.divergence_offset(int(p.leader_epoch), int(p.end_offset))
                )

    def _truncate_to(self, tp: TopicPartition, f: _Fetched, offset: int) -> None:
        """Cut ``tp``'s log at ``offset``, then fetch it; not at all once its log dir failed."""
        try:
            self.manager.truncate(f.partition, offset)
        except KafkaStorageError:
            self.remove(tp)  # the log dir failure handler takes it from here
            return
        f.truncating = False

    # fetching -------------------------------------------------------------------------
    async def _fetch(
        self, connection: BrokerConnection, partitions: Mapping[TopicPartition, _Fetched]
    ) -> None:
        manager = self.manager
        config = manager.config
        partitions = {
            tp: f for tp, f in partitions.items() if not manager.follower_held_back(f.partition)
        }
        if not partitions:  # every one over the follower's throttle: wait for the rate
            await asyncio.sleep(THROTTLED_PAUSE_S)
            return
        offsets = {tp: f.partition.log.log_end_offset for tp, f in partitions.items()}

        def build(version: int) -> Any:
            module = api.request_module(ApiKey.FETCH, version)
            topics = _by_topic(
                (
                    tp,
                    api.make(
                        module.FetchPartition,
                        partition=tp.partition,
                        current_leader_epoch=f.partition.leader_epoch,
                        fetch_offset=offsets[tp],
                        log_start_offset=f.partition.log.log_start_offset,
                        partition_max_bytes=config.max_bytes,
                    ),
                )
                for tp, f in partitions.items()
            )
            return api.make(
                api.request_class(ApiKey.FETCH, version),
                replica_id=manager.broker_id,
                max_wait=datetime.timedelta(milliseconds=config.max_wait_ms),
                min_bytes=config.min_bytes,
                max_bytes=config.response_max_bytes,
                isolation_level=0,
                topics=tuple(
                    api.make(module.FetchTopic, topic=name, partitions=tuple(ps))
                    for name, ps in topics.items()
                ),
                forgotten_topics_data=(),
            )

        response = await connection.request(
            ApiKey.FETCH, build, config.max_wait_ms, max_version=FETCH_VERSION
        )
        for topic in response.responses:
            for p in topic.partitions:
                tp = TopicPartition(topic.topic, int(p.partition_index))
                with self._lock:
                    f = self._partitions.get(tp)
                if f is None or f is not partitions.get(tp):
                    continue  # removed or re-added meanwhile
                try:
                    self._on_partition(tp, f, p, offsets[tp])
                except KafkaStorageError:
                    self.remove(tp)  # the log dir failure handler takes it from here

    def _on_partition(self, tp: TopicPartition, f: _Fetched, p: Any, offset: int) -> None:
        error = ErrorCode(int(p.error_code))
        partition = f.partition
        if error is ErrorCode.none:
            if partition.log.log_end_offset != offset:
                return  # truncated meanwhile: the next fetch starts from the new end
            records = p.records or b""
            end = partition.append_records_as_follower(
                records, int(p.high_watermark), int(p.log_start_offset)
            )
            f.lag = max(0, int(p.high_watermark) - end)
            self.manager.record_throttled(partition, len(records))
        elif error is ErrorCode.offset_out_of_range:
            leader_start = int(p.log_start_offset)
            if leader_start >= 0 and offset < leader_start:
                self.manager.truncate(partition, leader_start, fully=True)
            else:
                f.truncating = True
        else:
            self._delay(tp, f, error)


def _by_topic(entries: Iterable[tuple[TopicPartition, Any]]) -> dict[str, list[Any]]:
    """A request's per-partition entities grouped by topic, in order."""
    topics: dict[str, list[Any]] = {}
    for tp, entity in entries:
        topics.setdefault(tp.topic, []).append(entity)
    return topics


class ReplicaFetcherManager:
    """The fetcher threads of this broker, by (leader, fetcher id)."""

    def __init__(
        self,
        broker_id: int,
        kafka_config: KafkaConfig,
        cache: MetadataCache,
        log_manager: LogManager,
    ) -> None:
        self.broker_id = broker_id
        self.log_manager = log_manager
        self.kafka_config = kafka_config
        self.cache = cache
        self.listener = kafka_config.inter_broker_listener_name
        self.config = FetcherConfig.from_config(kafka_config)
        self.num_fetchers = kafka_config.get_int("num.replica.fetchers")
        self.quota: ReplicationQuota | None = None
        """``follower.replication.throttled.rate`` (set by the server)."""
        self._threads: dict[tuple[int, int], ReplicaFetcherThread] = {}
        self._lock = threading.Lock()

    def _throttled(self, partition: Partition) -> bool:
        quota = self.quota
        return (
            quota is not None
            and self.broker_id not in partition.isr
            and quota.is_throttled(partition.tp)
        )

    def follower_held_back(self, partition: Partition) -> bool:
        """An out-of-sync replica named in follower.replication.throttled.replicas waits
        while the follower's rate is used up (KIP-73)."""
        return (
            self._throttled(partition)
            and self.quota is not None
            and (self.quota.is_quota_exceeded())
        )

    def record_throttled(self, partition: Partition, nbytes: int) -> None:
        """Count what a throttled replica fetched against the follower's rate."""
        if nbytes and self.quota is not None and self._throttled(partition):
            self.quota.record(nbytes)

    def truncate(self, partition: Partition, offset: int, fully: bool = False) -> None:
        """Cut a followed partition's log at ``offset`` (its divergent tail), or with
        ``fully`` empty it and start at ``offset`` (the leader's log starts past its end),
        through the LogManager, which keeps the log cleaner out of the way."""
        end = partition.log.log_end_offset
        if fully:
            self.log_manager.truncate_fully_and_start_at(partition.tp, offset)
        else:
            self.log_manager.truncate_to(partition.tp, offset)
        partition.truncated()
        if fully or offset < end:
            log.info(
                "log restarted at the leader's log start" if fully else "log truncated",
                partition=str(partition.tp),
                log_end_offset=end,
                offset=offset,
            )

    def _fetcher_id(self, tp: TopicPartition) -> int:
        return zlib.crc32(f"{tp.topic}:{tp.partition}".encode()) % self.num_fetchers

    def add_partitions(self, partitions: Mapping[TopicPartition, Partition]) -> None:
        """Fetch each partition from its (new) leader, after truncating it."""
        self.remove_partitions(partitions)
        with self._lock:
            for tp, partition in partitions.items():
                key = (partition.leader_id, self._fetcher_id(tp))
                thread = self._threads.get(key)
                if thread is None:
                    thread = ReplicaFetcherThread(self, *key)
                    self._threads[key] = thread
                thread.add(tp, partition)

    def remove_partitions(self, tps: Iterable[TopicPartition]) -> None:
        """Stop fetching these partitions; threads left without any stop."""
        wanted = set(tps)
        if not wanted:
            return
        with self._lock:
            for tp in wanted:
                for thread in self._threads.values():
                    thread.remove(tp)
            idle = [key for key, thread in self._threads.items() if thread.empty()]
            stopping = [self._threads.pop(key) for key in idle]
        for thread in stopping:
            thread.stop()

    def resize(self, num_fetchers: int) -> None:
        """``num.replica.fetchers`` changed (KIP-226): the partitions are spread again
        over that many threads per leader."""
        with self._lock:
            if num_fetchers == self.num_fetchers:
                return
            self.num_fetchers = num_fetchers
            followed = {
                tp: f.partition for thread in self._threads.values() for tp, f in thread.items()
            }
        self.add_partitions(followed)

    def max_lag(self) -> int:
        """The largest lag, in offsets, of any partition fetched here (Kafka's MaxLag)."""
        with self._lock:
            threads = list(self._threads.values())
        return max((t.max_lag() for t in threads), default=0)

    def shutdown(self) -> None:
        with self._lock:
            threads = list(self._threads.values())
            self._threads.clear()
        for thread in threads:
            thread.shutdown()
