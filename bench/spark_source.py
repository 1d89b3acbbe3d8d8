"""Spark reading a topic through the kplane data source, next to the same records read from
Parquet, in one run (issue 31).

A ``kplane serve`` broker (file log, loopback) gets ``--size`` bytes of record values
(``--record-size`` each, random, so incompressible) in ``--partitions`` partitions,
produced with confluent-kafka; the same rows (value, topic, partition, offset) go to one
Parquet file per partition (snappy, no dictionary encoding, so it holds every value's bytes
as the log does), written with pyarrow. Local Spark (``--master``) then
reads both with the same action, ``sum(length(value))`` over every row, so every value is
read, after a warm-up read of a few rows of each (Python workers started, classes loaded).
Each read runs ``--repeat`` times; MB/s is value bytes (10^6) per second of the best run.
JSON on stdout, progress on stderr.

    .venv/bin/python bench/spark_source.py [--size 1G] [--record-size 1024] [--partitions 4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _baselines import KplaneTarget

from kplane.client.admin import Admin, NewTopic
from kplane.client.kafka_client import KafkaClient
from kplane.common.network.config import ClientConfig
from kplane.spark import FORMAT, register
from kplane.tools.report.pipeline import spark_session

TOPIC = "spark-bench"
UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def size_arg(text: str) -> int:
    """``1G``, ``256M``, ``4096`` -> bytes."""
    unit = UNITS.get(text[-1:].upper())
    return int(float(text[:-1]) * unit) if unit else int(text)


async def create_topic(bootstrap: str, partitions: int) -> None:
    client = KafkaClient(ClientConfig.from_properties({"bootstrap.servers": bootstrap}))
    await client.start()
    try:
        errors = await Admin(client).create_topics([NewTopic(TOPIC, partitions, 1)])
        if any(errors.values()):
            raise RuntimeError(f"create {TOPIC}: {errors}")
    finally:
        await client.close()


def produce(bootstrap: str, records: int, values: list[bytes], partitions: int) -> float:
    """Seconds for confluent-kafka to have every record acknowledged."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 20,
            "batch.size": 1_048_576,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    start = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(TOPIC, values[i % 256], partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(600):
        raise RuntimeError("records left undelivered")
    return time.perf_counter() - start


def write_parquet(directory: str, records: int, values: list[bytes], partitions: int) -> None:
    """The produced rows, as one Parquet file per partition."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for p in range(partitions):
        offsets = range((records - p + partitions - 1) // partitions)
        table = pa.table(
            {
                "value": pa.array([values[(o * partitions + p) % 256] for o in offsets]),
                "topic": pa.array([TOPIC] * len(offsets)),
                "partition": pa.array([p] * len(offsets), pa.int32()),
                "offset": pa.array(offsets, pa.int64()),
            }
        )
        # no dictionary: 256 distinct values would shrink the file to a few MB
        pq.write_table(table, f"{directory}/part-{p}.parquet", use_dictionary=False)


def warm_up(frame: Any) -> None:
    frame.limit(10).collect()


def timed_reads(frame: Any, repeat: int, expected: int) -> list[float]:
    """Seconds of each ``sum(length(value))`` over ``frame``."""
    from pyspark.sql import functions as F

    seconds = []
    for _ in range(repeat):
        start = time.perf_counter()
        total = frame.select(F.sum(F.length("value"))).first()[0]
        seconds.append(time.perf_counter() - start)
        if total != expected:
            raise RuntimeError(f"read {total} value bytes, expected {expected}")
    return seconds


def figures(seconds: list[float], value_bytes: int) -> dict[str, Any]:
    return {
        "seconds": [round(s, 2) for s in seconds],
        "mb_per_s": round(value_bytes / 1e6 / min(seconds), 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=size_arg, default=1 << 30, help="value bytes (1G)")
    parser.add_argument("--record-size", type=int, default=1024, help="value bytes (1024)")
    parser.add_argument("--partitions", type=int, default=4, help="topic partitions (4)")
    parser.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    parser.add_argument("--repeat", type=int, default=2, help="reads of each kind (2)")
    args = parser.parse_args()
    records = args.size // args.record_size
    value_bytes = records * args.record_size
    broker = KplaneTarget()
    parquet_dir = tempfile.mkdtemp(prefix="bench-spark-parquet-")
    result: dict[str, Any] = {
        "records": records,
        "record_size": args.record_size,
        "value_bytes": value_bytes,
        "partitions": args.partitions,
        "master": args.master,
        "cpus": os.cpu_count(),
    }
    try:
        broker.start()
        asyncio.run(create_topic(broker.bootstrap, args.partitions))
        log(f"producing {records} records of {args.record_size} B")
        values = [os.urandom(args.record_size) for _ in range(256)]
        result["produce_seconds"] = round(
            produce(broker.bootstrap, records, values, args.partitions), 1
        )
        write_parquet(parquet_dir, records, values, args.partitions)
        result["parquet_bytes"] = sum(p.stat().st_size for p in Path(parquet_dir).iterdir())
        with spark_session(args.master) as spark:
            register(spark)
            result["spark_version"] = spark.version
            reader = spark.read.format(FORMAT).option("kafka.bootstrap.servers", broker.bootstrap)
            ends = {str(p): 10 for p in range(args.partitions)}
            warm_up(
                reader.option("subscribe", TOPIC)
                .option("endingOffsets", json.dumps({TOPIC: ends}))
                .load()
            )
            topic = reader.option("subscribe", TOPIC).option("endingOffsets", "latest").load()
            log("reading through the kplane data source")
            result["kplane"] = figures(timed_reads(topic, args.repeat, value_bytes), value_bytes)
            parquet = spark.read.parquet(parquet_dir)
            warm_up(parquet)
            log("reading from Parquet")
            result["parquet"] = figures(timed_reads(parquet, args.repeat, value_bytes), value_bytes)
        result["kplane_vs_parquet"] = round(
            result["kplane"]["mb_per_s"] / result["parquet"]["mb_per_s"], 3
        )
    finally:
        usage = broker.usage()
        result["broker"] = {**broker.stop(), **usage}
        shutil.rmtree(parquet_dir, ignore_errors=True)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
