"""LogManager: the partitions this broker hosts."""

from __future__ import annotations

import threading

from broker.log.log import MemoryLog
from broker.log.partition import Partition, TopicPartition


class LogManager:
    """Creates, finds and deletes the Partitions hosted by this broker."""

    def __init__(self) -> None:
        self._partitions: dict[TopicPartition, Partition] = {}
        self._lock = threading.Lock()

    def get(self, tp: TopicPartition) -> Partition | None:
        """The hosted partition, or None."""
        return self._partitions.get(tp)

    def get_or_create(self, tp: TopicPartition) -> Partition:
        """The hosted partition, created empty when missing."""
        partition = self._partitions.get(tp)
        if partition is None:
            with self._lock:
                partition = self._partitions.get(tp)
                if partition is None:
                    partition = Partition(tp, MemoryLog())
                    self._partitions[tp] = partition
        return partition

    def delete(self, tp: TopicPartition) -> bool:
        """Drop one partition and its log; False when it was not hosted."""
        with self._lock:
            return self._partitions.pop(tp, None) is not None

    def partitions(self) -> list[Partition]:
        """Every hosted partition."""
        return list(self._partitions.values())
