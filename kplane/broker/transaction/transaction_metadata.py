"""TransactionMetadata: what the transaction coordinator knows of one ``transactional.id``.

The states and their legal predecessors are Kafka's (``TransactionState.java``). The
metadata is stored as one JSON document per transactional id (see ``state_manager``).
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field

from kplane.broker.log.partition import TopicPartition

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_PRODUCER_EPOCH = 32767
DOC_VERSION = 1


class TransactionState(enum.Enum):
    """Kafka's transaction states, with the names DescribeTransactions answers."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"

    @property
    def is_complete(self) -> bool:
        """No transaction is in progress: a new one may begin."""
        return self in (TransactionState.EMPTY, *COMPLETED)

    @property
    def is_prepare(self) -> bool:
        """Markers are being written."""
        return self in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)


S = TransactionState
COMPLETED = (S.COMPLETE_COMMIT, S.COMPLETE_ABORT)

VALID_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}


class IllegalTransitionError(RuntimeError):
    """A state change Kafka's state machine does not allow."""


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka's exhausted producer epoch: one bump (the fencing one) from the maximum."""
    return epoch >= MAX_PRODUCER_EPOCH - 1


@dataclass(slots=True)
class TransactionMetadata:
    """One transactional id: its producer, epoch, timeout, state and partitions."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState = TransactionState.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_timestamp_ms: int = -1
    txn_last_update_timestamp_ms: int = -1
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = 0
    coordinator: int = -1
    """The broker that wrote this state last; another broker taking over bumps the epoch."""
    version: int = -1
    """The store's version of the document this was read from or written as (-1: none)."""

    def transition(self, to: TransactionState) -> None:
        """Move to ``to``; IllegalTransitionError when Kafka's state machine forbids it."""
        if self.state not in VALID_PREVIOUS[to]:
            raise IllegalTransitionError(
                f"transactional id {self.transactional_id}: {self.state.value} -> {to.value}"
            )
        self.state = to

    @property
    def epoch_exhausted(self) -> bool:
        """The epoch cannot be bumped again: the next InitProducerId takes a new id."""
        return is_epoch_exhausted(self.producer_epoch)

    def copy(self) -> TransactionMetadata:
        """An independent copy to change and store before it replaces this one."""
        return TransactionMetadata.from_json(self.transactional_id, self.to_json(), self.version)

    def to_json(self) -> bytes:
        """The stored document."""
        return json.dumps(
            {
                "version": DOC_VERSION,
                "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch,
                "last_producer_id": self.last_producer_id,
                "last_producer_epoch": self.last_producer_epoch,
                "txn_timeout_ms": self.txn_timeout_ms,
                "state": self.state.value,
                "partitions": sorted([tp.topic, tp.partition] for tp in self.partitions),
                "txn_start_timestamp_ms": self.txn_start_timestamp_ms,
                "txn_last_update_timestamp_ms": self.txn_last_update_timestamp_ms,
                "coordinator_epoch": self.coordinator_epoch,
                "coordinator": self.coordinator,
            }
        ).encode()

    @classmethod
    def from_json(cls, transactional_id: str, data: bytes, version: int) -> TransactionMetadata:
        """Parse a stored document; ValueError when it is not one."""
        try:
            doc = json.loads(data)
            return cls(
                transactional_id=transactional_id,
                producer_id=int(doc["producer_id"]),
                producer_epoch=int(doc["producer_epoch"]),
                txn_timeout_ms=int(doc["txn_timeout_ms"]),
                state=TransactionState(doc["state"]),
                partitions={TopicPartition(str(t), int(p)) for t, p in doc["partitions"]},
                txn_start_timestamp_ms=int(doc["txn_start_timestamp_ms"]),
                txn_last_update_timestamp_ms=int(doc["txn_last_update_timestamp_ms"]),
                last_producer_id=int(doc["last_producer_id"]),
                last_producer_epoch=int(doc["last_producer_epoch"]),
                coordinator_epoch=int(doc["coordinator_epoch"]),
                coordinator=int(doc["coordinator"]),
                version=version,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"transaction state of {transactional_id!r}: {exc}") from exc
