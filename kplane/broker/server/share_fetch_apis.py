"""KIP-932's record APIs: ShareFetch (78) and ShareAcknowledge (79), over the share
sessions (:class:`~kplane.broker.share.share_session.ShareSessionCache`) and the share
partitions (:class:`~kplane.broker.share.share_partition_manager.SharePartitionManager`).

A ShareFetch settles the acknowledgements it carries, then acquires records of the
session's partitions; with nothing to acquire it waits in the fetch purgatory (woken by
appends, releases and acknowledgements of its partitions) up to its ``max_wait``. Epoch -1
closes the session and releases what the member still holds; so does the close of the
connection that opened the session (Kafka 4.1's connection-disconnect listener), whatever
closed it: a member that crashed gives its records back at once, not when their locks
expire. As in Kafka, the member id is not checked with the group coordinator: the share
session is what a ShareFetch or ShareAcknowledge must name.

A ShareFetch reads at most ``fetch.max.bytes`` and, under a fetch quota, what the quota
window allows (Kafka's getMaxValueInQuotaWindow, as Fetch); its answer counts against the
client's ``consumer_byte_rate`` as a Fetch's does. Its records are the stored batches
passed through (:mod:`protocol.share_fetch_codec`), as Fetch's are.
"""

from __future__ import annotations

import datetime
import functools
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from kplane.broker.log.partition import TopicPartition
from kplane.broker.metadata.cache import MetadataCache
from kplane.broker.quota.client_quotas import ClientQuotas
from kplane.broker.server.context import Handler, RequestContext
from kplane.broker.share.share_partition import AcknowledgementBatch
from kplane.broker.share.share_partition_manager import PartitionFetch, SharePartitionManager
from kplane.broker.share.share_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    ShareSession,
    ShareSessionCache,
)
from kplane.broker.utils.file_region import Transferable
from kplane.broker.utils.purgatory import DelayedOperation, DelayedOperationPurgatory
from kplane.common.acl import AclOperation, AclResourceType
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode, KafkaError
from kplane.protocol.share_fetch_codec import (
    ShareFetchPartitionResult,
    ShareFetchTopicResult,
    encode_share_fetch_response,
)

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class _Parsed:
    """A request's partitions resolved: acknowledgements, refusals, and which topic id
    each partition came under."""

    acks: dict[TopicPartition, list[AcknowledgementBatch]] = field(default_factory=dict)
    named: list[TopicPartition] = field(default_factory=list)
    errors: dict[tuple[uuid.UUID, int], ErrorCode] = field(default_factory=dict)
    ids: dict[TopicPartition, uuid.UUID] = field(default_factory=dict)


class DelayedShareFetch(DelayedOperation):
    """A ShareFetch with nothing to acquire yet, waiting up to its ``max_wait``."""

    def __init__(
        self,
        apis: ShareFetchApis,
        ctx: RequestContext,
        session: ShareSession,
        parsed: _Parsed,
        acks: dict[TopicPartition, KafkaError | None],
        delay_ms: float,
    ) -> None:
        super().__init__(delay_ms)
        self.apis = apis
        self.ctx = ctx
        self.session = session
        self.parsed = parsed
        self.acks = acks

    def try_complete(self) -> bool:
        if self.apis.partitions.acquirable(self.session.group_id, list(self.session.partitions)):
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        if self.ctx.request.disconnected:
            self.ctx.respond_nothing()
            return
        try:
            self.apis.answer_fetch(self.ctx, self.session, self.parsed, self.acks)
        except Exception as exc:  # on the timer's or a producer's thread: still answer
            self.ctx.fail(exc)


class ShareFetchApis:
    """ApiFamily for ShareFetch and ShareAcknowledge."""

    def __init__(
        self,
        partitions: SharePartitionManager,
        sessions: ShareSessionCache,
        cache: MetadataCache,
        purgatory: DelayedOperationPurgatory,
        fetch_max_bytes: int = 2**31 - 1,
        quotas: ClientQuotas | None = None,
    ) -> None:
        self.partitions = partitions
        self.sessions = sessions
        self.cache = cache
        self.purgatory = purgatory
        self.fetch_max_bytes = fetch_max_bytes
        self._quotas = quotas

    def handlers(self) -> Mapping[int, Handler]:
        return {
            ApiKey.SHARE_FETCH: self.handle_fetch,
            ApiKey.SHARE_ACKNOWLEDGE: self.handle_acknowledge,
        }

    # -- the request's partitions -----------------------------------------------------

    def _parse(self, ctx: RequestContext, topics: Sequence[Any], partitions_of: str) -> _Parsed:
        parsed = _Parsed()
        for topic in topics:
            name = self.cache.topic_name(topic.topic_id)
            error = None
            if name is None:
                error = ErrorCode.unknown_topic_id
            elif not ctx.authorized(AclOperation.READ, AclResourceType.TOPIC, name):
                error = ErrorCode.topic_authorization_failed
            for p in getattr(topic, partitions_of):
                index = int(p.partition_index)
                if error is not None or name is None:
                    parsed.errors[(topic.topic_id, index)] = error or ErrorCode.unknown_topic_id
                    continue
                tp = TopicPartition(name, index)
                parsed.ids[tp] = topic.topic_id
                parsed.named.append(tp)
                if p.acknowledgement_batches:
                    parsed.acks[tp] = [
                        AcknowledgementBatch(
                            int(b.first_offset),
                            int(b.last_offset),
                            tuple(int(t) for t in b.acknowledge_types),
                        )
                        for b in p.acknowledgement_batches
                    ]
        return parsed

    def _admit(
        self, ctx: RequestContext, fetch: bool
    ) -> tuple[_Parsed, ShareSession | None] | None:
        """READ on the group, the request's partitions and its session (None: refused and
        answered with the top-level error)."""
        req = ctx.body
        if not ctx.authorized(AclOperation.READ, AclResourceType.GROUP, req.group_id or ""):
            self._top_error(ctx, ErrorCode.group_authorization_failed, None)
            return None
        parsed = self._parse(ctx, req.topics, "partitions")
        try:
            return parsed, self._session(ctx, parsed, fetch)
        except KafkaError as exc:
            log.info(
                "share fetch refused" if fetch else "share acknowledge refused",
                group=req.group_id,
                member=req.member_id,
                error=exc.code.name,
                message=exc.message,
            )
            self._top_error(ctx, exc.code, exc.message)
            return None

    def _session(self, ctx: RequestContext, parsed: _Parsed, fetch: bool) -> ShareSession | None:
        """The session the request opens, continues or closes (None: it closes), as
        Kafka's SharePartitionManager checks them."""
        req = ctx.body
        named = parsed.named
        group_id, member_id, epoch = req.group_id, req.member_id, int(req.share_session_epoch)
        if not group_id or not member_id:
            raise KafkaError(ErrorCode.invalid_request, "GroupId and MemberId must be set.")
        if epoch == INITIAL_EPOCH:
            if not fetch:
                raise KafkaError(
                    ErrorCode.invalid_share_session_epoch,
                    "A share session is opened by a ShareFetch, not a ShareAcknowledge.",
                )
            if parsed.acks:
                raise KafkaError(
                    ErrorCode.invalid_request,
                    "Acknowledge data present in the initial ShareFetch request.",
                )
            connection_id = ctx.connection_id
            watched = self.sessions.watches(connection_id)
            opened = self.sessions.open(group_id, member_id, named, connection_id)
            if not watched:
                ctx.on_connection_close(functools.partial(self._connection_closed, connection_id))
            return opened
        if epoch == FINAL_EPOCH:
            if self.sessions.get(group_id, member_id) is None:
                raise KafkaError(
                    ErrorCode.share_session_not_found,
                    f"Share session for member {member_id} of group {group_id} not found.",
                )
            return None
        session = self.sessions.next(group_id, member_id, epoch)
        if not fetch:  # a ShareAcknowledge moves the epoch on, adding nothing to fetch
            return session
        for tp in named:
            session.partitions.setdefault(tp, None)
        for forgotten in getattr(req, "forgotten_topics_data", ()):
            name = self.cache.topic_name(forgotten.topic_id)
            if name is not None:
                for index in forgotten.partitions:
                    session.partitions.pop(TopicPartition(name, int(index)), None)
        return session

    def _close(self, group_id: str, member_id: str) -> None:
        session = self.sessions.close(group_id, member_id)
        if session is not None:
            self.partitions.release(group_id, member_id, list(session.partitions))

    def _connection_closed(self, connection_id: str) -> None:
        """The connection that opened share sessions closed (on its network thread): they
        go, and the records their members hold go back to the group, delivery counts
        kept."""
        for session in self.sessions.connection_closed(connection_id):
            log.info(
                "share session closed with its connection",
                group=session.group_id,
                member=session.member_id,
                connection=connection_id,
            )
            self.partitions.release(session.group_id, session.member_id, list(session.partitions))

    # -- ShareFetch -------------------------------------------------------------------

    def handle_fetch(self, ctx: RequestContext) -> None:
        req = ctx.body
        admitted = self._admit(ctx, fetch=True)
        if admitted is None:
            return
        parsed, session = admitted
        acks = (
            self.partitions.acknowledge(req.group_id, req.member_id, parsed.acks)
            if parsed.acks
            else {}
        )
        if session is None:  # the final fetch: acknowledge, close, fetch nothing
            self._close(req.group_id, req.member_id)
            self._respond_fetch(ctx, parsed, acks, {})
            return
        max_wait_ms = req.max_wait.total_seconds() * 1000.0
        if max_wait_ms <= 0 or not session.partitions:
            self.answer_fetch(ctx, session, parsed, acks)
            return
        delayed = DelayedShareFetch(self, ctx, session, parsed, acks, max_wait_ms)
        if not self.purgatory.try_complete_else_watch(delayed, list(session.partitions)):
            ctx.request.on_disconnect(delayed.force_complete)

    def answer_fetch(
        self,
        ctx: RequestContext,
        session: ShareSession,
        parsed: _Parsed,
        acks: Mapping[TopicPartition, KafkaError | None],
    ) -> None:
        req = ctx.body
        tps = list(session.partitions)
        turn = session.epoch % len(tps) if tps else 0  # each partition first in turn
        max_bytes = min(int(req.max_bytes), self.fetch_max_bytes)
        window = self._quotas.max_fetch_bytes(ctx.request) if self._quotas is not None else None
        if window is not None:  # more would be throttled even after a quiet window
            max_bytes = min(max_bytes, window)
        fetched = self.partitions.fetch(
            session.group_id,
            session.member_id,
            tps[turn:] + tps[:turn],
            max_bytes,
            int(req.max_records) if int(req.max_records) > 0 else 500,
        )
        self._respond_fetch(ctx, parsed, acks, fetched)

    def _respond_fetch(
        self,
        ctx: RequestContext,
        parsed: _Parsed,
        acks: Mapping[TopicPartition, KafkaError | None],
        fetched: Mapping[TopicPartition, PartitionFetch],
    ) -> None:
        by_topic: dict[uuid.UUID, ShareFetchTopicResult[Transferable]] = {}
        shown = dict.fromkeys(
            [
                *parsed.named,
                *(tp for tp, f in fetched.items() if f.acquired or f.error is not ErrorCode.none),
            ]
        )
        for tp in shown:
            topic_id = parsed.ids.get(tp) or self._topic_id(tp.topic)
            if topic_id is None:
                continue
            result = fetched.get(tp, PartitionFetch())
            ack = acks.get(tp)
            leader_id, leader_epoch = self._leader_of(tp)
            by_topic.setdefault(topic_id, ShareFetchTopicResult(topic_id)).partitions.append(
                ShareFetchPartitionResult(
                    tp.partition,
                    result.error,
                    result.message,
                    ack.code if ack is not None else ErrorCode.none,
                    ack.message if ack is not None else None,
                    leader_id,
                    leader_epoch,
                    result.records,
                    [(a.first_offset, a.last_offset, a.delivery_count) for a in result.acquired],
                )
            )
        for (topic_id, index), error in parsed.errors.items():
            by_topic.setdefault(topic_id, ShareFetchTopicResult(topic_id)).partitions.append(
                ShareFetchPartitionResult(index, error, acknowledge_error_code=error)
            )
        ctx.respond_pieces(
            encode_share_fetch_response(
                ctx.api_version,
                list(by_topic.values()),
                self.partitions.lock_duration_ms(ctx.body.group_id or ""),
            )
        )

    # -- ShareAcknowledge -------------------------------------------------------------

    def handle_acknowledge(self, ctx: RequestContext) -> None:
        req = ctx.body
        admitted = self._admit(ctx, fetch=False)
        if admitted is None:
            return
        parsed, session = admitted
        acks = self.partitions.acknowledge(req.group_id, req.member_id, parsed.acks)
        if session is None:
            self._close(req.group_id, req.member_id)
        by_topic: dict[uuid.UUID, list[Any]] = {}
        for tp in dict.fromkeys(parsed.named):
            error = acks.get(tp)
            by_topic.setdefault(parsed.ids[tp], []).append(
                ctx.make(
                    "PartitionData",
                    partition_index=tp.partition,
                    error_code=error.code if error is not None else ErrorCode.none,
                    error_message=error.message if error is not None else None,
                    current_leader=self._leader(ctx, tp),
                )
            )
        for (topic_id, index), code in parsed.errors.items():
            by_topic.setdefault(topic_id, []).append(
                ctx.make(
                    "PartitionData",
                    partition_index=index,
                    error_code=code,
                    current_leader=ctx.make("LeaderIdAndEpoch", leader_id=-1, leader_epoch=-1),
                )
            )
        ctx.respond(
            ctx.make_response(
                throttle_time=datetime.timedelta(0),
                error_code=ErrorCode.none,
                acquisition_lock_timeout=datetime.timedelta(
                    milliseconds=self.partitions.lock_duration_ms(req.group_id or "")
                ),
                responses=tuple(
                    ctx.make("ShareAcknowledgeTopicResponse", topic_id=t, partitions=tuple(ps))
                    for t, ps in by_topic.items()
                ),
                node_endpoints=(),
            )
        )

    # -- helpers ----------------------------------------------------------------------

    def _topic_id(self, topic: str) -> uuid.UUID | None:
        info = self.cache.snapshot.topics.get(topic)
        return info.topic_id if info is not None else None

    def _leader_of(self, tp: TopicPartition) -> tuple[int, int]:
        """The partition's leader and leader epoch as the metadata cache knows them."""
        info = self.cache.snapshot.topics.get(tp.topic)
        part = info.partitions.get(tp.partition) if info is not None else None
        return (part.leader, part.leader_epoch) if part is not None else (-1, -1)

    def _leader(self, ctx: RequestContext, tp: TopicPartition) -> Any:
        leader_id, leader_epoch = self._leader_of(tp)
        return ctx.make("LeaderIdAndEpoch", leader_id=leader_id, leader_epoch=leader_epoch)

    @staticmethod
    def _top_error(ctx: RequestContext, error: ErrorCode, message: str | None) -> None:
        ctx.respond(
            ctx.make_response(
                throttle_time=datetime.timedelta(0),
                error_code=error,
                error_message=message,
                acquisition_lock_timeout=datetime.timedelta(0),
                responses=(),
                node_endpoints=(),
            )
        )
