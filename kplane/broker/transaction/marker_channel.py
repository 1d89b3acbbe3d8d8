"""TransactionMarkerChannelManager: the coordinator's markers to every partition leader.

When a transaction ends, its coordinator asks the leader of each partition in it to write
a COMMIT or ABORT marker (WriteTxnMarkers, API 27), over the inter-broker listener as
Kafka's TransactionMarkerChannelManager does. The leader of ``__consumer_offsets``
partition ``p`` is the group coordinator of the groups mapped to ``p``; its marker makes the
offsets committed in the transaction visible (or drops them). Markers for a partition whose
leader is this broker are written by a direct call of the same function that serves
WriteTxnMarkers. A partition whose leader moved or is down is retried after a backoff until
it is written; a deleted topic needs no marker.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import structlog

from kplane.broker.log.partition import TopicPartition
from kplane.broker.metadata.kafka_store import BrokerRegistration
from kplane.broker.network.broker_channels import BrokerChannelManager
from kplane.broker.utils.timer import SystemTimer
from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode

log = structlog.get_logger(__name__)

RETRY_BACKOFF_MS = 100
NO_LEADER = None
"""``leader_of``: the partition has no live leader now (retried)."""
UNKNOWN_PARTITION = -1
"""``leader_of``: the partition does not exist (its topic was deleted): no marker needed."""

RETRIABLE = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
        ErrorCode.kafka_storage_error,
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_not_available,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.leader_not_available,
    }
)


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """One transaction's marker for some partitions."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partitions: tuple[TopicPartition, ...]


MarkerWriter = Callable[[TxnMarker], dict[TopicPartition, ErrorCode]]


@dataclass(slots=True)
class _Pending:
    marker: TxnMarker
    on_complete: Callable[[], None]
    remaining: set[TopicPartition]
    lock: threading.Lock = field(default_factory=threading.Lock)
    abandoned: bool = False
    completed: bool = False


def build_request(markers: list[TxnMarker]) -> Callable[[int], Any]:
    """A WriteTxnMarkers request for ``markers``, for any version."""

    def build(version: int) -> Any:
        module = api.request_module(ApiKey.WRITE_TXN_MARKERS, version)
        out = []
        for marker in markers:
            topics: dict[str, list[int]] = {}
            for tp in marker.partitions:
                topics.setdefault(tp.topic, []).append(tp.partition)
            out.append(
                api.make(
                    module.WritableTxnMarker,
                    producer_id=marker.producer_id,
                    producer_epoch=marker.producer_epoch,
                    transaction_result=marker.commit,
                    coordinator_epoch=marker.coordinator_epoch,
                    topics=tuple(
                        api.make(
                            module.WritableTxnMarkerTopic, name=name, partition_indexes=tuple(ps)
                        )
                        for name, ps in topics.items()
                    ),
                )
            )
        return api.make(api.request_class(ApiKey.WRITE_TXN_MARKERS, version), markers=tuple(out))

    return build


def response_errors(response: Any) -> dict[TopicPartition, ErrorCode]:
    """Per partition errors of a one-marker WriteTxnMarkers response."""
    out: dict[TopicPartition, ErrorCode] = {}
    for marker in response.markers:
        for topic in marker.topics:
            for p in topic.partitions:
                out[TopicPartition(topic.name, int(p.partition_index))] = ErrorCode(
                    int(p.error_code)
                )
    return out


class TransactionMarkerChannelManager:
    """Writes each ending transaction's markers and calls back when all are written."""

    def __init__(
        self,
        broker_id: int,
        leader_of: Callable[[TopicPartition], int | None],
        registration_of: Callable[[int], BrokerRegistration | None],
        channels: BrokerChannelManager,
        write_local: MarkerWriter,
        timer: SystemTimer,
    ) -> None:
        self._broker_id = broker_id
        self._leader_of = leader_of
        self._registration_of = registration_of
        self._channels = channels
        self._write_local = write_local
        self._timer = timer

    def send(self, marker: TxnMarker, on_complete: Callable[[], None]) -> None:
        """Write ``marker`` at every partition it names; ``on_complete()`` once all are
        written (never, when a newer coordinator fenced this one)."""
        pending = _Pending(marker, on_complete, set(marker.partitions))
        self._dispatch(pending, marker.partitions)

    def _dispatch(self, pending: _Pending, partitions: tuple[TopicPartition, ...]) -> None:
        by_leader: dict[int, list[TopicPartition]] = {}
        results: dict[TopicPartition, ErrorCode] = {}
        for tp in partitions:
            leader = self._leader_of(tp)
            if leader is NO_LEADER:
                results[tp] = ErrorCode.leader_not_available
            elif leader == UNKNOWN_PARTITION:
                results[tp] = ErrorCode.none  # deleted: nothing to mark
            else:
                by_leader.setdefault(leader, []).append(tp)
        if results:
            self._on_results(pending, results)
        for leader, tps in by_leader.items():
            marker = replace(pending.marker, partitions=tuple(tps))
            if leader == self._broker_id:
                self._on_results(pending, self._write_local(marker))
                continue
            registration = self._registration_of(leader)
            if registration is None:
                self._on_results(pending, dict.fromkeys(tps, ErrorCode.leader_not_available))
                continue
            self._channels.send_to(
                registration,
                ApiKey.WRITE_TXN_MARKERS,
                build_request([marker]),
                self._remote_callback(pending, tuple(tps)),
            )

    def _remote_callback(
        self, pending: _Pending, tps: tuple[TopicPartition, ...]
    ) -> Callable[[Any | None, Exception | None], None]:
        def done(response: Any | None, error: Exception | None) -> None:
            if response is None:
                log.info("WriteTxnMarkers failed, retrying", reason=str(error))
                self._on_results(pending, dict.fromkeys(tps, ErrorCode.request_timed_out))
                return
            errors = response_errors(response)
            self._on_results(
                pending, {tp: errors.get(tp, ErrorCode.unknown_server_error) for tp in tps}
            )

        return done

    def _on_results(self, pending: _Pending, results: Mapping[TopicPartition, ErrorCode]) -> None:
        retry: list[TopicPartition] = []
        with pending.lock:
            if pending.abandoned:
                return
            for tp, error in results.items():
                if error is ErrorCode.transaction_coordinator_fenced:
                    pending.abandoned = True
                    log.warning(
                        "markers abandoned: a newer coordinator fenced this one",
                        producer_id=pending.marker.producer_id,
                        partition=str(tp),
                    )
                    return
                if error in RETRIABLE:
                    retry.append(tp)
                    continue
                if error is not ErrorCode.none:
                    log.warning(
                        "transaction marker refused",
                        producer_id=pending.marker.producer_id,
                        partition=str(tp),
                        error=error.name,
                    )
                pending.remaining.discard(tp)
            finished = not pending.remaining and not pending.completed
            pending.completed |= finished
        if retry:
            self._timer.schedule(RETRY_BACKOFF_MS, lambda: self._dispatch(pending, tuple(retry)))
        if finished:
            pending.on_complete()
