"""The wire load against a real broker: every message it counts as delivered is in the log."""

from __future__ import annotations

import uvloop

from kplane.testing.plugin import RunningBroker
from kplane.tools.loadtest.producers import LoadConfig
from kplane.tools.loadtest.topics import create_topics
from kplane.tools.loadtest.wire_load import WireLoad
from tests.integration.helpers import read_from_beginning


def config(bootstrap: str, **changes: object) -> LoadConfig:
    values: dict = dict(
        bootstrap=bootstrap,
        topic="wire-load",
        producers=4,
        warmup=0.0,
        duration=30.0,
        rate=0.0,
        max_messages=400,
        record_size=64,
        linger_ms=0.0,
        sample_every=3,
        partitions=2,
        batch_records=10,
    )
    values.update(changes)
    return LoadConfig(**values)  # type: ignore[arg-type]


def run(load: WireLoad) -> float:
    async def go() -> float:
        await load.connect()
        return await load.run([0, 0])

    return uvloop.run(go())


def test_delivered_messages_are_in_the_log(broker: RunningBroker) -> None:
    host, port = broker.address()
    bootstrap = f"{host}:{port}"
    create_topics(bootstrap, {"wire-load": 2})
    load = WireLoad(config(bootstrap))
    result = load.result(run(load))

    # Stopped by max_messages: each connection finishes the request it has in flight.
    assert 400 <= result.produced <= 400 + 4 * 10
    assert result.delivered == result.produced
    assert (result.failed, result.undelivered) == (0, 0)
    requests = result.produced // 10
    assert len(result.latencies_ms) == requests // 3
    assert all(e is None for e in result.errors)
    assert all(ms > 0 for ms in result.latencies_ms)

    got = read_from_beginning(
        bootstrap, "wire-check", "wire-load", {0: 1, 1: 1}, batch=500, timeout=30
    )
    assert sum(len(messages) for messages in got.values()) == result.delivered
    assert all(len(m.value()) == 64 for messages in got.values() for m in messages)


def test_refusals_count_as_failed(broker: RunningBroker) -> None:
    host, port = broker.address()
    load = WireLoad(config(f"{host}:{port}", topic="no-such-topic", max_messages=50))
    result = load.result(run(load))
    assert result.failed == result.produced > 0
    assert result.delivered == 0
    assert set(result.errors) == {"UNKNOWN_TOPIC_OR_PARTITION"}
