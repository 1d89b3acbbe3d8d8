"""Partition: a log with its replication state, producer checks and transaction markers.

As leader it tracks each follower's fetch position (Kafka's Replica state), advances the
high watermark to what every in-sync replica has, and changes the ISR: a follower that
caught up joins, one that fell behind for ``replica.lag.time.max.ms`` leaves. The change is
written by the ``alter_isr`` callback (the state znode, at the version the controller sent)
before the ISR in memory changes. As follower it appends what the leader's fetches return
and takes the leader's high watermark.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from kplane.broker.log.log import Log, LogAppendInfo
from kplane.broker.log.producer_state import ProducerInfo, ProducerStateManager
from kplane.protocol.records import (
    BatchHeader,
    EndTxnMarker,
    build_control_batch,
    number_batches,
    read_partial_batches,
    scan_batches,
)


@dataclass(frozen=True, slots=True)
class TopicPartition:
    """A topic name and partition index."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(slots=True)
class FollowerState:
    """A follower as its leader sees it (Kafka's Replica)."""

    log_end_offset: int = -1
    last_caught_up_ms: int = 0
    """When its fetch last reached the leader's log end as it was at the previous fetch."""
    leader_end_at_last_fetch: int = -1
    last_fetch_ms: int = 0


AlterIsr = Callable[["Partition", tuple[int, ...]], int | None]
"""Writes a new ISR for a partition; returns the state's new version, None when refused."""


@dataclass(slots=True)
class ReplicaAssignment:
    """The controller's decision for this partition: leader, epochs, replicas, ISR."""

    leader: int
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()


class Partition:
    """One partition hosted here. Appends are serialized; reads take no lock."""

    def __init__(self, tp: TopicPartition, log: Log, leader_epoch: int = 0) -> None:
        self.tp = tp
        self.log = log
        self.leader_epoch = leader_epoch
        self.leader_id = -1  # set by the ReplicaManager from the controller's decisions
        self.partition_epoch = -1
        self.broker_id = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.followers: dict[int, FollowerState] = {}
        self._lock = log.lock
        self._high_watermark = log.log_end_offset

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id >= 0

    # roles ----------------------------------------------------------------------------
    def make_leader(self, broker_id: int, assignment: ReplicaAssignment) -> None:
        """Lead from now on: followers start caught up if in the ISR (Kafka's makeLeader);
        the high watermark stays, and moves once the followers' fetches show it may."""
        now = _now_ms()
        with self._lock:
            self._assign(broker_id, assignment)
            self.followers = {
                r: FollowerState(last_caught_up_ms=now if r in assignment.isr else 0)
                for r in assignment.replicas
                if r != broker_id
            }
            # Kafka's makeLeader: the new epoch begins at the log end.
            self.log.maybe_assign_epoch_start_offset(
                assignment.leader_epoch, self.log.log_end_offset
            )
            self.maybe_increment_high_watermark()

    def make_follower(self, broker_id: int, assignment: ReplicaAssignment) -> None:
        """Follow ``assignment.leader`` from now on."""
        with self._lock:
            self._assign(broker_id, assignment)
            self.followers = {}
            self._high_watermark = min(self._high_watermark, self.log.log_end_offset)

    def _assign(self, broker_id: int, a: ReplicaAssignment) -> None:
        self.broker_id = broker_id
        self.leader_id = a.leader
        self.leader_epoch = a.leader_epoch
        self.partition_epoch = a.partition_epoch
        self.replicas = a.replicas
        self.isr = a.isr

    # leader: followers, high watermark, ISR ---------------------------------------------
    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int) -> bool:
        """A follower fetched from ``fetch_offset`` (so it has everything below it).
        Returns whether the high watermark moved."""
        now = _now_ms()
        with self._lock:
            state = self.followers.get(replica_id)
            if state is None:
                return False
            leader_end = self.log.log_end_offset
            if fetch_offset >= leader_end:
                state.last_caught_up_ms = now
            elif fetch_offset >= state.leader_end_at_last_fetch >= 0:
                state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
            state.log_end_offset = fetch_offset
            state.leader_end_at_last_fetch = leader_end
            state.last_fetch_ms = now
            return self.maybe_increment_high_watermark()

    def maybe_increment_high_watermark(self) -> bool:
        """Move the high watermark to the smallest log end of the in-sync replicas (never
        back); returns whether it moved."""
        with self._lock:
            new = self.log.log_end_offset
            for replica in self.isr:
                if replica != self.broker_id:
                    state = self.followers.get(replica)
                    new = min(new, state.log_end_offset if state else -1)
            if new > self._high_watermark:
                self._high_watermark = new
                return True
            return False

    def maybe_expand_isr(self, replica_id: int, alter_isr: AlterIsr) -> bool:
        """Add a follower that has caught up to the high watermark to the ISR."""
        with self._lock:
            state = self.followers.get(replica_id)
            if (
                state is None
                or replica_id in self.isr
                or state.log_end_offset < self._high_watermark
            ):
                return False
            return self._alter_isr((*self.isr, replica_id), alter_isr)

    def maybe_shrink_isr(self, max_lag_ms: int, alter_isr: AlterIsr) -> bool:
        """Drop followers that have not caught up for ``max_lag_ms`` from the ISR."""
        now = _now_ms()
        with self._lock:
            if not self.is_leader:
                return False
            lagging = {
                r
                for r in self.isr
                if r != self.broker_id
                and (state := self.followers.get(r)) is not None
                and now - state.last_caught_up_ms > max_lag_ms
            }
            if not lagging:
                return False
            return self._alter_isr(tuple(r for r in self.isr if r not in lagging), alter_isr)

    def _alter_isr(self, isr: tuple[int, ...], alter_isr: AlterIsr) -> bool:
        version = alter_isr(self, isr)
        if version is None:
            return False
        self.isr = isr
        self.partition_epoch = version
        self.maybe_increment_high_watermark()
        return True

    # follower -------------------------------------------------------------------------
    def append_records_as_follower(
        self, records: bytes, leader_high_watermark: int, leader_log_start: int
    ) -> int:
        """Append what a fetch from the leader returned (offsets as the leader assigned
        them), take the leader's high watermark up to this log's end and its log start
        offset. Returns the new log end offset."""
        with self._lock:
            # A fetch answer may end inside a batch (it is cut at the requested bytes):
            # the whole batches go in, their CRCs checked; the rest comes with the next one.
            whole = read_partial_batches(records) if records else []
            if whole:
                end = whole[-1].position + whole[-1].size
                complete = bytes(memoryview(records)[:end]) if end < len(records) else records
                self.log.append_as_follower(complete, scan_batches(complete))
            self._high_watermark = max(
                self._high_watermark, min(leader_high_watermark, self.log.log_end_offset)
            )
            if leader_log_start > self.log.log_start_offset:
                self.log.maybe_increment_log_start_offset(
                    min(leader_log_start, self._high_watermark)
                )
            return self.log.log_end_offset

    def divergence_offset(self, leader_epoch: int, end_offset: int) -> int:
        """Where OffsetForLeaderEpoch's answer says this log must be cut (Kafka's rule): at
        the leader's end of the epoch, or, when the leader knows only an older epoch, at the
        earlier of its end and this log's end of that epoch; without an answer (-1), at the
        high watermark; never past this log's end."""
        with self._lock:
            if leader_epoch < 0 or end_offset < 0:
                return self._high_watermark
            target = end_offset
            if leader_epoch < self.log.latest_epoch:
                _epoch, ours = self.log.end_offset_for_epoch(leader_epoch)
                if ours >= 0:
                    target = min(target, ours)
            return min(target, self.log.log_end_offset)

    def truncated(self) -> None:
        """The log was cut (``LogManager.truncate_to``): the high watermark follows."""
        with self._lock:
            self._high_watermark = min(self._high_watermark, self.log.log_end_offset)

    @property
    def producer_state(self) -> ProducerStateManager:
        return self.log.producer_state

    def close(self) -> None:
        """Flush and close the log (appends wait for the lock, so none is cut short)."""
        with self._lock:
            self.log.close()

    @property
    def high_watermark(self) -> int:
        """What every in-sync replica has. It moves once an append has updated the
        producer state, so a reader never sees a transaction's batches before the
        transaction holds the last stable offset back."""
        return self._high_watermark

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: the first unstable offset, at most the high watermark. READ_COMMITTED
        reads stop there."""
        hw = self._high_watermark  # first: a transaction begun after it starts past it
        first = self.log.first_unstable_offset
        return hw if first is None else min(first, hw)

    def append_records_as_leader(
        self, records: bytes | memoryview, batches: list[BatchHeader]
    ) -> LogAppendInfo:
        """Assign offsets, check producer sequences and transactions, and append. A retried
        batch is not appended again: its earlier offsets are returned."""
        with self._lock:
            duplicate = self.producer_state.find_duplicate(batches[0])
            if duplicate is not None:
                return LogAppendInfo(
                    duplicate.first_offset, duplicate.last_offset, -1, self.log.log_start_offset
                )
            for batch in batches[1:]:
                self.producer_state.find_duplicate(batch)
            first = self.log.log_end_offset
            next_offset = number_batches(batches, first, self.leader_epoch)
            self.log.append(records, batches)
            for batch in batches:
                self.log.update_producer_state(batch)
            self.maybe_increment_high_watermark()
            return LogAppendInfo(first, next_offset - 1, -1, self.log.log_start_offset)

    def append_txn_marker(
        self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool
    ) -> LogAppendInfo:
        """Write a COMMIT or ABORT marker completing the producer's transaction (Kafka's
        appendRecordsToLeader for a coordinator's marker). KafkaError INVALID_PRODUCER_EPOCH
        for a fenced producer epoch, TRANSACTION_COORDINATOR_FENCED for an older coordinator
        epoch. A producer with no transaction here gets the marker all the same."""
        with self._lock:
            self.producer_state.check_end_txn_marker(producer_id, producer_epoch, coordinator_epoch)
            raw = build_control_batch(
                producer_id, producer_epoch, commit, coordinator_epoch, time.time_ns() // 1_000_000
            )
            batches = scan_batches(raw)
            first = self.log.log_end_offset
            number_batches(batches, first, self.leader_epoch)
            self.log.append(raw, batches)
            self.log.update_producer_state(batches[0], EndTxnMarker(commit, coordinator_epoch))
            self.maybe_increment_high_watermark()
            return LogAppendInfo(first, first, -1, self.log.log_start_offset)

    def active_producers(self) -> list[ProducerInfo]:
        """The producers with state here (DescribeProducers)."""
        with self._lock:
            return self.producer_state.active_producers()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
