"""ShareConsumer: reads a KIP-932 share group's records, as Kafka's KafkaShareConsumer does.

``subscribe`` joins the group (:mod:`kplane.client.share_membership`); ``poll`` asks each
leader of the assigned partitions for records with one ShareFetch in that broker's share
session (:mod:`kplane.client.share_session_handler`) and returns the records acquired for
this member, each with its ``delivery_count``. Records are settled with acknowledgements:

- ``acknowledgement_mode="implicit"`` (``share.acknowledgement.mode``, the default): the
  records of a ``poll`` are accepted by the next ``poll``, ``commit_sync``/``commit_async``
  or ``close``;
- ``"explicit"``: the application calls ``acknowledge(record, AcknowledgeType...)`` for the
  records of a ``poll`` (ACCEPT, RELEASE: delivered again, REJECT: never); as in Kafka, a
  ``poll`` returns those of the last one not yet acknowledged again instead of new ones.

Acknowledgements travel on the next ShareFetch to the record's broker, or in a
ShareAcknowledge from ``commit_sync``/``commit_async``, whose results they return. ``close``
accepts (implicit mode), leaves the group and closes every share session (a final
ShareAcknowledge carrying the last acknowledgements), so the records it still holds go back
to the group at once.

Requests to one broker go one at a time (each moves its session's epoch). A round of
ShareFetches runs as a task, as the Consumer's fetch rounds do: a ``poll`` that times out
leaves it going and the next ``poll`` takes its records. Leadership changes and failed
requests refresh the metadata and retry after ``retry.backoff.ms``; what the client's
metadata layer raises (``NoBrokersAvailable``) propagates out of ``poll``.
"""

from __future__ import annotations

import asyncio
import datetime
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import structlog

from kplane.client.consumer import ConsumerRecord, FetchRounds, batch_records
from kplane.client.errors import IllegalStateError
from kplane.client.kafka_client import KafkaClient
from kplane.client.settings import Setting, as_lower, check_bounds, read_settings
from kplane.client.share_membership import ShareMembership
from kplane.client.share_session_handler import (
    SESSION_ERRORS,
    AcknowledgeType,
    ShareRequestData,
    ShareSessionHandler,
    TopicPartition,
)
from kplane.common.network.connection import BrokerConnectionError
from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode, KafkaError
from kplane.protocol.records import read_partial_batches

log = structlog.get_logger(__name__)

ACKNOWLEDGEMENT_MODES = ("implicit", "explicit")

SHARE_CONSUMER_SETTINGS: tuple[Setting, ...] = (
    Setting("group.id", "group_id", str),
    Setting("share.acknowledgement.mode", "acknowledgement_mode", as_lower),
    Setting("fetch.max.wait.ms", "fetch_max_wait_ms", int),
    Setting("fetch.min.bytes", "fetch_min_bytes", int),
    Setting("fetch.max.bytes", "fetch_max_bytes", int),
    Setting("max.poll.records", "max_poll_records", int),
    Setting("retry.backoff.ms", "retry_backoff_ms", int),
    Setting("client.rack", "client_rack", str),
)

AcknowledgementResults = dict[TopicPartition, KafkaError | None]
"""Per partition: None when its acknowledgements were applied, else the error."""

_RETRY_ERRORS = (BrokerConnectionError, TimeoutError)


@dataclass(frozen=True, slots=True)
class _Origin:
    """Where a delivered record was acquired: the broker and its session."""

    node: int
    generation: int


class ShareConsumer:
    """A member of share group ``group_id``; settings by their Kafka names through
    :meth:`from_config`."""

    def __init__(
        self,
        client: KafkaClient,
        group_id: str,
        *,
        acknowledgement_mode: str = "implicit",
        fetch_max_wait_ms: int = 500,
        fetch_min_bytes: int = 1,
        fetch_max_bytes: int = 52_428_800,
        max_poll_records: int = 500,
        retry_backoff_ms: int = 100,
        client_rack: str | None = None,
    ) -> None:
        if acknowledgement_mode not in ACKNOWLEDGEMENT_MODES:
            raise ValueError(
                f"share.acknowledgement.mode: {acknowledgement_mode!r} is not one of "
                f"{', '.join(ACKNOWLEDGEMENT_MODES)}"
            )
        check_bounds(
            {
                "fetch.max.wait.ms": fetch_max_wait_ms,
                "fetch.min.bytes": fetch_min_bytes,
                "retry.backoff.ms": retry_backoff_ms,
            },
            {"fetch.max.bytes": fetch_max_bytes, "max.poll.records": max_poll_records},
        )
        self.client = client
        self.group_id = group_id
        self.explicit = acknowledgement_mode == "explicit"
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_bytes = fetch_max_bytes
        self.max_poll_records = max_poll_records
        self.retry_backoff_ms = retry_backoff_ms
        self._membership = ShareMembership(
            client, group_id, rack_id=client_rack, retry_backoff_ms=retry_backoff_ms
        )
        self._sessions: dict[int, ShareSessionHandler] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._fetched: deque[tuple[_Origin, ConsumerRecord]] = deque()
        # the last poll's records not yet settled, by (topic, partition, offset)
        self._delivered: dict[tuple[str, int, int], tuple[_Origin, ConsumerRecord]] = {}
        self._fetch_rounds = FetchRounds(self._round)
        self._commits: set[asyncio.Task[AcknowledgementResults]] = set()
        self._metadata_needed = False
        self._closed = False

    @classmethod
    def from_config(cls, client: KafkaClient) -> ShareConsumer:
        """Settings by their Kafka names from ``client.config.extra`` (``group.id`` needed)."""
        kwargs = read_settings(client.config.extra, SHARE_CONSUMER_SETTINGS)
        if "group_id" not in kwargs:
            raise ValueError("group.id: a share consumer needs one")
        return cls(client, **kwargs)

    @property
    def member_id(self) -> str:
        return self._membership.member_id

    def assignment(self) -> set[TopicPartition]:
        """The partitions the group gave this member (shared with others)."""
        return set(self._membership.assigned)

    def subscribe(self, topics: Iterable[str]) -> None:
        """Join the group subscribed to ``topics``."""
        self._check_open()
        self._membership.subscribe(topics)

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the share consumer is closed")
        if self._membership.error is not None:
            raise self._membership.error

    # acknowledgements ----------------------------------------------------------------
    def acknowledge(
        self, record: ConsumerRecord, kind: AcknowledgeType = AcknowledgeType.ACCEPT
    ) -> None:
        """Settle ``record`` of the last ``poll`` (explicit mode); sent with the next
        ShareFetch to its broker or by ``commit_sync``/``commit_async``."""
        self._check_open()
        if not self.explicit:
            raise IllegalStateError("acknowledge needs share.acknowledgement.mode=explicit")
        if kind is AcknowledgeType.GAP:
            raise ValueError("acknowledge: GAP is not a type a record is settled with")
        key = (record.topic, record.partition, record.offset)
        delivered = self._delivered.pop(key, None)
        if delivered is None:
            raise IllegalStateError(
                f"{record.topic}-{record.partition}@{record.offset} is not a record of the "
                "last poll, or it was acknowledged already"
            )
        self._queue(delivered[0], (record.topic, record.partition), record.offset, kind)

    def _queue(
        self, origin: _Origin, tp: TopicPartition, offset: int, kind: AcknowledgeType
    ) -> None:
        handler = self._sessions.get(origin.node)
        if handler is None or not handler.acknowledge(tp, offset, kind, origin.generation):
            log.debug(
                "acknowledgement dropped: its share session is gone", partition=tp, offset=offset
            )

    def _accept_delivered(self) -> None:
        """Implicit mode: the last poll's records are accepted."""
        if self.explicit:
            return
        for (topic, partition, offset), (origin, _) in self._delivered.items():
            self._queue(origin, (topic, partition), offset, AcknowledgeType.ACCEPT)
        self._delivered.clear()

    async def commit_sync(self) -> AcknowledgementResults:
        """Send the waiting acknowledgements (implicit mode: accepting the last poll's
        records first) with ShareAcknowledge; the results per partition."""
        self._check_open()
        self._accept_delivered()
        return await self._commit()

    def commit_async(self) -> asyncio.Task[AcknowledgementResults]:
        """``commit_sync`` as a task (awaiting it gives the results; ``close`` waits for
        it)."""
        self._check_open()
        self._accept_delivered()
        return self._commit_in_background()

    def _commit_in_background(self) -> asyncio.Task[AcknowledgementResults]:
        task = asyncio.get_running_loop().create_task(self._commit())
        self._commits.add(task)
        task.add_done_callback(self._committed)
        return task

    def _committed(self, task: asyncio.Task[AcknowledgementResults]) -> None:
        self._commits.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.warning("acknowledging failed", group=self.group_id, error=str(exc))
        elif not task.cancelled():
            self._report(task.result())

    async def _commit(self) -> AcknowledgementResults:
        results: AcknowledgementResults = {}
        nodes = [n for n, h in self._sessions.items() if h.pending()]
        for outcome in await asyncio.gather(*(self._acknowledge(n, final=False) for n in nodes)):
            results.update(outcome)
        return results

    async def _acknowledge(self, node: int, final: bool) -> AcknowledgementResults:
        """One ShareAcknowledge to ``node`` (``final``: closing its session)."""
        async with self._lock(node):
            handler = self._sessions[node]
            request = handler.acknowledge_request(final)
            if request is None:
                return {}

            def build(version: int) -> Any:
                module = api.request_module(ApiKey.SHARE_ACKNOWLEDGE, version)
                return api.make(
                    api.request_class(ApiKey.SHARE_ACKNOWLEDGE, version),
                    group_id=self.group_id,
                    member_id=self.member_id,
                    share_session_epoch=request.epoch,
                    topics=self._topics(
                        request, module, "AcknowledgeTopic", "AcknowledgePartition"
                    ),
                )

            try:
                response = await self.client.request(node, ApiKey.SHARE_ACKNOWLEDGE, build)
            except _RETRY_ERRORS as exc:
                handler.failed()
                self._metadata_needed = True
                return self._all_failed(request, ErrorCode.network_exception, str(exc))
            code = ErrorCode(response.error_code)
            if code is not ErrorCode.none:
                if code in SESSION_ERRORS or final:
                    handler.failed()
                return self._all_failed(request, code, response.error_message)
            handler.completed(request)
            return self._results(request, response.responses, "error_code", "error_message")

    # poll ----------------------------------------------------------------------------
    async def poll(self, timeout_ms: int = 1000) -> list[ConsumerRecord]:
        """Records acquired for this member, at most ``max.poll.records``; waits up to
        ``timeout_ms`` for some (an empty list when none came). In implicit mode the last
        poll's records are accepted first; in explicit mode, as Kafka's, those of the last
        poll not yet acknowledged are returned again instead."""
        self._check_open()
        if not self._membership.topics:
            raise IllegalStateError("poll: the share consumer is not subscribed to any topics")
        if self._delivered and self.explicit:
            return [record for _, record in self._delivered.values()]
        self._accept_delivered()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0, timeout_ms) / 1000.0
        while True:
            records = self._drain()
            if records:
                if any(h.pending() for h in self._sessions.values()):
                    # No ShareFetch goes while records are buffered: the waiting
                    # acknowledgements go in a ShareAcknowledge (as Kafka's consumer does).
                    self._commit_in_background()
                return records
            if not await self._fetch_rounds.wait(self.fetch_max_wait_ms, deadline):
                return []
            self._check_open()
            if loop.time() >= deadline:
                return self._drain()

    def _drain(self) -> list[ConsumerRecord]:
        out: list[ConsumerRecord] = []
        while self._fetched and len(out) < self.max_poll_records:
            origin, record = self._fetched.popleft()
            self._delivered[(record.topic, record.partition, record.offset)] = (origin, record)
            out.append(record)
        return out

    def _lock(self, node: int) -> asyncio.Lock:
        return self._locks.setdefault(node, asyncio.Lock())

    async def _round(self, max_wait_ms: float) -> None:
        """Metadata as needed, then one ShareFetch to every broker leading an assigned
        partition or holding a session to change; ``retry.backoff.ms`` after a failure."""
        healthy = await self._prepare()
        cluster = self.client.cluster
        by_leader: dict[int, set[TopicPartition]] = {}
        for tp in self._membership.assigned:
            meta = cluster.topics.get(tp[0], {}).get(tp[1])
            if meta is None or meta.leader < 0 or meta.leader not in cluster.brokers:
                self._metadata_needed = True
                healthy = False
                continue
            by_leader.setdefault(meta.leader, set()).add(tp)
        nodes = set(by_leader) | {
            n for n, h in self._sessions.items() if h.open and (h.partitions or h.pending())
        }
        if nodes:
            outcomes = await asyncio.gather(
                *(self._fetch_from(n, by_leader.get(n, set()), max_wait_ms) for n in nodes)
            )
            healthy = all(outcomes) and healthy
        if not nodes or not healthy:
            await asyncio.sleep(min(max_wait_ms, self.retry_backoff_ms) / 1000.0)

    async def _prepare(self) -> bool:
        topics = sorted({t for t, _ in self._membership.assigned})
        cluster = self.client.cluster
        if not (
            self._metadata_needed
            or self.client.metadata_stale
            or any(t not in cluster.topics for t in topics)
        ):
            return True
        try:
            await self.client.refresh_metadata(topics, allow_auto_create=False)
        except _RETRY_ERRORS as exc:
            log.debug("metadata refresh failed, retrying", error=repr(exc))
            return False
        self._metadata_needed = False
        return True

    async def _fetch_from(self, node: int, wanted: set[TopicPartition], max_wait_ms: float) -> bool:
        """One ShareFetch to ``node`` in its session; False on a retriable failure."""
        ids = self.client.cluster.topic_ids
        known = {tp for tp in wanted if tp[0] in ids}
        healthy = known == wanted
        async with self._lock(node):
            handler = self._sessions.setdefault(node, ShareSessionHandler())
            request = handler.fetch_request(known)
            if request is None:
                return healthy

            def build(version: int) -> Any:
                module = api.request_module(ApiKey.SHARE_FETCH, version)
                return api.make(
                    api.request_class(ApiKey.SHARE_FETCH, version),
                    group_id=self.group_id,
                    member_id=self.member_id,
                    share_session_epoch=request.epoch,
                    max_wait=datetime.timedelta(milliseconds=int(max_wait_ms)),
                    min_bytes=self.fetch_min_bytes,
                    max_bytes=self.fetch_max_bytes,
                    max_records=self.max_poll_records,
                    batch_size=self.max_poll_records,
                    topics=self._topics(request, module, "FetchTopic", "FetchPartition"),
                    forgotten_topics_data=tuple(
                        api.make(module.ForgottenTopic, topic_id=ids[t], partitions=tuple(ps))
                        for t, ps in _by_topic(request.forgotten).items()
                        if t in ids
                    ),
                )

            try:
                response = await self.client.request(
                    node, ApiKey.SHARE_FETCH, build, extra_timeout_ms=int(max_wait_ms)
                )
            except _RETRY_ERRORS as exc:
                log.debug("share fetch failed", node=node, error=repr(exc))
                handler.failed()
                self._metadata_needed = True
                self._report(self._all_failed(request, ErrorCode.network_exception, str(exc)))
                return False
            code = ErrorCode(response.error_code)
            if code is not ErrorCode.none:
                log.debug("share fetch refused", node=node, error=code.name)
                if code in SESSION_ERRORS:
                    handler.failed()
                self._report(self._all_failed(request, code, response.error_message))
                if not code.retriable:
                    raise KafkaError(code, response.error_message or f"ShareFetch: {code.name}")
                return False
            handler.completed(request)
            self._report(
                self._results(
                    request,
                    response.responses,
                    "acknowledge_error_code",
                    "acknowledge_error_message",
                )
            )
            origin = _Origin(node, handler.generation)
            return self._keep(node, origin, response.responses, handler) and healthy

    def _keep(
        self, node: int, origin: _Origin, responses: Any, handler: ShareSessionHandler
    ) -> bool:
        """Buffer the acquired records; offsets acquired without a record (transaction
        markers) are acknowledged as GAP."""
        names = {v: k for k, v in self.client.cluster.topic_ids.items()}
        healthy = True
        fatal: KafkaError | None = None
        for topic in responses:
            name = names.get(topic.topic_id)
            if name is None:
                self._metadata_needed = True
                continue
            for part in topic.partitions:
                tp = (name, int(part.partition_index))
                error = ErrorCode(part.error_code)
                if error is not ErrorCode.none:
                    if error.retriable:
                        self._metadata_needed = True
                        healthy = False
                    else:
                        fatal = fatal or KafkaError(
                            error, f"share fetch {tp[0]}-{tp[1]} from broker {node}: {error.name}"
                        )
                    continue
                if not part.acquired_records:
                    continue
                view = memoryview(part.records or b"")
                headers = [h for h in read_partial_batches(view) if not h.is_control]
                for acquired in part.acquired_records:
                    first, last = int(acquired.first_offset), int(acquired.last_offset)
                    seen = set()
                    for header in headers:
                        if header.last_offset < first or header.base_offset > last:
                            continue
                        for record in batch_records(
                            tp[0], tp[1], view, header, first, last, int(acquired.delivery_count)
                        ):
                            seen.add(record.offset)
                            self._fetched.append((origin, record))
                    for offset in range(first, last + 1):
                        if offset not in seen:
                            handler.acknowledge(tp, offset, AcknowledgeType.GAP, origin.generation)
        if fatal is not None:
            raise fatal
        return healthy

    # requests' parts and results -----------------------------------------------------
    def _topics(
        self, request: ShareRequestData, module: Any, topic_entity: str, partition_entity: str
    ) -> tuple[Any, ...]:
        ids = self.client.cluster.topic_ids
        batch_entity = module.AcknowledgementBatch
        return tuple(
            api.make(
                getattr(module, topic_entity),
                topic_id=ids[topic],
                partitions=tuple(
                    api.make(
                        getattr(module, partition_entity),
                        partition_index=p,
                        acknowledgement_batches=tuple(
                            api.make(
                                batch_entity,
                                first_offset=b.first_offset,
                                last_offset=b.last_offset,
                                acknowledge_types=b.types,
                            )
                            for b in request.partitions[(topic, p)]
                        ),
                    )
                    for p in parts
                ),
            )
            for topic, parts in _by_topic(request.partitions).items()
            if topic in ids
        )

    def _results(
        self, request: ShareRequestData, responses: Any, code_field: str, message_field: str
    ) -> AcknowledgementResults:
        names = {v: k for k, v in self.client.cluster.topic_ids.items()}
        results: AcknowledgementResults = {}
        for topic in responses:
            name = names.get(topic.topic_id)
            for part in topic.partitions:
                tp = (name or "", int(part.partition_index))
                if tp not in request.acknowledged:
                    continue
                code = ErrorCode(getattr(part, code_field))
                results[tp] = (
                    None
                    if code is ErrorCode.none
                    else KafkaError(code, getattr(part, message_field) or code.name)
                )
        for tp in request.acknowledged:
            results.setdefault(tp, None)
        return results

    @staticmethod
    def _all_failed(
        request: ShareRequestData, code: ErrorCode, message: str | None
    ) -> AcknowledgementResults:
        return {tp: KafkaError(code, message or code.name) for tp in request.acknowledged}

    def _report(self, results: AcknowledgementResults) -> None:
        """Acknowledgements piggybacked on a ShareFetch: failures are logged (their records
        are delivered again once their locks expire)."""
        failed = {f"{t}-{p}": e.code.name for (t, p), e in results.items() if e is not None}
        if failed:
            log.debug("acknowledgements failed", group=self.group_id, partitions=failed)

    # closing -------------------------------------------------------------------------
    async def close(self) -> None:
        """Accept the last poll's records (implicit mode), leave the group and close every
        share session, sending the last acknowledgements: records still held go back to
        the group. The client stays open (it is shared)."""
        if self._closed:
            return
        self._accept_delivered()
        self._closed = True
        # the round ends by itself first: its ShareFetch holds the session's turn
        await self._fetch_rounds.close(self.fetch_max_wait_ms / 1000.0 + 1.0)
        if self._commits:
            await asyncio.gather(*self._commits, return_exceptions=True)
        await self._membership.close()
        nodes = [n for n, h in self._sessions.items() if h.open]
        outcomes = await asyncio.gather(
            *(self._acknowledge(n, final=True) for n in nodes), return_exceptions=True
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                log.info("closing a share session failed", group=self.group_id, error=str(outcome))
            else:
                self._report(outcome)
        self._fetched.clear()
        self._delivered.clear()


def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        grouped.setdefault(topic, []).append(partition)
    return grouped
