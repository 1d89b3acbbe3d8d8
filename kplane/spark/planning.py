"""Planning on the driver: which partitions a read covers, their offsets, the Spark
partitions (offset ranges) to read them in.

``Planner`` owns an event loop and one of kplane's clients; Spark calls a data source from
plain threads, so each call runs its coroutine to completion on that loop
(``run_until_complete``), and the connections stay open between a stream's triggers.
Offsets come from ListOffsets (``Admin.list_offsets``) with the read's isolation level, so
``latest`` is the high watermark, or the last stable offset with read_committed.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import structlog
from pyspark.sql.datasource import InputPartition

from kplane.client.admin import Admin
from kplane.client.kafka_client import KafkaClient
from kplane.common.network.config import ClientConfig
from kplane.protocol.errors import KafkaError
from kplane.spark.options import EARLIEST, LATEST, OffsetSpec, OptionError, ReadOptions
from kplane.spark.worker_logs import quiet_client_logs

log = structlog.get_logger(__name__)

TopicPartition = tuple[str, int]
Offsets = dict[TopicPartition, int]
T = TypeVar("T")

DATA_LOSS_ADVICE = (
    "Some data may have been lost because they are not available in Kafka any more; either "
    "the data was aged out by Kafka or the topic may have been deleted before all the data "
    "in the topic was processed. If you don't want your streaming query to fail on such "
    'cases, set the source option "failOnDataLoss" to "false".'
)


class DataLossError(RuntimeError):
    """Offsets a read was to cover are gone (deleted, out of range, the topic recreated)."""


def report_data_loss(message: str, fail: bool) -> None:
    """Spark's reportDataLoss: raise with ``failOnDataLoss`` true, else one warning."""
    if fail:
        raise DataLossError(f"{message}. {DATA_LOSS_ADVICE}")
    log.warning("data loss, skipped (failOnDataLoss=false)", reason=message)


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """One Spark partition: offsets ``start`` (inclusive) to ``end`` (exclusive) of one
    Kafka partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """{(topic, 0): 23} -> {"topic": {"0": 23}}: Spark's Kafka offset JSON, what a
    streaming query checkpoints."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def from_json(data: Mapping[str, Mapping[str, int]]) -> Offsets:
    """The inverse of :func:`to_json`."""
    return {(t, int(p)): int(o) for t, parts in data.items() for p, o in parts.items()}


def split_ranges(
    ranges: Iterable[OffsetRange],
    min_partitions: int | None = None,
    max_records: int | None = None,
) -> list[OffsetRange]:
    """Non-empty ranges, cut into pieces of at most ``max_records`` offsets, then, while
    fewer than ``min_partitions``, each cut into parts in proportion to its size (at least
    one part each), as Spark's KafkaOffsetRangeCalculator does."""
    pieces = [r for r in ranges if r.size > 0]
    if max_records is not None:
        pieces = [p for r in pieces for p in _cut(r, -(-r.size // max_records))]
    if min_partitions is not None and len(pieces) < min_partitions:
        total = sum(r.size for r in pieces)
        pieces = [
            p for r in pieces for p in _cut(r, max(1, round(r.size / total * min_partitions)))
        ]
    return pieces


def _cut(r: OffsetRange, parts: int) -> list[OffsetRange]:
    parts = min(parts, r.size)
    bounds = [r.start + r.size * i // parts for i in range(parts + 1)]
    return [OffsetRange(r.topic, r.partition, a, b) for a, b in itertools.pairwise(bounds)]


def rate_limit(
    start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], limit: int
) -> Offsets:
    """End offsets at most ``limit`` records past ``start`` in all, shared between the
    partitions in proportion to what each has waiting (a partition with any waiting gets at
    least one, so every one moves)."""
    waiting = {tp: max(0, end - start.get(tp, end)) for tp, end in latest.items()}
    total = sum(waiting.values())
    if total <= limit:
        return dict(latest)
    ends = {}
    for tp, end in latest.items():
        begin = start.get(tp, end)
        share = limit * waiting[tp] / total
        step = int(share) if share >= 1 else (1 if waiting[tp] else 0)
        ends[tp] = min(end, begin + step)
    return ends


class Planner:
    """The driver's view of the cluster for one read: its partitions and their offsets."""

    def __init__(self, options: ReadOptions) -> None:
        quiet_client_logs()
        self.options = options
        self.loop = asyncio.new_event_loop()
        self.client = KafkaClient(ClientConfig.from_properties(options.client))
        self.admin = Admin(self.client)
        self._started = False

    def run(self, work: Callable[[], Awaitable[T]]) -> T:
        """Run ``work`` on this planner's loop (connecting first)."""

        async def call() -> T:
            if not self._started:
                await self.client.start()
                self._started = True
            return await work()

        return self.loop.run_until_complete(call())

    def close(self) -> None:
        """Close the connections and the loop."""
        try:
            self.loop.run_until_complete(self.client.close())
        finally:
            self.loop.close()

    # partitions ------------------------------------------------------------------------
    async def partitions(self) -> list[TopicPartition]:
        """The partitions the read covers now: of the subscribed topics that exist, of the
        topics matching the pattern (internal ones excluded, as Kafka's consumer does), or
        the assigned ones."""
        options = self.options
        if options.strategy == "assign":
            return list(options.assigned)
        if options.strategy == "subscribe":
            cluster = await self.client.refresh_metadata(options.topics, allow_auto_create=False)
            return sorted(
                (topic, p) for topic in options.topics for p in cluster.topics.get(topic, {})
            )
        pattern = re.compile(options.pattern)
        described = await self.admin.describe_topics()
        return sorted(
            (t.name, p.partition)
            for t in described
            if t.error is None and not t.internal and pattern.fullmatch(t.name)
            for p in t.partitions
        )

    # offsets ---------------------------------------------------------------------------
    async def list_offsets(self, wanted: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """ListOffsets for ``{tp: timestamp}`` (-2 earliest, -1 latest, else ms): the offset
        of each (-1 where no record has that timestamp or a later one); retried
        ``fetchOffset.numRetries`` times ``fetchOffset.retryIntervalMs`` apart."""
        if not wanted:
            return {}
        attempts = self.options.fetch_offset_retries + 1
        for attempt in range(attempts):
            try:
                found = await self.admin.list_offsets(wanted, self.options.isolation_level)
                return {tp: offset for tp, (offset, _) in found.items()}
            except KafkaError as exc:
                if attempt + 1 >= attempts or not exc.code.retriable:
                    raise
                await asyncio.sleep(self.options.fetch_offset_retry_interval_ms / 1000.0)
        raise AssertionError("unreachable")

    async def resolve(self, spec: OffsetSpec, partitions: list[TopicPartition]) -> Offsets:
        """The offsets ``spec`` names for ``partitions``. Offsets JSON must name exactly
        these partitions (as Spark's source demands); a start by timestamp with no record at
        or after it is an error (or latest, with startingOffsetsByTimestampStrategy=latest);
        an end by timestamp with none is latest."""
        if spec.kind in ("earliest", "latest"):
            point = EARLIEST if spec.kind == "earliest" else LATEST
            return await self.list_offsets(dict.fromkeys(partitions, point))
        if spec.kind in ("offsets", "timestamps") and set(spec.offsets) != set(partitions):
            raise OptionError(
                "offsets JSON must name every partition the read covers (use -2 for earliest, "
                f"-1 for latest): named {sorted(spec.offsets)}, covered {sorted(partitions)}"
            )
        if spec.kind == "offsets":
            given = {tp: o for tp, o in spec.offsets.items() if o >= 0}
            listed = await self.list_offsets({tp: o for tp, o in spec.offsets.items() if o < 0})
            return {**listed, **given}
        wanted = (
            dict.fromkeys(partitions, spec.timestamp)
            if spec.kind == "timestamp"
            else dict(spec.offsets)
        )
        found = await self.list_offsets(wanted)
        missing = [tp for tp, offset in found.items() if offset < 0]
        if missing and spec.no_match == "error":
            raise OptionError(
                f"no record at or after the timestamp asked for in {sorted(missing)} "
                "(startingOffsetsByTimestampStrategy=latest starts those at latest)"
            )
        if missing:
            found.update(await self.list_offsets(dict.fromkeys(missing, LATEST)))
        return found

    async def batch_ranges(self) -> list[OffsetRange]:
        """A batch read's ranges: starting to ending offsets of every covered partition."""
        partitions = await self.partitions()
        start = await self.resolve(self.options.starting, partitions)
        end = await self.resolve(self.options.ending, partitions)
        ranges = []
        for tp in partitions:
            if start[tp] > end[tp]:
                report_data_loss(
                    f"{tp[0]}-{tp[1]}: starting offset {start[tp]} is after the ending "
                    f"offset {end[tp]}",
                    self.options.fail_on_data_loss,
                )
                continue
            ranges.append(OffsetRange(tp[0], tp[1], start[tp], end[tp]))
        return ranges
