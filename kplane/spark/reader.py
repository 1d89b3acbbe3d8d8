"""The batch reader and the streaming reader.

Spark calls ``partitions`` (and a stream's offset methods) in a Python worker on the
driver, pickles the reader with the planned ranges to the executors and calls ``read``
there. A stream's offsets are Spark's Kafka offset JSON, ``{"topic": {"0": 23}}``: Spark
writes them to the query's checkpoint, so a restarted query plans from the last committed
end on and reads each record once.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from kplane.spark.fetch import read_range
from kplane.spark.options import EARLIEST, LATEST, ReadOptions
from kplane.spark.planning import (
    OffsetRange,
    Offsets,
    Planner,
    from_json,
    rate_limit,
    report_data_loss,
    split_ranges,
    to_json,
)


class KafkaBatchReader(DataSourceReader):
    """``spark.read.format("kplane")``: startingOffsets to endingOffsets."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        planner = Planner(self.options)
        try:
            ranges = planner.run(planner.batch_ranges)
        finally:
            planner.close()
        return split_ranges(
            ranges, self.options.min_partitions, self.options.max_records_per_partition
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # Spark reads one empty InputPartition(None) when the plan has no range.
        if not isinstance(partition, OffsetRange):
            return iter(())
        return read_range(self.options, partition)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("kplane")``: micro-batches of offset ranges, at most
    ``maxOffsetsPerTrigger`` records each; new partitions are read from their start."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._planner: Planner | None = None
        self._available_now: Offsets | None = None

    def __getstate__(self) -> dict[str, Any]:
        """What executors need: the options (the driver's connections stay behind)."""
        return {"options": self.options, "_planner": None, "_available_now": None}

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            self._planner = Planner(self.options)
        return self._planner

    def initialOffset(self) -> dict[str, Any]:
        planner = self.planner

        async def resolve() -> Offsets:
            return await planner.resolve(self.options.starting, await planner.partitions())

        return to_json(planner.run(resolve))

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow reads up to the offsets latest now, and no further."""
        self._available_now = self._latest()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = from_json(start)
        latest = self._available_now if self._available_now is not None else self._latest()
        new = [tp for tp in latest if tp not in begin]
        if new:
            planner = self.planner
            begin.update(planner.run(lambda: planner.list_offsets(dict.fromkeys(new, EARLIEST))))
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(begin, latest, limit.max_rows)
        return to_json(latest)

    def reportLatestOffset(self) -> dict[str, Any]:
        return to_json(self._latest())

    def _latest(self) -> Offsets:
        planner = self.planner

        async def latest() -> Offsets:
            return await planner.list_offsets(dict.fromkeys(await planner.partitions(), LATEST))

        return planner.run(latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, until = from_json(start), from_json(end)
        fail = self.options.fail_on_data_loss
        gone = sorted(tp for tp in begin if tp not in until)
        if gone:
            report_data_loss(f"partitions gone: {gone}", fail)
        new = [tp for tp in until if tp not in begin]
        if new:
            planner = self.planner
            earliest = planner.run(lambda: planner.list_offsets(dict.fromkeys(new, EARLIEST)))
            for tp, offset in earliest.items():
                if offset != 0:
                    report_data_loss(
                        f"added partition {tp[0]}-{tp[1]} starts at {offset}, not 0", fail
                    )
            begin.update(earliest)
        ranges = []
        for tp, end_offset in until.items():
            if begin[tp] > end_offset:
                report_data_loss(
                    f"{tp[0]}-{tp[1]}: offset went back from {begin[tp]} to {end_offset}", fail
                )
                continue
            ranges.append(OffsetRange(tp[0], tp[1], begin[tp], end_offset))
        return split_ranges(
            ranges, self.options.min_partitions, self.options.max_records_per_partition
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        return read_range(self.options, partition)

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
            self._planner = None
