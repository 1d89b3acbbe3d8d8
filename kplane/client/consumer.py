"""Consumer: reads assigned partitions from their leaders, or those a KIP-848 consumer group
gives it (``subscribe`` with ``group.id``, :mod:`kplane.client.group_membership`).

Positions live here, not on the broker: ``assign`` then ``seek``/``seek_to_beginning``/
``seek_to_end`` (or ``auto.offset.reset`` when a position is unknown or out of range), and
``poll`` returns the records from each position on. One Fetch goes to each leader per round,
naming every assigned partition it leads; the records of a response are decoded batch by
batch and handed out in offset order per partition.

A round (metadata and positions as needed, then the Fetches) runs as a task: a ``poll`` that
times out leaves it going rather than cancelling requests on shared connections, and the next
``poll`` takes its records. A round started by ``poll`` waits at most until that poll's
deadline (``fetch.max.wait.ms`` at most), so no Fetch stays parked on a connection after.

Control batches (transaction markers) are never records. With ``isolation.level``
read_committed (``isolation_level=1``) the broker answers up to the last stable offset, with
the transactions aborted in that range, ``(producer_id, first_offset)``; as Kafka's Fetcher
does, a transactional batch of such a producer is dropped from its ``first_offset`` until
that producer's ABORT marker.

Leadership changes and lost connections (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION,
any retriable error, a closed connection) mark the metadata stale: the next round refreshes
it and fetches again after ``retry.backoff.ms``. What the client's metadata layer raises
(``NoBrokersAvailable`` with ``metadata.recovery.strategy=none``) propagates out of ``poll``.
"""

from __future__ import annotations

import asyncio
import datetime
import heapq
import itertools
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from kplane.client.errors import IllegalStateError
from kplane.client.group_membership import ConsumerMembership
from kplane.client.kafka_client import KafkaClient
from kplane.client.settings import (
    CONSUMER_SETTINGS,
    ISOLATION_LEVELS,
    check_bounds,
    read_settings,
)
from kplane.common.network.connection import BrokerConnectionError
from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode, KafkaError
from kplane.protocol.records import (
    BatchHeader,
    Record,
    end_txn_marker,
    iter_records,
    read_partial_batches,
)

log = structlog.get_logger(__name__)


EARLIEST_TIMESTAMP = -2
"""ListOffsets: the log start offset."""
LATEST_TIMESTAMP = -1
"""ListOffsets: the high watermark (the offset the next record will get)."""
MAX_TIMESTAMP = -3
"""ListOffsets: the offset and timestamp of the record with the largest timestamp."""

OFFSET_RESET_STRATEGIES = {"earliest": EARLIEST_TIMESTAMP, "latest": LATEST_TIMESTAMP, "none": 0}

READ_UNCOMMITTED = ISOLATION_LEVELS["read_uncommitted"]
READ_COMMITTED = ISOLATION_LEVELS["read_committed"]

TopicPartition = tuple[str, int]


class NoOffsetForPartition(KafkaError):
    """A position is unknown and ``auto.offset.reset`` is ``none``."""

    def __init__(self, partitions: Iterable[TopicPartition]) -> None:
        names = ", ".join(f"{t}-{p}" for t, p in sorted(partitions))
        super().__init__(
            ErrorCode.offset_out_of_range,
            f"no position for {names} and auto.offset.reset=none: seek first",
        )


class OffsetOutOfRange(KafkaError):
    """A position lies outside the log and ``auto.offset.reset`` is ``none``."""

    def __init__(self, positions: Mapping[TopicPartition, int]) -> None:
        names = ", ".join(f"{t}-{p} at {o}" for (t, p), o in sorted(positions.items()))
        super().__init__(
            ErrorCode.offset_out_of_range,
            f"fetch position out of range and auto.offset.reset=none: {names}",
        )
        self.positions = dict(positions)


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    """One record as fetched, with where it came from."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp_type: int = 0
    """0: CreateTime (the producer's), 1: LogAppendTime (the broker's)."""
    delivery_count: int | None = None
    """How often a share group has delivered the record (a share consumer's; else None)."""


@dataclass(frozen=True, slots=True)
class OffsetResult:
    """One partition's ListOffsets answer."""

    error: ErrorCode
    offset: int = -1
    timestamp: int = -1


_RETRY_ERRORS = (BrokerConnectionError, TimeoutError)
"""Failures of one request to one broker: refresh metadata and try again."""


async def list_offsets(
    client: KafkaClient,
    wanted: Mapping[TopicPartition, int],
    isolation_level: int = 0,
    refresh: bool = True,
) -> dict[TopicPartition, OffsetResult]:
    """ListOffsets for ``{(topic, partition): timestamp}``, one request per leader.

    Metadata is refreshed first when a topic is unknown (unless ``refresh`` is false: the
    caller just did). Every partition gets a result: a partition without a known leader
    gets LEADER_NOT_AVAILABLE (UNKNOWN_TOPIC_OR_PARTITION for an unknown topic), a leader
    whose connection failed NETWORK_EXCEPTION; errors of the metadata layer propagate.
    """
    results: dict[TopicPartition, OffsetResult] = {}
    if not wanted:
        return results
    topics = sorted({t for t, _ in wanted})
    if refresh and any(t not in client.cluster.topics for t in topics):
        await client.refresh_metadata(topics, allow_auto_create=False)
    cluster = client.cluster
    by_leader: dict[int, dict[TopicPartition, int]] = {}
    for tp, timestamp in wanted.items():
        partitions = cluster.topics.get(tp[0])
        meta = partitions.get(tp[1]) if partitions is not None else None
        if meta is None:
            code = cluster.topic_errors.get(tp[0], ErrorCode.unknown_topic_or_partition)
            if code == ErrorCode.none:
                code = ErrorCode.unknown_topic_or_partition
            results[tp] = OffsetResult(code)
        elif meta.leader < 0 or meta.leader not in cluster.brokers:
            results[tp] = OffsetResult(ErrorCode.leader_not_available)
        else:
            by_leader.setdefault(meta.leader, {})[tp] = timestamp

    async def ask(leader: int, partitions: dict[TopicPartition, int]) -> None:
        grouped: dict[str, list[tuple[int, int]]] = {}
        for (topic, partition), timestamp in partitions.items():
            grouped.setdefault(topic, []).append((partition, timestamp))

        def build(version: int) -> Any:
            module = api.request_module(ApiKey.LIST_OFFSETS, version)
            return api.make(
                api.request_class(ApiKey.LIST_OFFSETS, version),
                replica_id=-1,
                isolation_level=isolation_level,
                timeout=datetime.timedelta(milliseconds=client.config.request_timeout_ms),
                topics=tuple(
                    api.make(
                        module.ListOffsetsTopic,
                        name=topic,
                        partitions=tuple(
                            api.make(
                                module.ListOffsetsPartition,
                                partition_index=p,
                                current_leader_epoch=-1,
                                timestamp=ts,
                            )
                            for p, ts in parts
                        ),
                    )
                    for topic, parts in grouped.items()
                ),
            )

        try:
            response = await client.request(leader, ApiKey.LIST_OFFSETS, build)
        except _RETRY_ERRORS as exc:
            log.debug("list offsets failed", leader=leader, error=repr(exc))
            for tp in partitions:
                results[tp] = OffsetResult(ErrorCode.network_exception)
            return
        for topic in response.topics:
            for p in topic.partitions:
                tp = (topic.name, int(p.partition_index))
                if tp in partitions:
                    results[tp] = OffsetResult(p.error_code, int(p.offset), int(p.timestamp))
        for tp in partitions:
            results.setdefault(tp, OffsetResult(ErrorCode.unknown_server_error))

    outcomes = await asyncio.gather(
        *(ask(leader, parts) for leader, parts in by_leader.items()), return_exceptions=True
    )
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    return results


@dataclass(slots=True)
class _Fetched:
    """Decoded records of one partition not yet handed out."""

    records: list[ConsumerRecord]
    index: int
    next_offset: int  # the position once every record here is handed out


class FetchRounds:
    """The one fetch round a consumer's polls share: a poll starts it and waits for it
    until its own deadline; a round outliving that poll goes on, and the next poll picks up
    its records. ``close`` lets it end by itself first (cancelling a request mid-connect
    would strand others waiting for that connection, see KafkaClient.connection)."""

    def __init__(self, run: Callable[[float], Coroutine[Any, Any, None]]) -> None:
        self._run = run
        self._task: asyncio.Task[None] | None = None

    async def wait(self, fetch_max_wait_ms: int, deadline: float) -> bool:
        """Start a round when none runs, waiting no longer than the poll (so no fetch parks
        on the connection after it), and wait for it until ``deadline`` (loop time): False
        when it still runs then, else True, raising what the round raised."""
        loop = asyncio.get_running_loop()
        task = self._task
        if task is None:
            wait_ms = min(fetch_max_wait_ms, max(0.0, deadline - loop.time()) * 1000.0)
            task = self._task = loop.create_task(self._run(wait_ms))
        if not task.done():
            await asyncio.wait({task}, timeout=max(0.0, deadline - loop.time()))
            if not task.done():
                return False
        if self._task is task:
            self._task = None
        if not task.cancelled():
            task.result()
        return True

    async def close(self, grace_s: float) -> None:
        """Wait up to ``grace_s`` for the round in flight, then cancel it."""
        task, self._task = self._task, None
        if task is not None:
            await asyncio.wait({task}, timeout=grace_s)
            if not task.done():
                task.cancel()
            await asyncio.gather(task, return_exceptions=True)


class Consumer:
    """Reads assigned partitions; positions are kept by the consumer. With ``group_id`` it
    may ``subscribe`` instead: the group (``group.protocol=consumer`` only) assigns the
    partitions and ``commit`` stores the positions."""

    def __init__(
        self,
        client: KafkaClient,
        *,
        fetch_max_wait_ms: int = 500,
        fetch_min_bytes: int = 1,
        fetch_max_bytes: int = 52_428_800,
        max_partition_fetch_bytes: int = 1_048_576,
        auto_offset_reset: str = "earliest",
        retry_backoff_ms: int = 100,
        isolation_level: int = READ_UNCOMMITTED,
        group_id: str | None = None,
        group_protocol: str = "consumer",
        group_instance_id: str | None = None,
        group_remote_assignor: str | None = None,
        max_poll_interval_ms: int = 300_000,
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
    ) -> None:
        if isolation_level not in (READ_UNCOMMITTED, READ_COMMITTED):
            raise ValueError(
                f"isolation.level: {isolation_level!r} is not 0 (read_uncommitted) or "
                "1 (read_committed)"
            )
        if auto_offset_reset not in OFFSET_RESET_STRATEGIES:
            raise ValueError(
                f"auto.offset.reset: {auto_offset_reset!r} is not one of "
                f"{', '.join(OFFSET_RESET_STRATEGIES)}"
            )
        check_bounds(
            {
                "fetch.max.wait.ms": fetch_max_wait_ms,
                "fetch.min.bytes": fetch_min_bytes,
                "retry.backoff.ms": retry_backoff_ms,
            },
            {
                "fetch.max.bytes": fetch_max_bytes,
                "max.partition.fetch.bytes": max_partition_fetch_bytes,
            },
        )
        self.client = client
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.auto_offset_reset = auto_offset_reset
        self.retry_backoff_ms = retry_backoff_ms
        self.isolation_level = isolation_level
        self._positions: dict[TopicPartition, int | None] = {}
        self._resets: dict[TopicPartition, int] = {}  # pending ListOffsets timestamp
        self._fetched: dict[TopicPartition, _Fetched] = {}
        self._fetch_rounds = FetchRounds(self._round)
        self._metadata_needed = False
        self._rounds = itertools.count()
        self._closed = False
        if group_id is not None and group_protocol != "consumer":
            raise ValueError(
                f"group.protocol: {group_protocol!r}: kplane's consumer speaks the consumer "
                "group protocol (KIP-848) only"
            )
        self._membership = (
            ConsumerMembership(
                self,
                group_id,
                group_instance_id=group_instance_id,
                rebalance_timeout_ms=max_poll_interval_ms,
                server_assignor=group_remote_assignor,
                retry_backoff_ms=retry_backoff_ms,
                auto_commit=enable_auto_commit,
                auto_commit_interval_ms=auto_commit_interval_ms,
            )
            if group_id is not None
            else None
        )

    @classmethod
    def from_config(cls, client: KafkaClient) -> Consumer:
        """Settings by their Kafka names from ``client.config.extra``."""
        return cls(client, **read_settings(client.config.extra, CONSUMER_SETTINGS))

    # assignment and positions --------------------------------------------------------
    def assign(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Read exactly ``partitions`` from now on; kept ones keep their positions."""
        self._check_open()
        wanted = {(str(t), int(p)) for t, p in partitions}
        self._positions = {tp: self._positions.get(tp) for tp in sorted(wanted)}
        for state in (self._resets, self._fetched):
            for tp in [tp for tp in state if tp not in wanted]:
                del state[tp]

    def assignment(self) -> set[tuple[str, int]]:
        """The assigned partitions."""
        return set(self._positions)

    def positions(self) -> dict[TopicPartition, int]:
        """The known position of each assigned partition."""
        return {tp: pos for tp, pos in self._positions.items() if pos is not None}

    def subscribe(self, topics: Iterable[str]) -> None:
        """Join the consumer's group subscribed to ``topics`` (needs ``group.id``); the
        group's assignment replaces any from ``assign``."""
        self._check_open()
        if self._membership is None:
            raise IllegalStateError("subscribe needs a group.id")
        self._membership.subscribe(topics)

    async def commit(self) -> None:
        """Commit the positions of the partitions the group gave this consumer."""
        self._check_open()
        if self._membership is None:
            raise IllegalStateError("commit needs a group.id")
        await self._membership.commit()

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """Read ``topic``/``partition`` from ``offset`` on the next ``poll``."""
        tp = self._assigned(topic, partition)
        if offset < 0:
            raise ValueError(f"seek {topic}-{partition}: offset {offset} is negative")
        self._positions[tp] = offset
        self._resets.pop(tp, None)
        self._fetched.pop(tp, None)

    async def seek_to_beginning(self, partitions: Iterable[tuple[str, int]] | None = None) -> None:
        """Move to the log start offset of ``partitions`` (all assigned ones by default)."""
        await self._seek_to(EARLIEST_TIMESTAMP, partitions)

    async def seek_to_end(self, partitions: Iterable[tuple[str, int]] | None = None) -> None:
        """Move to the high watermark of ``partitions`` (all assigned ones by default)."""
        await self._seek_to(LATEST_TIMESTAMP, partitions)

    async def _seek_to(self, timestamp: int, partitions: Iterable[tuple[str, int]] | None) -> None:
        self._check_open()
        targets = (
            list(self._positions)
            if partitions is None
            else [self._assigned(t, p) for t, p in partitions]
        )
        for tp in targets:
            self._positions[tp] = None
            self._fetched.pop(tp, None)
            self._resets[tp] = timestamp
        # Resolved now where possible; what fails retriably is retried by poll.
        await self._resolve_resets(refresh=True)

    def position(self, topic: str, partition: int) -> int | None:
        """The offset of the next record ``poll`` returns; None until it is known."""
        return self._positions[self._assigned(topic, partition)]

    def _assigned(self, topic: str, partition: int) -> TopicPartition:
        self._check_open()
        tp = (topic, int(partition))
        if tp not in self._positions:
            raise IllegalStateError(f"{topic}-{partition} is not assigned to this consumer")
        return tp

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the consumer is closed")

    # poll ----------------------------------------------------------------------------
    async def poll(
        self, timeout_ms: int = 1000, max_records: int | None = None
    ) -> list[ConsumerRecord]:
        """Records from the positions on, at most ``max_records``; waits up to
        ``timeout_ms`` for some to arrive (an empty list when none did)."""
        self._check_open()
        if not self._positions and self._membership is not None:
            # Subscribed: the group has not given partitions yet (or took them all).
            await asyncio.sleep(min(max(0, timeout_ms), self.retry_backoff_ms) / 1000.0)
            return []
        if not self._positions:
            raise IllegalStateError("poll: no partitions are assigned")
        if max_records is not None and max_records < 1:
            raise ValueError(f"max_records: {max_records} must be at least 1")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0, timeout_ms) / 1000.0
        while True:
            records = self._drain(max_records)
            if records:
                return records
            if not await self._fetch_rounds.wait(self.fetch_max_wait_ms, deadline):
                return []
            if loop.time() >= deadline:
                return self._drain(max_records)

    async def close(self) -> None:
        """Leave the group (committing, with ``enable.auto.commit``), forget the assignment
        and anything fetched; the client stays open (it is shared)."""
        if self._membership is not None and not self._closed:
            await self._membership.close()
        self._closed = True
        await self._fetch_rounds.close(self.fetch_max_wait_ms / 1000.0 + 1.0)
        self._positions.clear()
        self._resets.clear()
        self._fetched.clear()

    async def _round(self, max_wait_ms: float) -> None:
        """Metadata and positions as needed, then one Fetch per leader; after a failure,
        ``retry.backoff.ms`` before the round ends (so retries never spin)."""
        healthy = await self._prepare()
        healthy = await self._fetch_round(max_wait_ms) and healthy
        if not healthy:
            await asyncio.sleep(self.retry_backoff_ms / 1000.0)

    def _drain(self, max_records: int | None) -> list[ConsumerRecord]:
        """Hand out fetched records, advancing positions; partitions take turns."""
        out: list[ConsumerRecord] = []
        for tp in list(self._fetched):
            fetched = self._fetched[tp]
            available = len(fetched.records) - fetched.index
            room = available if max_records is None else min(available, max_records - len(out))
            if fetched.index == 0 and room == available and not out:
                out = fetched.records
            else:
                out.extend(fetched.records[fetched.index : fetched.index + room])
            fetched.index += room
            if fetched.index >= len(fetched.records):
                self._positions[tp] = fetched.next_offset
                del self._fetched[tp]
            else:
                self._positions[tp] = fetched.records[fetched.index].offset
                self._fetched[tp] = self._fetched.pop(tp)  # to the back of the line
            if max_records is not None and len(out) >= max_records:
                break
        return out

    async def _prepare(self) -> bool:
        """Refresh metadata when needed and resolve unknown positions; False when something
        is still missing (the caller backs off)."""
        topics = sorted({t for t, _ in self._positions})
        cluster = self.client.cluster
        if (
            self._metadata_needed
            or self.client.metadata_stale
            or any(t not in cluster.topics for t in topics)
        ):
            try:
                await self.client.refresh_metadata(topics, allow_auto_create=False)
            except _RETRY_ERRORS as exc:
                log.debug("metadata refresh failed, retrying", error=repr(exc))
                return False
            self._metadata_needed = False
        unknown = [
            tp for tp, pos in self._positions.items() if pos is None and tp not in self._resets
        ]
        if unknown:
            if self.auto_offset_reset == "none":
                raise NoOffsetForPartition(unknown)
            strategy = OFFSET_RESET_STRATEGIES[self.auto_offset_reset]
            for tp in unknown:
                self._resets[tp] = strategy
        return await self._resolve_resets(refresh=False)

    async def _resolve_resets(self, refresh: bool) -> bool:
        """ListOffsets for every pending reset; True when none is left pending."""
        pending = dict(self._resets)
        if not pending:
            return True
        results = await list_offsets(
            self.client, pending, isolation_level=self.isolation_level, refresh=refresh
        )
        fatal: list[KafkaError] = []
        for tp, result in results.items():
            if self._resets.get(tp) != pending[tp]:
                continue  # sought or unassigned meanwhile
            if result.error == ErrorCode.none and result.offset >= 0:
                self._positions[tp] = result.offset
                del self._resets[tp]
            elif result.error.retriable or result.error == ErrorCode.none:
                self._metadata_needed = True
            else:
                fatal.append(
                    KafkaError(
                        result.error,
                        f"ListOffsets for {tp[0]}-{tp[1]}: {result.error.name}",
                    )
                )
        if fatal:
            raise fatal[0]
        return not self._resets

    # fetch ---------------------------------------------------------------------------
    async def _fetch_round(self, max_wait_ms: float) -> bool:
        """One Fetch to every leader of a partition with a known position; False when a
        partition could not be fetched (metadata is then refreshed before the next round)."""
        cluster = self.client.cluster
        by_leader: dict[int, list[TopicPartition]] = {}
        healthy = True
        for tp, position in self._positions.items():
            if position is None or tp in self._fetched:
                continue
            meta = cluster.topics.get(tp[0], {}).get(tp[1])
            if meta is None or meta.leader < 0 or meta.leader not in cluster.brokers:
                self._metadata_needed = True
                healthy = False
                continue
            by_leader.setdefault(meta.leader, []).append(tp)
        if not by_leader:
            return False
        turn = next(self._rounds)
        requests = []
        for leader, tps in by_leader.items():
            shift = turn % len(tps)  # every partition gets to go first in turn
            requests.append(self._fetch_from(leader, tps[shift:] + tps[:shift], max_wait_ms))
        outcomes = await asyncio.gather(*requests, return_exceptions=True)
        fatal: BaseException | None = None
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                fatal = fatal or outcome
            elif not outcome:
                healthy = False
        if fatal is not None:
            raise fatal
        return healthy

    async def _fetch_from(
        self, leader: int, partitions: list[TopicPartition], max_wait_ms: float
    ) -> bool:
        """Fetch ``partitions`` from ``leader`` and keep what came back; False on a
        retriable failure."""
        offsets = {tp: self._positions[tp] for tp in partitions}
        topic_ids = dict(self.client.cluster.topic_ids)
        grouped: dict[str, list[int]] = {}
        for topic, partition in partitions:
            grouped.setdefault(topic, []).append(partition)
        by_id = False
        missing_ids: list[str] = []

        def build(version: int) -> Any:
            nonlocal by_id
            by_id = version >= 13
            module = api.request_module(ApiKey.FETCH, version)
            topics = []
            for topic, parts in grouped.items():
                topic_id = topic_ids.get(topic)
                if by_id and topic_id is None:
                    missing_ids.append(topic)
                    continue
                topics.append(
                    api.make(
                        module.FetchTopic,
                        topic=topic,
                        topic_id=topic_id,
                        partitions=tuple(
                            api.make(
                                module.FetchPartition,
                                partition=p,
                                current_leader_epoch=-1,
                                fetch_offset=offsets[(topic, p)],
                                last_fetched_epoch=-1,
                                log_start_offset=-1,
                                partition_max_bytes=self.max_partition_fetch_bytes,
                            )
                            for p in parts
                        ),
                    )
                )
            return api.make(
                api.request_class(ApiKey.FETCH, version),
                replica_id=-1,
                max_wait=datetime.timedelta(milliseconds=int(max_wait_ms)),
                min_bytes=self.fetch_min_bytes,
                max_bytes=self.fetch_max_bytes,
                isolation_level=self.isolation_level,
                session_id=0,
                session_epoch=-1,
                topics=tuple(topics),
                forgotten_topics_data=(),
                rack_id="",
            )

        try:
            response = await self.client.request(
                leader, ApiKey.FETCH, build, extra_timeout_ms=self.fetch_max_wait_ms
            )
        except _RETRY_ERRORS as exc:
            log.debug("fetch failed, refreshing metadata", leader=leader, error=repr(exc))
            self._metadata_needed = True
            return False
        healthy = not missing_ids
        if missing_ids:
            self._metadata_needed = True
        if response.error_code != ErrorCode.none:
            log.debug("fetch refused", leader=leader, error=response.error_code.name)
            self._metadata_needed = True
            return False
        names = {v: k for k, v in topic_ids.items()} if by_id else {}
        out_of_range: dict[TopicPartition, int] = {}
        fatal: KafkaError | None = None
        for topic_response in response.responses:
            name = names.get(topic_response.topic_id) if by_id else topic_response.topic
            if name is None:
                continue
            for part in topic_response.partitions:
                tp = (name, int(part.partition_index))
                offset = offsets.get(tp)
                if offset is None or self._positions.get(tp) != offset or tp in self._fetched:
                    continue  # not asked, or sought/unassigned while the fetch was out
                error = part.error_code
                if error == ErrorCode.none:
                    if part.records:
                        self._keep(tp, offset, part.records, part.aborted_transactions)
                elif error == ErrorCode.offset_out_of_range:
                    out_of_range[tp] = offset
                elif error.retriable:
                    self._metadata_needed = True
                    healthy = False
                else:
                    fatal = fatal or KafkaError(
                        error, f"fetch {tp[0]}-{tp[1]} from broker {leader}: {error.name}"
                    )
        if out_of_range:
            if self.auto_offset_reset == "none":
                raise OffsetOutOfRange(out_of_range)
            strategy = OFFSET_RESET_STRATEGIES[self.auto_offset_reset]
            for tp, offset in out_of_range.items():
                log.info(
                    "fetch position out of range, resetting",
                    topic=tp[0],
                    partition=tp[1],
                    offset=offset,
                    auto_offset_reset=self.auto_offset_reset,
                )
                self._positions[tp] = None
                self._resets[tp] = strategy
            healthy = False
        if fatal is not None:
            raise fatal
        return healthy

    def _keep(
        self, tp: TopicPartition, position: int, data: Any, aborted_transactions: Any = None
    ) -> None:
        """Decode the whole batches of ``data`` from ``position`` on: not control batches,
        and with read_committed not the batches of aborted transactions (Kafka's
        CompletedFetch: a producer's transaction is aborted from the ``first_offset`` the
        response lists until its ABORT marker)."""
        topic, partition = tp
        records: list[ConsumerRecord] = []
        next_offset = position
        view = memoryview(data)
        read_committed = self.isolation_level == READ_COMMITTED
        aborted = sorted(
            (int(a.first_offset), int(a.producer_id)) for a in aborted_transactions or ()
        )
        aborted_producers: set[int] = set()
        for header in read_partial_batches(view):
            skip = header.is_control  # transaction markers are not records
            if read_committed and header.producer_id >= 0:
                while aborted and aborted[0][0] <= header.last_offset:
                    aborted_producers.add(heapq.heappop(aborted)[1])
                if header.is_control:
                    batch = view[header.position : header.position + header.size]
                    marker = end_txn_marker(batch)
                    if marker is not None and not marker.commit:
                        aborted_producers.discard(header.producer_id)
                elif header.is_transactional and header.producer_id in aborted_producers:
                    skip = True
            if header.next_offset <= position:
                continue
            next_offset = header.next_offset
            if skip:
                continue
            records.extend(batch_records(topic, partition, view, header, position))
        if records:
            self._fetched[tp] = _Fetched(records, 0, next_offset)
        elif next_offset > position:
            self._positions[tp] = next_offset  # only markers or aborted batches: step over


def batch_records(
    topic: str,
    partition: int,
    data: memoryview,
    header: BatchHeader,
    first_offset: int = 0,
    last_offset: int | None = None,
    delivery_count: int | None = None,
) -> Iterable[ConsumerRecord]:
    """The records of the batch ``header`` locates in ``data`` from ``first_offset`` to
    ``last_offset`` (inclusive; None: to its end)."""
    decoded: Iterable[Record] = iter_records(data[header.position : header.position + header.size])
    if header.base_offset < first_offset or (
        last_offset is not None and header.last_offset > last_offset
    ):
        end = header.last_offset if last_offset is None else last_offset
        decoded = [r for r in decoded if first_offset <= r.offset <= end]
    timestamp_type = 1 if header.log_append_time else 0
    return [
        ConsumerRecord(
            topic,
            partition,
            r.offset,
            r.timestamp or 0,
            r.key,
            r.value,
            r.headers,
            timestamp_type,
            delivery_count,
        )
        for r in decoded
    ]
