"""SharePartitionManager: the share partitions this broker leads (Kafka's
SharePartitionManager), read through the Fetch path's log reads.

A share partition is made when a group first fetches a partition led here: from its stored
state (:mod:`kplane.broker.share.share_state_store`), or at the offset
``share.auto.offset.reset`` names (latest by default, earliest, or ``by_duration:<ISO-8601
duration>``). It is made again when the partition's leader epoch moved (the leadership went
elsewhere and came back: another leader may have written since). A fetch reads whole
batches with :meth:`ReplicaManager.read` from the first record it can acquire, at the
group's ``share.isolation.level``, and acquires records of them; an acknowledgement settles
them. What an acknowledgement or a release changed, and a new share partition's start, is
written before the request is answered.

Each share partition remembers the group's state epoch it was loaded under; a write under
an older one is fenced (FENCED_STATE_EPOCH: AlterShareGroupOffsets or
DeleteShareGroupOffsets moved the epoch on), and the partition is dropped, to be loaded
again. A watch on the group's state epoch marks the group for a look at the next request,
so a leader that is not the group's coordinator hands out no records from before an
alteration.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from kplane.broker.group.group_configs import GroupConfigManager
from kplane.broker.group.share_config import ShareGroupConfig, parse_duration
from kplane.broker.log.partition import Partition, TopicPartition
from kplane.broker.log.transaction_index import AbortedTxn
from kplane.broker.metadata.store import StoreError
from kplane.broker.share.share_partition import (
    AcknowledgementBatch,
    AcquiredRecords,
    FetchedBatch,
    RecordState,
    SharePartition,
)
from kplane.broker.share.share_state_store import (
    FencedStateEpochError,
    ShareStateStore,
    StateEpoch,
)
from kplane.broker.utils.file_region import PiecesEndToEnd, Transferable
from kplane.broker.utils.interval_log import IntervalWarning
from kplane.protocol.errors import ErrorCode, KafkaError
from kplane.protocol.records import (
    BATCH_HEADER,
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    BatchHeader,
)

log = structlog.get_logger(__name__)

READ_UNCOMMITTED = 0
READ_COMMITTED = 1


class ReadOutcome(Protocol):
    """What a log read gives (ReplicaManager's ReadResult)."""

    error: ErrorCode
    views: list[Transferable]
    aborted_transactions: list[AbortedTxn] | None


class LogReader(Protocol):
    """The Fetch path's reads (ReplicaManager)."""

    def leader_partition(self, tp: TopicPartition, current_leader_epoch: int = -1) -> Partition: ...

    def read(
        self,
        tp: TopicPartition,
        offset: int,
        max_bytes: int,
        min_one_batch: bool,
        isolation_level: int = READ_UNCOMMITTED,
        current_leader_epoch: int = -1,
    ) -> ReadOutcome: ...


@dataclass(slots=True)
class PartitionFetch:
    """One partition's part of a ShareFetch answer: ``records`` are the stored batches
    that hold the acquired records, as the log handed them out (bytes, memoryviews or
    file regions, never copied)."""

    error: ErrorCode = ErrorCode.none
    message: str | None = None
    records: list[Transferable] = field(default_factory=list)
    acquired: list[AcquiredRecords] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(len(piece) for piece in self.records)


@dataclass(frozen=True, slots=True)
class ShareOffset:
    """DescribeShareGroupOffsets' view of one partition."""

    start_offset: int
    leader_epoch: int
    lag: int


def now_ms() -> float:
    return time.time() * 1000.0


class SharePartitionManager:
    """Every share partition of this broker, by (group id, partition)."""

    def __init__(
        self,
        replicas: LogReader,
        config: ShareGroupConfig,
        group_configs: GroupConfigManager,
        store: ShareStateStore | None,
        wake: Callable[[TopicPartition], object] = lambda _tp: None,
    ) -> None:
        self._replicas = replicas
        self.config = config
        self._group_configs = group_configs
        self._store = store
        self._wake = wake
        self._partitions: dict[tuple[str, TopicPartition], SharePartition] = {}
        self._epochs: dict[tuple[str, TopicPartition], StateEpoch] = {}
        """The group's state epoch each share partition was loaded under."""
        self._watched: set[str] = set()
        """The groups whose state epoch is watched."""
        self._stale: set[str] = set()
        """Groups whose state epoch moved since the look at it: looked at again next."""
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._not_written = IntervalWarning("share-partition state not written")

    # -- settings ---------------------------------------------------------------------

    def _setting(self, group_id: str, name: str, default: str) -> str:
        return self._group_configs.overrides(group_id).get(name, default)

    def lock_duration_ms(self, group_id: str) -> int:
        return int(
            self._setting(
                group_id, "share.record.lock.duration.ms", str(self.config.record_lock_duration_ms)
            )
        )

    def isolation_level(self, group_id: str) -> int:
        level = self._setting(group_id, "share.isolation.level", "read_uncommitted")
        return READ_COMMITTED if level.lower() == "read_committed" else READ_UNCOMMITTED

    def _initial_offset(self, group_id: str, partition: Partition) -> int:
        reset = self._setting(group_id, "share.auto.offset.reset", "latest").strip().lower()
        log_ = partition.log
        if reset == "earliest":
            return log_.log_start_offset
        if reset.startswith("by_duration:"):
            duration = parse_duration(reset.partition(":")[2])
            if duration is not None:
                since = now_ms() - duration / datetime.timedelta(milliseconds=1)
                found = log_.offset_for_timestamp(int(since))
                return found[0] if found is not None else partition.high_watermark
        return partition.high_watermark

    # -- share partitions -------------------------------------------------------------

    def _share_partition(
        self, group_id: str, tp: TopicPartition
    ) -> tuple[SharePartition, Partition]:
        """The share partition of ``group_id`` on ``tp``, made or loaded when new here or
        when the leader epoch moved; KafkaError when ``tp`` is not led here."""
        key = (group_id, tp)
        if self._stale and group_id in self._stale:
            self._look_at_state_epoch(group_id)
        try:
            partition = self._replicas.leader_partition(tp)
        except KafkaError:
            with self._lock:  # led elsewhere now: a later leadership reads the stored state
                self._partitions.pop(key, None)
            raise
        with self._lock:
            found = self._partitions.get(key)
        if found is not None and found.leader_epoch == partition.leader_epoch:
            return found, partition
        made, epoch = self._load(group_id, tp, partition)
        with self._lock:
            found = self._partitions.get(key)
            if found is not None and found.leader_epoch == partition.leader_epoch:
                return found, partition
            self._partitions[key] = made
            if epoch is not None:
                self._epochs[key] = epoch
        return made, partition

    def _state_epoch_moved(self, group_id: str) -> None:
        """The store's watch: the group's state epoch moved on (or its state went)."""
        with self._lock:
            self._stale.add(group_id)

    def _look_at_state_epoch(self, group_id: str) -> None:
        """Drop the group's share partitions loaded under an older state epoch (they are
        loaded again when next used)."""
        with self._lock:
            if group_id not in self._stale:
                return
            self._stale.discard(group_id)
        try:
            current = self._store.state_epoch(group_id, create=False) if self._store else None
        except (StoreError, ValueError) as exc:
            with self._lock:
                self._stale.add(group_id)
            raise KafkaError(
                ErrorCode.coordinator_load_in_progress, f"share state unreadable: {exc}"
            ) from exc
        with self._lock:
            gone = [
                (k, self._partitions[k])
                for k, e in self._epochs.items()
                if k[0] == group_id and e != current and k in self._partitions
            ]
        self._fence(gone)

    def _fence(self, gone: Iterable[tuple[tuple[str, TopicPartition], SharePartition]]) -> None:
        """Drop share partitions whose state epoch moved on (each only while it is still
        the one here, not one loaded again since)."""
        with self._lock:
            for key, sp in gone:
                if self._partitions.get(key) is not sp:
                    continue
                del self._partitions[key]
                self._epochs.pop(key, None)
                log.info(
                    "share partition fenced: its state epoch moved on, it is loaded again",
                    group=key[0],
                    partition=str(key[1]),
                )

    def _load(
        self, group_id: str, tp: TopicPartition, partition: Partition
    ) -> tuple[SharePartition, StateEpoch | None]:
        """The share partition as stored (else new), and the state epoch it is loaded
        under (the group's epoch is watched first, so no later move goes unseen)."""
        epoch = None
        try:
            if self._store is not None:
                with self._lock:
                    watch = group_id not in self._watched
                    self._watched.add(group_id)
                if watch:
                    try:
                        self._store.watch_group(group_id, self._state_epoch_moved)
                    except StoreError:
                        with self._lock:
                            self._watched.discard(group_id)
                        raise
                epoch = self._store.state_epoch(group_id)
            doc = self._store.read(group_id, tp) if self._store is not None else None
        except (StoreError, ValueError) as exc:
            raise KafkaError(
                ErrorCode.coordinator_load_in_progress, f"share state unreadable: {exc}"
            ) from exc
        limits: dict[str, Any] = {
            "delivery_count_limit": self.config.delivery_count_limit,
            "max_in_flight": self.config.partition_max_record_locks,
            "leader_epoch": partition.leader_epoch,
            "state_epoch": epoch.epoch if epoch is not None else 0,
        }
        if doc is not None:
            made = SharePartition(
                int(doc["start_offset"]),
                records=[
                    (int(f), int(last), RecordState(int(s)), int(c))
                    for f, last, s, c in doc.get("state_batches", ())
                ],
                **limits,
            )
            log.info(
                "share partition loaded",
                group=group_id,
                partition=str(tp),
                start_offset=made.start_offset,
                in_flight=len(made.records),
            )
        else:
            made = SharePartition(self._initial_offset(group_id, partition), **limits)
            made.dirty, made.stored = True, False
            log.info(
                "share partition initialized",
                group=group_id,
                partition=str(tp),
                start_offset=made.start_offset,
            )
        return made, epoch

    def partitions_of(self, group_id: str) -> list[tuple[TopicPartition, SharePartition]]:
        with self._lock:
            return [(tp, sp) for (g, tp), sp in self._partitions.items() if g == group_id]

    # -- ShareFetch and ShareAcknowledge ----------------------------------------------

    def acknowledge(
        self,
        group_id: str,
        member_id: str,
        acks: Mapping[TopicPartition, Sequence[AcknowledgementBatch]],
    ) -> dict[TopicPartition, KafkaError | None]:
        """Settle acknowledged records; each partition's refusal, None where accepted."""
        out: dict[TopicPartition, KafkaError | None] = {}
        touched: list[tuple[tuple[str, TopicPartition], SharePartition]] = []
        deadline = now_ms() + self.lock_duration_ms(group_id)
        for tp, batches in acks.items():
            try:
                sp, _partition = self._share_partition(group_id, tp)
                with sp.lock:
                    sp.acknowledge(member_id, batches, deadline)
                touched.append(((group_id, tp), sp))
                out[tp] = None
            except KafkaError as exc:
                out[tp] = exc
        for _g, tp in self._persist(touched):
            out[tp] = KafkaError(
                ErrorCode.fenced_state_epoch,
                f"The share-partition state of group {group_id} was initialized again.",
            )
        for (_g, tp), sp in touched:
            if sp.count(RecordState.AVAILABLE):
                self._wake(tp)
        return out

    def fetch(
        self,
        group_id: str,
        member_id: str,
        tps: Sequence[TopicPartition],
        max_bytes: int,
        max_records: int,
    ) -> dict[TopicPartition, PartitionFetch]:
        """Acquire records of ``tps`` for ``member_id``: at most ``max_records`` in all
        (whole batches), reading up to ``max_bytes`` (at least one batch)."""
        out: dict[TopicPartition, PartitionFetch] = {}
        touched: list[tuple[tuple[str, TopicPartition], SharePartition]] = []
        isolation = self.isolation_level(group_id)
        deadline = now_ms() + self.lock_duration_ms(group_id)
        records_left, bytes_left = max(max_records, 1), max(max_bytes, 1)
        for tp in tps:
            if records_left <= 0 or bytes_left <= 0:
                break
            try:
                sp, partition = self._share_partition(group_id, tp)
                with sp.lock:
                    result = self._acquire(
                        sp, partition, tp, member_id, isolation, deadline, records_left, bytes_left
                    )
                touched.append(((group_id, tp), sp))
            except KafkaError as exc:
                result = PartitionFetch(exc.code, exc.message)
            out[tp] = result
            records_left -= sum(a.last_offset - a.first_offset + 1 for a in result.acquired)
            bytes_left -= result.size
        self._persist(touched, new_only=True)
        return out

    def _acquire(
        self,
        sp: SharePartition,
        partition: Partition,
        tp: TopicPartition,
        member_id: str,
        isolation: int,
        deadline: float,
        max_records: int,
        max_bytes: int,
    ) -> PartitionFetch:
        sp.expire_locks(now_ms())
        sp.move_start(partition.log.log_start_offset)
        offset = sp.next_fetch_offset()
        result = self._replicas.read(tp, offset, max_bytes, True, isolation, sp.leader_epoch)
        if result.error is ErrorCode.offset_out_of_range:
            return PartitionFetch()  # at the log's end: nothing yet
        if result.error is not ErrorCode.none:
            return PartitionFetch(result.error)
        if not result.views:
            return PartitionFetch()
        read = _LogRead(result.views)
        headers = read.batch_headers()
        aborted = _aborted_check(result.aborted_transactions)
        acquired = sp.acquire(
            member_id,
            [
                FetchedBatch(h.base_offset, h.last_offset, h.is_control or aborted(h))
                for h in headers
            ],
            max_records,
            deadline,
        )
        if not acquired:
            return PartitionFetch()
        first, last = acquired[0].first_offset, acquired[-1].last_offset
        used = [h for h in headers if h.last_offset >= first and h.base_offset <= last]
        end = used[-1].position + used[-1].size
        return PartitionFetch(records=read.cut(used[0].position, end), acquired=acquired)

    def acquirable(self, group_id: str, tps: Sequence[TopicPartition]) -> bool:
        """Whether a fetch of ``tps`` would acquire something now (or answer an error)."""
        isolation = self.isolation_level(group_id)
        for tp in tps:
            try:
                sp, partition = self._share_partition(group_id, tp)
            except KafkaError:
                return True
            end = (
                partition.last_stable_offset
                if isolation == READ_COMMITTED
                else partition.high_watermark
            )
            with sp.lock:
                sp.expire_locks(now_ms())
                if sp.can_acquire(end):
                    return True
        return False

    # -- members and groups -----------------------------------------------------------

    def release(
        self, group_id: str, member_id: str, tps: Sequence[TopicPartition] | None = None
    ) -> int:
        """The records ``member_id`` holds (of ``tps``, or everywhere) go back to the group;
        returns how many."""
        wanted = None if tps is None else set(tps)
        touched = [
            ((group_id, tp), sp)
            for tp, sp in self.partitions_of(group_id)
            if wanted is None or tp in wanted
        ]
        released = 0
        for _key, sp in touched:
            with sp.lock:
                released += sp.release_member(member_id)
        self._persist(touched)
        for (_g, tp), _sp in touched:
            self._wake(tp)
        if released:
            log.info("share records released", group=group_id, member=member_id, records=released)
        return released

    # -- the admin APIs ----------------------------------------------------------------

    def stored_offsets(
        self, group_id: str, tps: Sequence[TopicPartition] | None
    ) -> dict[TopicPartition, ShareOffset]:
        """The start offset and lag of each of ``tps`` (None: every partition with state),
        as stored (start offset -1 where none is); lag only where the partition is led
        here (else -1): records past the start offset below the high watermark, less
        those already settled."""
        if self._store is None:
            return {}
        wanted = list(tps) if tps is not None else self._store.partitions(group_id)
        out = {}
        for tp in wanted:
            doc = self._store.read(group_id, tp)
            if doc is None:
                out[tp] = ShareOffset(-1, -1, -1)
                continue
            start = int(doc["start_offset"])
            settled = sum(
                int(last) - int(first) + 1
                for first, last, state, _count in doc.get("state_batches", ())
                if int(state) in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
            )
            try:
                partition = self._replicas.leader_partition(tp)
                lag = max(partition.high_watermark - start - settled, 0)
            except KafkaError:
                lag = -1
            out[tp] = ShareOffset(start, int(doc.get("leader_epoch", -1)), lag)
        return out

    def alter_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Start each partition afresh at its offset (the group is empty), the group's
        state epoch moved on: the leaders of its partitions load them again."""
        self._initialize(group_id, offsets)

    def delete_offsets(self, group_id: str, tps: Sequence[TopicPartition]) -> None:
        """Forget the state of ``tps`` (the group is empty), the group's state epoch
        moved on: the next fetch starts at share.auto.offset.reset."""
        self._initialize(group_id, dict.fromkeys(tps))

    def _initialize(self, group_id: str, starts: Mapping[TopicPartition, int | None]) -> None:
        self._forget(group_id)
        if self._store is not None:
            with self._write_lock:
                epoch = self._store.initialize(group_id, starts)
            log.info("share group state epoch moved on", group=group_id, state_epoch=epoch)

    def stored_partitions(self, group_id: str) -> list[TopicPartition]:
        return self._store.partitions(group_id) if self._store is not None else []

    def _forget(self, group_id: str) -> None:
        """Drop the group's share partitions here (each loaded again when next used)."""
        with self._lock:
            for key in [k for k in self._partitions if k[0] == group_id]:
                del self._partitions[key]
                self._epochs.pop(key, None)

    def delete_group(self, group_id: str) -> None:
        """A share group was deleted: its share partitions and stored state go."""
        self._forget(group_id)
        if self._store is not None:
            with self._write_lock:
                self._store.delete(group_id)

    def topic_deleted(self, topic: str) -> None:
        """``topic`` is gone: every group's share partitions of it and their stored state
        (a topic made again under the name starts afresh)."""
        with self._lock:
            for key in [k for k in self._partitions if k[1].topic == topic]:
                del self._partitions[key]
                self._epochs.pop(key, None)
        if self._store is not None:
            with self._write_lock:
                self._store.delete_topic(topic)
        log.info("share-partition state of a deleted topic removed", topic=topic)

    def _persist(
        self,
        touched: Sequence[tuple[tuple[str, TopicPartition], SharePartition]],
        new_only: bool = False,
    ) -> list[tuple[str, TopicPartition]]:
        """Write the state of the share partitions that changed, together (``new_only``:
        of those the store has no document of yet; a fetch alone changes nothing that
        cannot be found again: locks that expired, archived control records and aborted
        transactions, a log start that moved, which go with the next write). Returns the
        share partitions whose changes were not written because their state epoch moved
        on (fenced: dropped, to be loaded again)."""
        if self._store is None:
            return []
        fenced: list[tuple[str, TopicPartition]] = []
        with self._write_lock:
            docs = {}
            new = set()
            epochs = {}
            for key, sp in touched:
                with self._lock:
                    epoch = self._epochs.get(key)
                    here = self._partitions.get(key) is sp
                if epoch is None or not here:  # fenced meanwhile: its changes are not written
                    if sp.dirty and not (new_only and sp.stored):
                        fenced.append(key)
                    continue
                with sp.lock:
                    if sp.dirty and not (new_only and sp.stored):
                        docs[key] = sp.to_json()
                        epochs[key] = epoch
                        if not sp.stored:
                            new.add(key)
                        sp.dirty, sp.stored = False, True
            written = dict(touched)
            while docs:
                try:
                    self._store.write(docs, epochs, new)
                    break
                except FencedStateEpochError as exc:
                    gone = [k for k in docs if k[0] == exc.group_id] or list(docs)
                    for key in gone:
                        del docs[key]
                    fenced += gone
                    self._fence((key, written[key]) for key in gone)
                    with self._lock:
                        self._stale.add(exc.group_id)
                except StoreError as exc:
                    for key, sp in touched:
                        if key in docs:
                            sp.dirty, sp.stored = True, key not in new
                    self._not_written.record(error=str(exc))
                    break
        return fenced


_MAGIC_V2 = 2
_HEADER_CHUNK = 4096
"""Bytes read at once for batch headers, the headers of several small batches in one read
(after a batch larger than this, only the next header)."""


class _LogRead(PiecesEndToEnd):
    """A log read whose batches' headers are read a few KiB at a time; its byte ranges
    are handed out as pieces of the same stored bytes or files. Nothing of the records is
    kept or copied into the answer."""

    __slots__ = ()

    def batch_headers(self) -> list[BatchHeader]:
        """The whole batches' headers, positions from the first piece's start; KafkaError
        CORRUPT_MESSAGE for a header the log should never have stored."""
        headers: list[BatchHeader] = []
        position = 0
        chunk, chunk_at, want = b"", 0, _HEADER_CHUNK
        while position + BATCH_HEADER_SIZE <= self.size:
            at = position - chunk_at
            if at + BATCH_HEADER_SIZE > len(chunk):
                chunk, chunk_at, at = self.read(position, want), position, 0
                if len(chunk) < BATCH_HEADER_SIZE:
                    break  # a file cut under the read
            base, length, epoch, magic, *rest = BATCH_HEADER.unpack_from(chunk, at)
            if magic != _MAGIC_V2 or length < MIN_BATCH_LENGTH:
                raise KafkaError(
                    ErrorCode.corrupt_message,
                    f"stored batch at offset {base}: magic {magic}, batchLength {length}",
                )
            size = LOG_OVERHEAD + length
            if position + size > self.size:
                break  # the read ends within this batch
            headers.append(BatchHeader(position, size, base, epoch, magic, *rest))
            position += size
            want = BATCH_HEADER_SIZE if size > _HEADER_CHUNK else _HEADER_CHUNK
        return headers


def _aborted_check(aborted: list[AbortedTxn] | None) -> Callable[[BatchHeader], bool]:
    """Whether a batch belongs to one of the ``aborted`` transactions (read_committed)."""
    if not aborted:
        return lambda _h: False
    by_producer: dict[int, list[AbortedTxn]] = {}
    for txn in aborted:
        by_producer.setdefault(txn.producer_id, []).append(txn)

    def check(h: BatchHeader) -> bool:
        if not h.is_transactional:
            return False
        return any(
            t.first_offset <= h.base_offset <= t.last_offset
            for t in by_producer.get(h.producer_id, ())
        )

    return check
