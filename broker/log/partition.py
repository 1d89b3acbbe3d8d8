"""Partition: a log with its leader state, producer checks and transaction markers."""

from __future__ import annotations

import time
from dataclasses import dataclass

from broker.log.log import Log, LogAppendInfo
from broker.log.producer_state import ProducerInfo, ProducerStateManager
from protocol.records import (
    BatchHeader,
    EndTxnMarker,
    build_control_batch,
    number_batches,
    scan_batches,
)


@dataclass(frozen=True, slots=True)
class TopicPartition:
    """A topic name and partition index."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class Partition:
    """One partition hosted here. Appends are serialized; reads take no lock."""

    def __init__(self, tp: TopicPartition, log: Log, leader_epoch: int = 0) -> None:
        self.tp = tp
        self.log = log
        self.leader_epoch = leader_epoch
        self.leader_id = -1  # set by the ReplicaManager from the controller's decisions
        self.partition_epoch = -1
        self._lock = log.lock
        self._high_watermark = log.log_end_offset

    @property
    def producer_state(self) -> ProducerStateManager:
        return self.log.producer_state

    def close(self) -> None:
        """Flush and close the log (appends wait for the lock, so none is cut short)."""
        with self._lock:
            self.log.close()

    @property
    def high_watermark(self) -> int:
        """Single-replica partitions: everything appended is committed. It moves once an
        append has updated the producer state, so a reader never sees a transaction's
        batches before the transaction holds the last stable offset back."""
        return self._high_watermark

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: the first unstable offset, at most the high watermark. READ_COMMITTED
        reads stop there."""
        hw = self._high_watermark  # first: a transaction begun after it starts past it
        first = self.log.first_unstable_offset
        return hw if first is None else min(first, hw)

    def append_records_as_leader(self, records: bytes, batches: list[BatchHeader]) -> LogAppendInfo:
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
            self._high_watermark = self.log.log_end_offset
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
            self._high_watermark = self.log.log_end_offset
            return LogAppendInfo(first, first, -1, self.log.log_start_offset)

    def active_producers(self) -> list[ProducerInfo]:
        """The producers with state here (DescribeProducers)."""
        with self._lock:
            return self.producer_state.active_producers()
