"""Partition: a log with its leader state and idempotent-producer checks."""

from __future__ import annotations

from dataclasses import dataclass

from broker.log.log import Log, LogAppendInfo
from broker.log.producer_state import ProducerStateManager
from protocol.records import BatchHeader, number_batches


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

    @property
    def producer_state(self) -> ProducerStateManager:
        return self.log.producer_state

    def close(self) -> None:
        """Flush and close the log (appends wait for the lock, so none is cut short)."""
        with self._lock:
            self.log.close()

    @property
    def high_watermark(self) -> int:
        """Single-replica partitions: everything appended is committed."""
        return self.log.log_end_offset

    def append_records_as_leader(self, records: bytes, batches: list[BatchHeader]) -> LogAppendInfo:
        """Assign offsets, check producer sequences and append. A retried batch is not
        appended again: its earlier offsets are returned."""
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
                self.producer_state.update(batch)
            return LogAppendInfo(first, next_offset - 1, -1, self.log.log_start_offset)
