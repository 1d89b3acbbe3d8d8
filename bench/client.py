"""kplane's asyncio client vs confluent-kafka (librdkafka), producing to one kplane broker.

Both clients produce the same records (100 B and 1 KB values, acks=1, batch 1 MB,
linger 5 ms) to the same broker in the same run; each run is repeated and the median
reported. JSON on stdout, progress on stderr. Target (issue 3): kplane's client at 50% of
librdkafka's throughput or more.

    .venv/bin/python bench/client.py [--records-1k N] [--records-100b N] [--repeat R]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from typing import Any

from _baselines import KplaneTarget

from kplane.client.kafka_client import KafkaClient
from kplane.client.producer import Producer
from kplane.common.network.config import ClientConfig

BATCH_BYTES = 1_048_576
LINGER_MS = 5


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def confluent_produce(bootstrap: str, topic: str, value: bytes, count: int) -> float:
    """Seconds for confluent-kafka to have ``count`` records acknowledged."""
    from confluent_kafka import Producer as ConfluentProducer

    producer = ConfluentProducer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "linger.ms": LINGER_MS,
            "batch.size": BATCH_BYTES,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 2_097_151,
        }
    )
    errors: list[Any] = []
    producer.produce(topic, b"warm-up")
    producer.flush(30)
    start = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, on_delivery=lambda e, _m: e and errors.append(e))
                break
            except BufferError:
                producer.poll(0.005)
    if producer.flush(120):
        raise RuntimeError("confluent-kafka: records left undelivered")
    elapsed = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"confluent-kafka: {len(errors)} delivery errors, first {errors[0]}")
    return elapsed


async def kplane_produce(bootstrap: str, topic: str, value: bytes, count: int) -> float:
    """Seconds for kplane's client to have ``count`` records acknowledged."""
    client = KafkaClient(ClientConfig.from_properties({"bootstrap.servers": bootstrap}))
    await client.start()
    producer = Producer(client, acks=1, linger_ms=LINGER_MS, batch_size=BATCH_BYTES)
    try:
        await producer.send_and_wait(topic, b"warm-up")
        start = time.perf_counter()
        futures = [await producer.send(topic, value) for _ in range(count)]
        await producer.flush()
        elapsed = time.perf_counter() - start
        failed = [f.exception() for f in futures if f.exception() is not None]
        if failed:
            raise RuntimeError(f"kplane client: {len(failed)} failed sends, first {failed[0]}")
        return elapsed
    finally:
        await producer.close()
        await client.close()


def figures(seconds: list[float], count: int, size: int) -> dict[str, Any]:
    median = statistics.median(seconds)
    return {
        "records": count,
        "record_bytes": size,
        "seconds_runs": [round(s, 3) for s in seconds],
        "records_per_s": round(count / median, 1),
        "mb_per_s": round(count * size / median / 1e6, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records-1k", type=int, default=100_000)
    parser.add_argument("--records-100b", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    target = KplaneTarget()
    target.start()
    started = time.perf_counter()
    results: dict[str, Any] = {}
    try:
        for label, size, count in (
            ("100b", 100, args.records_100b),
            ("1k", 1024, args.records_1k),
        ):
            value = b"x" * size
            runs: dict[str, list[float]] = {"kplane_client": [], "librdkafka": []}
            for rep in range(args.repeat):
                for name in (
                    ("kplane_client", "librdkafka")
                    if rep % 2 == 0
                    else (
                        "librdkafka",
                        "kplane_client",
                    )
                ):
                    topic = f"client-bench-{label}-{uuid.uuid4().hex[:8]}"
                    if name == "librdkafka":
                        seconds = confluent_produce(target.bootstrap, topic, value, count)
                    else:
                        seconds = asyncio.run(kplane_produce(target.bootstrap, topic, value, count))
                    runs[name].append(seconds)
                    log(f"{label} {name} run {rep + 1}: {count * size / seconds / 1e6:.1f} MB/s")
            kplane = figures(runs["kplane_client"], count, size)
            rdkafka = figures(runs["librdkafka"], count, size)
            results[label] = {
                "kplane_client": kplane,
                "librdkafka": rdkafka,
                "ratio": round(kplane["records_per_s"] / rdkafka["records_per_s"], 3),
            }
    finally:
        target.stop()
    print(
        json.dumps(
            {
                "workloads": results,
                "target_ratio": 0.5,
                "wall_seconds": round(time.perf_counter() - started, 1),
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
