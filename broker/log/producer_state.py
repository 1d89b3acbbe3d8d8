"""Idempotent producer state per partition: epochs, sequences, and recent batches."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from protocol.errors import ErrorCode, KafkaError
from protocol.records import BatchHeader

INT32_MAX = 2**31 - 1
CACHED_BATCHES = 5  # Kafka keeps the last five batches per producer for duplicate detection


@dataclass(slots=True)
class BatchMetadata:
    """Sequence range of an appended batch and the offsets it got."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass(slots=True)
class ProducerStateEntry:
    """What a partition remembers of one producer id."""

    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=CACHED_BATCHES))

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


def _next_seq(seq: int) -> int:
    return 0 if seq == INT32_MAX else seq + 1


def _last_seq(batch: BatchHeader) -> int:
    return (batch.base_sequence + batch.last_offset_delta) % (INT32_MAX + 1)


class ProducerStateManager:
    """Checks and records the sequence numbers of idempotent producers."""

    def __init__(self) -> None:
        self._producers: dict[int, ProducerStateEntry] = {}

    def find_duplicate(self, batch: BatchHeader) -> BatchMetadata | None:
        """The earlier append of ``batch`` if it is a retry, else None.

        Raises KafkaError for a fenced epoch or a sequence gap.
        """
        if batch.producer_id < 0:
            return None
        entry = self._producers.get(batch.producer_id)
        if entry is None:
            return None
        if batch.producer_epoch < entry.epoch:
            raise KafkaError(
                ErrorCode.invalid_producer_epoch,
                f"producer {batch.producer_id} epoch {batch.producer_epoch} is older than "
                f"the current epoch {entry.epoch}",
            )
        if batch.producer_epoch > entry.epoch:
            if batch.base_sequence != 0:
                raise KafkaError(
                    ErrorCode.out_of_order_sequence_number,
                    f"new epoch {batch.producer_epoch} must start at sequence 0, "
                    f"got {batch.base_sequence}",
                )
            return None
        last = _last_seq(batch)
        for cached in entry.batches:
            if cached.first_seq == batch.base_sequence and cached.last_seq == last:
                return cached
        if entry.batches and batch.base_sequence != _next_seq(entry.last_seq):
            raise KafkaError(
                ErrorCode.out_of_order_sequence_number,
                f"producer {batch.producer_id} sent sequence {batch.base_sequence}, "
                f"expected {_next_seq(entry.last_seq)}",
            )
        return None

    def update(self, batch: BatchHeader) -> None:
        """Record an appended batch (offsets already assigned)."""
        if batch.producer_id < 0:
            return
        entry = self._producers.get(batch.producer_id)
        if entry is None or batch.producer_epoch != entry.epoch:
            entry = ProducerStateEntry(batch.producer_epoch)
            self._producers[batch.producer_id] = entry
        entry.batches.append(
            BatchMetadata(
                batch.base_sequence,
                _last_seq(batch),
                batch.base_offset,
                batch.base_offset + batch.last_offset_delta,
            )
        )
