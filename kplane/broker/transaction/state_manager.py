"""TransactionStateManager: the coordinator's transaction state, durable in the metadata store.

Kafka keeps this state in the compacted ``__transaction_state`` topic; kplane keeps one
document per transactional id in the metadata store (``KafkaMetadataClient``'s transaction
methods), the truth every broker reads. Each write is conditional on the version read, so
a coordinator that lost a transactional id to another broker cannot overwrite what the new
one wrote: it gets NOT_COORDINATOR. A broker taking a transactional id over from another
bumps its coordinator epoch, which fences the markers of the old one at the partitions.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

import structlog

from kplane.broker.metadata.store import BadVersionError, NodeExistsError, StoreError
from kplane.broker.transaction.transaction_metadata import TransactionMetadata
from kplane.protocol.errors import ErrorCode, KafkaError

log = structlog.get_logger(__name__)


class TransactionStore(Protocol):
    """Where transaction state is durable (KafkaMetadataClient's transaction methods)."""

    def read_transaction(self, transactional_id: str) -> tuple[bytes, int] | None: ...

    def write_transaction(self, transactional_id: str, data: bytes, version: int) -> int: ...

    def delete_transaction(self, transactional_id: str, version: int) -> None: ...

    def transactional_ids(self) -> list[str]: ...


def _not_coordinator(transactional_id: str, why: str) -> KafkaError:
    return KafkaError(
        ErrorCode.not_coordinator, f"not the coordinator of {transactional_id!r}: {why}"
    )


class TransactionStateManager:
    """The transactional ids this broker coordinates: loaded on first use, one lock each.

    ``owns(transactional_id)`` says whether this broker coordinates an id now.
    """

    def __init__(
        self, store: TransactionStore, broker_id: int, owns: Callable[[str], bool]
    ) -> None:
        self._store = store
        self._broker_id = broker_id
        self.owns = owns
        self._cache: dict[str, TransactionMetadata] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    @contextmanager
    def locked(self, transactional_id: str) -> Iterator[TransactionMetadata | None]:
        """Hold the id's lock; yields its metadata (loaded, and claimed for this broker when
        another wrote it last), or None when it has none. KafkaError(NOT_COORDINATOR) when
        another broker coordinates it."""
        if not self.owns(transactional_id):
            raise _not_coordinator(transactional_id, "it maps to another broker")
        with self._guard:
            lock = self._locks.setdefault(transactional_id, threading.Lock())
        with lock:
            yield self._load(transactional_id)

    def _load(self, transactional_id: str) -> TransactionMetadata | None:
        if not transactional_id:
            return None  # no state, and no read: the empty id's path is /transactions itself
        cached = self._cache.get(transactional_id)
        if cached is not None:
            return cached
        try:
            found = self._store.read_transaction(transactional_id)
        except StoreError as exc:
            raise KafkaError(
                ErrorCode.coordinator_load_in_progress, f"transaction state unreadable: {exc}"
            ) from exc
        if found is None:
            return None
        try:
            metadata = TransactionMetadata.from_json(transactional_id, *found)
        except ValueError as exc:
            log.warning("stored transaction state ignored", reason=str(exc))
            return None
        if metadata.coordinator != self._broker_id:
            claimed = metadata.copy()
            claimed.coordinator_epoch += 1
            self.put(claimed)  # as this broker, with a higher epoch: the old one is fenced
            log.info(
                "transactional id taken over",
                transactional_id=transactional_id,
                previous_coordinator=metadata.coordinator,
                coordinator_epoch=claimed.coordinator_epoch,
            )
            return claimed
        self._cache[transactional_id] = metadata
        return metadata

    def put(self, metadata: TransactionMetadata) -> None:
        """Store ``metadata`` (a changed copy; the caller holds the id's lock) and make it
        the current state. KafkaError(NOT_COORDINATOR) when another broker wrote the id
        since it was read; COORDINATOR_NOT_AVAILABLE when the store fails."""
        metadata.coordinator = self._broker_id
        tid = metadata.transactional_id
        try:
            metadata.version = self._store.write_transaction(
                tid, metadata.to_json(), metadata.version
            )
        except (BadVersionError, NodeExistsError) as exc:
            self._cache.pop(tid, None)
            raise _not_coordinator(tid, "another broker wrote its state") from exc
        except StoreError as exc:
            self._cache.pop(tid, None)
            raise KafkaError(
                ErrorCode.coordinator_not_available, f"transaction state not stored: {exc}"
            ) from exc
        self._cache[tid] = metadata

    def remove(self, metadata: TransactionMetadata) -> None:
        """Forget an expired transactional id (the caller holds its lock)."""
        tid = metadata.transactional_id
        self._cache.pop(tid, None)
        try:
            self._store.delete_transaction(tid, metadata.version)
        except StoreError as exc:
            log.info("expired transactional id kept", transactional_id=tid, reason=str(exc))

    def owned_ids(self) -> list[str]:
        """Every stored transactional id this broker coordinates now; cached ids it no
        longer coordinates are dropped (another broker loads them)."""
        with self._guard:
            for tid in [t for t in self._cache if not self.owns(t)]:
                self._cache.pop(tid, None)
        try:
            stored = self._store.transactional_ids()
        except StoreError as exc:
            log.warning("transactional ids not listed", reason=str(exc))
            stored = list(self._cache)
        return [tid for tid in stored if self.owns(tid)]

    def cached(self) -> list[TransactionMetadata]:
        """The loaded states (a snapshot; each may change once its lock is released)."""
        return list(self._cache.values())
