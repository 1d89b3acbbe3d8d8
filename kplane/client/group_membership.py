"""ConsumerMembership: a Consumer's membership of a KIP-848 consumer group
(``group.protocol=consumer``), as Kafka's ConsumerMembershipManager keeps it.

A task heartbeats to the group's coordinator (ConsumerGroupHeartbeat): the first heartbeat
at epoch 0 names the subscription, later ones the partitions owned. When the broker answers
an assignment, the member commits the positions of the partitions it loses, stops reading
them, starts reading the new ones from their committed offsets (``auto.offset.reset`` when
none) and acknowledges at once with its next heartbeat. A fenced member (FENCED_MEMBER_EPOCH,
UNKNOWN_MEMBER_ID) drops its partitions without committing and joins again at epoch 0. With
``enable.auto.commit`` the positions the application consumed are committed every
``auto.commit.interval.ms`` (as Kafka's consumer does, from its background task), when
partitions are revoked and on close. On close it leaves (epoch -1; -2 for a static member,
which keeps its place).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any, Protocol

import structlog

from kplane.client.kafka_client import CoordinatorType, KafkaClient
from kplane.common.network.connection import BrokerConnectionError
from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode, KafkaError

log = structlog.get_logger(__name__)

TopicPartition = tuple[str, int]
LEAVE_GROUP = -1
LEAVE_GROUP_STATIC = -2
_OFFSET_COMMIT_VERSION = 9  # member epochs, topics by name
FENCED = (ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id)
COORDINATOR_MOVED = (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available)


async def named_assignment(
    client: KafkaClient, topics: Iterable[str], topic_partitions: Iterable[Any]
) -> frozenset[TopicPartition]:
    """A heartbeat's assignment (topic ids) by topic name; the metadata of ``topics`` is
    refreshed when an id is not known."""
    wanted = [(t.topic_id, tuple(t.partitions)) for t in topic_partitions]
    names = {v: k for k, v in client.cluster.topic_ids.items()}
    if any(topic_id not in names for topic_id, _ in wanted):
        await client.refresh_metadata(topics, allow_auto_create=False)
        names = {v: k for k, v in client.cluster.topic_ids.items()}
    return frozenset(
        (names[topic_id], int(p)) for topic_id, parts in wanted if topic_id in names for p in parts
    )


class Reader(Protocol):
    """What the membership drives of a Consumer."""

    client: KafkaClient

    def assign(self, partitions: Iterable[TopicPartition]) -> None: ...

    def seek(self, topic: str, partition: int, offset: int) -> None: ...

    def positions(self) -> dict[TopicPartition, int]: ...


class GroupMember(ABC):
    """What a KIP-848 consumer member and a KIP-932 share member share: the member id and
    epoch, a subscription, and the heartbeat task ``subscribe`` starts."""

    def __init__(self, client: KafkaClient, group_id: str, retry_backoff_ms: int) -> None:
        self.client = client
        self.group_id = group_id
        self.retry_backoff_ms = retry_backoff_ms
        self.member_id = str(uuid.uuid4())
        self.member_epoch = 0
        self.topics: tuple[str, ...] = ()
        self._coordinator: int | None = None
        self._full = True  # the next heartbeat names everything (a join or a rejoin)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def subscribe(self, topics: Iterable[str]) -> None:
        """Join with ``topics`` (or change the subscription); heartbeats start at once."""
        self.topics = tuple(sorted(set(topics)))
        self.client.want_topics(self.topics)
        self._full = True
        self._wake.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    @abstractmethod
    async def _run(self) -> None:
        """Heartbeat until the member leaves."""


class ConsumerMembership(GroupMember):
    """One member of ``group_id``; ``subscribe`` starts it, ``close`` leaves. With
    ``auto_commit`` (``enable.auto.commit``) the positions of the owned partitions are
    committed every ``auto_commit_interval_ms``, when partitions are revoked and on close."""

    def __init__(
        self,
        reader: Reader,
        group_id: str,
        *,
        group_instance_id: str | None = None,
        rebalance_timeout_ms: int = 300_000,
        server_assignor: str | None = None,
        retry_backoff_ms: int = 100,
        auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
    ) -> None:
        if auto_commit_interval_ms < 0:
            raise ValueError(f"auto.commit.interval.ms: {auto_commit_interval_ms} is negative")
        super().__init__(reader.client, group_id, retry_backoff_ms)
        self.reader = reader
        self.group_instance_id = group_instance_id
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.server_assignor = server_assignor
        self.auto_commit = auto_commit
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.owned: frozenset[TopicPartition] = frozenset()

    # heartbeats ------------------------------------------------------------------------
    async def _run(self) -> None:
        """Heartbeats when due (or woken by a subscription), auto-commits when due."""
        loop = asyncio.get_running_loop()
        heartbeat_at = loop.time()
        commit_at = loop.time() + self.auto_commit_interval_ms / 1000.0
        while True:
            due = min(heartbeat_at, commit_at) if self.auto_commit else heartbeat_at
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(0.0, due - loop.time()))
            woken = self._wake.is_set()
            self._wake.clear()
            if self.auto_commit and loop.time() >= commit_at:
                commit_at = loop.time() + self.auto_commit_interval_ms / 1000.0
                await self._auto_commit()
            if not woken and loop.time() < heartbeat_at:
                continue
            try:
                next_ms = await self._heartbeat()
            except (KafkaError, BrokerConnectionError, TimeoutError, LookupError) as exc:
                log.info("group heartbeat failed, retrying", group=self.group_id, error=str(exc))
                self._coordinator = None
                self._full = True
                next_ms = self.retry_backoff_ms
            heartbeat_at = loop.time() + next_ms / 1000.0

    async def _auto_commit(self) -> None:
        """The periodic commit of the consumed positions; a failure is logged (the next
        one, or the commit on revocation or close, stores them)."""
        if not self.owned or self.member_epoch <= 0:
            return
        try:
            await self.commit()
        except (KafkaError, BrokerConnectionError, TimeoutError, LookupError) as exc:
            log.warning("auto-commit failed", group=self.group_id, error=str(exc))

    async def _node(self) -> int:
        if self._coordinator is None:
            self._coordinator = await self.client.find_coordinator(
                CoordinatorType.GROUP, self.group_id
            )
        return self._coordinator

    async def _send(self, epoch: int, full: bool) -> Any:
        owned = self.owned
        ids = self.client.cluster.topic_ids
        by_topic: dict[str, list[int]] = {}
        for topic, partition in owned:
            by_topic.setdefault(topic, []).append(partition)

        def build(version: int) -> Any:
            module = api.request_module(ApiKey.CONSUMER_GROUP_HEARTBEAT, version)
            return api.make(
                api.request_class(ApiKey.CONSUMER_GROUP_HEARTBEAT, version),
                group_id=self.group_id,
                member_id=self.member_id,
                member_epoch=epoch,
                instance_id=self.group_instance_id,
                rebalance_timeout=datetime.timedelta(
                    milliseconds=self.rebalance_timeout_ms if full else -1
                ),
                subscribed_topic_names=self.topics if full else None,
                server_assignor=self.server_assignor if full else None,
                topic_partitions=tuple(
                    api.make(module.TopicPartitions, topic_id=ids[t], partitions=tuple(sorted(p)))
                    for t, p in sorted(by_topic.items())
                ),
            )

        return await self.client.request(await self._node(), ApiKey.CONSUMER_GROUP_HEARTBEAT, build)

    async def _heartbeat(self) -> float:
        """One heartbeat; the milliseconds until the next."""
        response = await self._send(self.member_epoch, self._full)
        code = ErrorCode(response.error_code)
        if code in COORDINATOR_MOVED:
            raise KafkaError(code, response.error_message)
        if code in FENCED:
            log.info("fenced from the group, joining again", group=self.group_id, error=code.name)
            self._lose(self.owned)
            self.member_epoch = 0
            self._full = True
            return 0
        if code is ErrorCode.coordinator_load_in_progress:
            return self.retry_backoff_ms
        if code is not ErrorCode.none:
            raise KafkaError(code, response.error_message or code.name)
        self._full = False
        self.member_epoch = int(response.member_epoch)
        interval = response.heartbeat_interval / datetime.timedelta(milliseconds=1)
        if response.assignment is not None:
            target = await named_assignment(
                self.client, self.topics, response.assignment.topic_partitions
            )
            if target != self.owned:
                await self._reconcile(target)
                return 0  # acknowledge the new assignment at once
        return interval

    async def _reconcile(self, target: frozenset[TopicPartition]) -> None:
        revoked = self.owned - target
        added = target - self.owned
        if revoked:
            # Stop reading them first, so no record past the committed position is handed out.
            positions = self.reader.positions()
            self._lose(revoked)
            if self.auto_commit:
                await self._commit({tp: positions[tp] for tp in revoked if tp in positions})
        self.reader.assign(target)
        if added:
            for (topic, partition), offset in (await self._committed(added)).items():
                self.reader.seek(topic, partition, offset)
        self.owned = target
        log.info(
            "group assignment reconciled",
            group=self.group_id,
            member_epoch=self.member_epoch,
            assigned=sorted(target),
        )

    def _lose(self, partitions: Iterable[TopicPartition]) -> None:
        lost = frozenset(partitions)
        self.owned -= lost
        self.reader.assign(self.owned)

    # offsets -------------------------------------------------------------------------
    async def commit(self) -> None:
        """Commit the consumer's positions of the owned partitions at the member's epoch."""
        positions = self.reader.positions()
        await self._commit({tp: positions[tp] for tp in self.owned if tp in positions})

    async def _commit(self, offsets: dict[TopicPartition, int], attempts: int = 3) -> None:
        """OffsetCommit of ``offsets``; after STALE_MEMBER_EPOCH (a heartbeat moved the
        epoch meanwhile) once more at the new epoch; else KafkaError with the first
        partition error."""
        if not offsets:
            return
        topics: dict[str, list[tuple[int, int]]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            topics.setdefault(topic, []).append((partition, offset))

        def build(version: int) -> Any:
            module = api.request_module(ApiKey.OFFSET_COMMIT, version)
            return api.make(
                api.request_class(ApiKey.OFFSET_COMMIT, version),
                group_id=self.group_id,
                generation_id_or_member_epoch=self.member_epoch,
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
                topics=tuple(
                    api.make(
                        module.OffsetCommitRequestTopic,
                        name=topic,
                        partitions=tuple(
                            api.make(
                                module.OffsetCommitRequestPartition,
                                partition_index=p,
                                committed_offset=o,
                            )
                            for p, o in parts
                        ),
                    )
                    for topic, parts in topics.items()
                ),
            )

        response = await self.client.request(
            await self._node(), ApiKey.OFFSET_COMMIT, build, max_version=_OFFSET_COMMIT_VERSION
        )
        errors = [
            (f"{t.name}-{p.partition_index}", ErrorCode(p.error_code))
            for t in response.topics
            for p in t.partitions
            if p.error_code != ErrorCode.none
        ]
        if not errors:
            return
        where, code = errors[0]
        if code is ErrorCode.stale_member_epoch and attempts > 1:
            await asyncio.sleep(self.retry_backoff_ms / 1000.0)
            await self._commit(offsets, attempts - 1)
            return
        raise KafkaError(code, f"OffsetCommit {where}: {code.name}")

    async def _committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed offsets of ``partitions`` (those with one)."""
        topics: dict[str, list[int]] = {}
        for topic, partition in sorted(partitions):
            topics.setdefault(topic, []).append(partition)

        def build(version: int) -> Any:
            module = api.request_module(ApiKey.OFFSET_FETCH, version)
            return api.make(
                api.request_class(ApiKey.OFFSET_FETCH, version),
                group_id=self.group_id,
                topics=tuple(
                    api.make(module.OffsetFetchRequestTopic, name=t, partition_indexes=tuple(ps))
                    for t, ps in topics.items()
                ),
                require_stable=True,
            )

        response = await self.client.request(
            await self._node(), ApiKey.OFFSET_FETCH, build, max_version=7
        )
        if response.error_code != ErrorCode.none:
            raise KafkaError(ErrorCode(response.error_code), "OffsetFetch")
        return {
            (str(t.name), int(p.partition_index)): int(p.committed_offset)
            for t in response.topics
            for p in t.partitions
            if p.error_code == ErrorCode.none and p.committed_offset >= 0
        }

    # leaving -------------------------------------------------------------------------
    async def close(self) -> None:
        """Commit the positions (with ``auto_commit``), then leave the group."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self.member_epoch <= 0 and not self.owned:
            return
        try:
            if self.auto_commit:
                await self.commit()
            leave = LEAVE_GROUP if self.group_instance_id is None else LEAVE_GROUP_STATIC
            await self._send(leave, False)
        except (KafkaError, BrokerConnectionError, TimeoutError) as exc:
            log.info("leaving the group failed", group=self.group_id, error=str(exc))
        self._lose(self.owned)
