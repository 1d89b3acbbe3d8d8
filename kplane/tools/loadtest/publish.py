"""``kplane loadtest --to-topic TOPIC --to-bootstrap-server HOST:PORT``: the results as
records too, so ``kplane report --from-topic`` can analyse them off a broker.

One record per row, its value the row as a JSON object and its key what it is:
``requests`` (the columns of requests.parquet), ``samples`` (those of samples.parquet), and one
``summary`` (summary.json). Produced with kplane's idempotent producer; a topic holds the
results of one run (a report over the topic covers every run in it).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from kplane.client.kafka_client import KafkaClient
from kplane.client.producer import Producer
from kplane.common.network.config import ClientConfig
from kplane.tools.loadtest.results import ScenarioRun, request_rows, sample_rows

REQUESTS_KEY = b"requests"
SAMPLES_KEY = b"samples"
SUMMARY_KEY = b"summary"


def result_records(
    runs: Sequence[ScenarioRun], summary: Mapping[str, Any]
) -> Iterator[tuple[bytes, bytes]]:
    """(key, JSON value) of every request, every sample, then the summary."""
    for key, columns in ((REQUESTS_KEY, request_rows(runs)), (SAMPLES_KEY, sample_rows(runs))):
        names = list(columns)
        for row in zip(*columns.values(), strict=True):
            yield key, json.dumps(dict(zip(names, row, strict=True))).encode()
    yield SUMMARY_KEY, json.dumps(summary).encode()


def publish_results(
    bootstrap: str, topic: str, runs: Sequence[ScenarioRun], summary: Mapping[str, Any]
) -> int:
    """Produce the results to ``topic``; the number of records, once all are acknowledged."""

    async def produce() -> int:
        client = KafkaClient(ClientConfig.from_properties({"bootstrap.servers": bootstrap}))
        await client.start()
        try:
            async with Producer(client, enable_idempotence=True) as producer:
                futures = [
                    await producer.send(topic, value, key=key)
                    for key, value in result_records(runs, summary)
                ]
                await producer.flush()
                await asyncio.gather(*futures)
                return len(futures)
        finally:
            await client.close()

    return asyncio.run(produce())
