"""SharePartition: one share group's view of one topic partition (KIP-932), Kafka's
SharePartition without its I/O.

Records from the share-partition start offset (SPSO) up to the end offset (SPEO, the next
offset never handed out) are in flight, each AVAILABLE, ACQUIRED (by one member, until its
lock expires), ACKNOWLEDGED or ARCHIVED, with a delivery count. Fetching acquires
available records first, then new ones, up to ``max_in_flight`` records past the start
offset; acknowledging settles acquired ones; a record released or unlocked after
``delivery_count_limit`` deliveries is archived. The start offset moves over every settled
record at its head. Records of aborted transactions (read_committed) and control batches
are archived as they are reached, never handed out. Not thread-safe: the caller holds
``lock``.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kplane.protocol.errors import ErrorCode, KafkaError


class RecordState(enum.IntEnum):
    """Kafka's RecordState (the values it stores)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AcknowledgeType(enum.IntEnum):
    """The acknowledge types of ShareFetch and ShareAcknowledge."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


_SETTLED = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


@dataclass(slots=True)
class InFlightRecord:
    state: RecordState
    delivery_count: int
    member_id: str | None = None
    lock_deadline_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class FetchedBatch:
    """What acquisition needs of one batch the log returned."""

    base_offset: int
    last_offset: int
    aborted: bool = False
    """A control batch, or (read_committed) a batch of an aborted transaction."""


@dataclass(frozen=True, slots=True)
class AcquiredRecords:
    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class AcknowledgementBatch:
    first_offset: int
    last_offset: int
    types: tuple[int, ...]
    """One type for the whole range, or one per offset."""


class SharePartition:
    """The in-flight records of one (group, partition) and what may happen to them."""

    def __init__(
        self,
        start_offset: int,
        *,
        delivery_count_limit: int,
        max_in_flight: int,
        records: Iterable[tuple[int, int, RecordState, int]] = (),
        leader_epoch: int = -1,
        state_epoch: int = 0,
    ) -> None:
        self.start_offset = start_offset
        self.end_offset = start_offset
        self.delivery_count_limit = delivery_count_limit
        self.max_in_flight = max_in_flight
        self.leader_epoch = leader_epoch
        self.state_epoch = state_epoch
        """The group's state epoch this state was loaded under (Kafka's stateEpoch)."""
        self.lock = threading.Lock()
        self.records: dict[int, InFlightRecord] = {}
        for first, last, state, count in records:
            for offset in range(max(first, start_offset), last + 1):
                self.records[offset] = InFlightRecord(state, count)
            self.end_offset = max(self.end_offset, last + 1)
        self.dirty = False
        """Changed since the state was last stored."""
        self.stored = True
        """Whether the store holds a document of this state (False for a new one)."""
        self._available_from = start_offset
        """No record before this offset is available (a hint, so a fetch need not look
        through every record in flight)."""
        self._locks_until = float("inf")
        """No lock expires before this time (a lower bound)."""
        self._advance()

    # -- fetching ---------------------------------------------------------------------

    def next_fetch_offset(self) -> int:
        """Where a fetch reads from: the first available record, else the end offset."""
        for offset in range(max(self.start_offset, self._available_from), self.end_offset):
            record = self.records.get(offset)
            if record is not None and record.state is RecordState.AVAILABLE:
                self._available_from = offset
                return offset
        self._available_from = self.end_offset
        return self.end_offset

    def can_acquire(self, fetchable_end: int) -> bool:
        """Whether a fetch would acquire something, the log being readable below
        ``fetchable_end``."""
        if self.next_fetch_offset() < self.end_offset:
            return True
        return self.end_offset < fetchable_end and self._room()

    def _room(self) -> bool:
        return self.end_offset - self.start_offset < self.max_in_flight

    def acquire(
        self,
        member_id: str,
        batches: Sequence[FetchedBatch],
        max_records: int,
        lock_deadline_ms: float,
    ) -> list[AcquiredRecords]:
        """Acquire for ``member_id`` the available and new records of ``batches`` (in
        offset order), whole batches at a time until ``max_records`` are acquired."""
        acquired: list[tuple[int, int]] = []
        for batch in batches:
            if len(acquired) >= max_records:
                break
            for offset in range(max(batch.base_offset, self.start_offset), batch.last_offset + 1):
                if offset >= self.end_offset:
                    if not self._room():
                        break
                    self.end_offset = offset + 1
                    if batch.aborted:
                        self.records[offset] = InFlightRecord(RecordState.ARCHIVED, 0)
                        self.dirty = True
                        continue
                    record = self.records[offset] = InFlightRecord(RecordState.AVAILABLE, 0)
                else:
                    found = self.records.get(offset)
                    if found is None or found.state is not RecordState.AVAILABLE:
                        continue
                    record = found
                record.state = RecordState.ACQUIRED
                record.delivery_count += 1
                record.member_id = member_id
                record.lock_deadline_ms = lock_deadline_ms
                acquired.append((offset, record.delivery_count))
        if acquired:
            self._locks_until = min(self._locks_until, lock_deadline_ms)
        self._advance()
        return _ranges(acquired)

    # -- settling ---------------------------------------------------------------------

    def acknowledge(
        self, member_id: str, batches: Sequence[AcknowledgementBatch], renew_deadline_ms: float
    ) -> None:
        """Settle records ``member_id`` holds; INVALID_RECORD_STATE (nothing changed) when
        one is not acquired by it, INVALID_REQUEST for a malformed batch."""
        changes: list[tuple[int, AcknowledgeType]] = []
        for batch in batches:
            span = batch.last_offset - batch.first_offset + 1
            if span <= 0 or len(batch.types) not in (1, span):
                raise KafkaError(ErrorCode.invalid_request, "bad acknowledgement batch")
            for i, offset in enumerate(range(batch.first_offset, batch.last_offset + 1)):
                raw = batch.types[0] if len(batch.types) == 1 else batch.types[i]
                try:
                    kind = AcknowledgeType(raw)
                except ValueError:
                    raise KafkaError(
                        ErrorCode.invalid_request, f"unknown acknowledge type {raw}"
                    ) from None
                record = self.records.get(offset)
                if kind is AcknowledgeType.GAP and (record is None or offset < self.start_offset):
                    continue
                if (
                    record is None
                    or record.state is not RecordState.ACQUIRED
                    or record.member_id != member_id
                ):
                    raise KafkaError(
                        ErrorCode.invalid_record_state,
                        f"offset {offset} is not acquired by member {member_id}",
                    )
                changes.append((offset, kind))
        for offset, kind in changes:
            record = self.records[offset]
            if kind is AcknowledgeType.RENEW:
                record.lock_deadline_ms = renew_deadline_ms
                continue
            if kind is AcknowledgeType.ACCEPT:
                record.state = RecordState.ACKNOWLEDGED
            elif kind is AcknowledgeType.RELEASE:
                self._release(offset, record)
            else:  # REJECT, GAP
                record.state = RecordState.ARCHIVED
            record.member_id = None
            self.dirty = True
        self._advance()

    def _release(self, offset: int, record: InFlightRecord) -> None:
        if record.delivery_count >= self.delivery_count_limit:
            record.state = RecordState.ARCHIVED
        else:
            record.state = RecordState.AVAILABLE
            self._available_from = min(self._available_from, offset)
        record.member_id = None
        self.dirty = True

    def release_member(self, member_id: str) -> int:
        """Every record ``member_id`` holds goes back (a member left, its session closed);
        returns how many."""
        released = 0
        for offset, record in self.records.items():
            if record.state is RecordState.ACQUIRED and record.member_id == member_id:
                self._release(offset, record)
                released += 1
        self._advance()
        return released

    def expire_locks(self, now_ms: float) -> int:
        """Acquired records whose lock expired go back; returns how many."""
        if now_ms < self._locks_until:
            return 0
        expired = 0
        self._locks_until = float("inf")
        for offset, record in self.records.items():
            if record.state is not RecordState.ACQUIRED:
                continue
            if record.lock_deadline_ms <= now_ms:
                self._release(offset, record)
                expired += 1
            else:
                self._locks_until = min(self._locks_until, record.lock_deadline_ms)
        if expired:
            self._advance()
        return expired

    def move_start(self, offset: int) -> None:
        """The log starts at ``offset`` now (retention, DeleteRecords): what is before it
        is gone."""
        if offset <= self.start_offset:
            return
        for old in range(self.start_offset, min(offset, self.end_offset)):
            self.records.pop(old, None)
        self.start_offset = offset
        self.end_offset = max(self.end_offset, offset)
        self.dirty = True
        self._advance()

    def _advance(self) -> None:
        while self.start_offset < self.end_offset:
            record = self.records.get(self.start_offset)
            if record is not None and record.state not in _SETTLED:
                break
            self.records.pop(self.start_offset, None)
            self.start_offset += 1
            self.dirty = True

    # -- the stored form --------------------------------------------------------------

    def state_batches(self) -> list[tuple[int, int, RecordState, int]]:
        """The in-flight records as (first, last, state, delivery count) runs; an acquired
        record is stored available (its lock does not outlive this broker)."""
        runs: list[tuple[int, int, RecordState, int]] = []
        for offset in range(self.start_offset, self.end_offset):
            record = self.records.get(offset)
            if record is None:
                continue
            state = RecordState.AVAILABLE if record.state is RecordState.ACQUIRED else record.state
            last = runs[-1] if runs else None
            if (
                last is not None
                and last[1] == offset - 1
                and last[2:] == (state, record.delivery_count)
            ):
                runs[-1] = (last[0], offset, state, record.delivery_count)
            else:
                runs.append((offset, offset, state, record.delivery_count))
        return runs

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "start_offset": self.start_offset,
            "leader_epoch": self.leader_epoch,
            "state_epoch": self.state_epoch,
            "state_batches": [[f, last, int(s), c] for f, last, s, c in self.state_batches()],
        }

    def count(self, state: RecordState) -> int:
        return sum(1 for r in self.records.values() if r.state is state)


def _ranges(acquired: list[tuple[int, int]]) -> list[AcquiredRecords]:
    """Consecutive offsets with one delivery count as AcquiredRecords."""
    out: list[AcquiredRecords] = []
    for offset, count in acquired:
        last = out[-1] if out else None
        if last is not None and last.last_offset == offset - 1 and last.delivery_count == count:
            out[-1] = AcquiredRecords(last.first_offset, offset, count)
        else:
            out.append(AcquiredRecords(offset, offset, count))
    return out
