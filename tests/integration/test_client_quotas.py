"""Client quotas (KIP-13/55/219/546): DescribeClientQuotas and AlterClientQuotas with
Kafka's validation, produce and fetch throttled by real clients (the response's throttle
time, the broker's throttle metrics), live changes, the control plane never throttled, and
``kplane configs`` for clients, users and ips."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from kplane.client.admin import Admin
from kplane.client.kafka_client import KafkaClient
from kplane.client.quota_admin import (
    MATCH_DEFAULT,
    MATCH_SPECIFIED,
    Alteration,
    FilterComponent,
    QuotaAdmin,
)
from kplane.common.network.config import ClientConfig
from kplane.protocol.errors import ErrorCode, KafkaError
from kplane.testing.plugin import RunningBroker
from tests.repo import REPO_ROOT

DEADLINE_S = 60.0


@pytest.fixture
async def quotas(broker: RunningBroker) -> AsyncIterator[QuotaAdmin]:
    client = KafkaClient(
        ClientConfig.from_properties(
            {"bootstrap.servers": broker.bootstrap(), "request.timeout.ms": "10000"}
        )
    )
    await client.start()
    try:
        yield QuotaAdmin(Admin(client))
    finally:
        await client.close()


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def metric(broker: RunningBroker, name: str, **labels: str) -> float | None:
    """One sample of the broker's /metrics text, or None."""
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in broker.metrics_text().splitlines():
        if line.startswith(f"{name}{{{wanted}}} "):
            return float(line.rsplit(" ", 1)[1])
    return None


def kplane(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kplane", *args],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=120, check=False,
    )


def produce_throttled(broker: RunningBroker, client_id: str, topic: str, seconds: float) -> int:
    """Produce 10 KiB records for ``seconds`` as ``client_id``; the largest throttle time
    librdkafka was told (ms)."""
    throttles: list[int] = []

    def on_throttle(event: Any) -> None:
        throttles.append(int(event.throttle_time * 1000))

    producer = Producer({
        "bootstrap.servers": broker.bootstrap(), "client.id": client_id, "linger.ms": 5,
        "queue.buffering.max.kbytes": 256, "throttle_cb": on_throttle,
    })
    payload = b"x" * 10240
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            producer.produce(topic, payload)
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
    producer.flush(60)
    producer.poll(0.5)
    return max(throttles, default=0)


async def test_alter_and_describe_round_trip(quotas: QuotaAdmin, broker: RunningBroker) -> None:
    user_client = (("client-id", "app"), ("user", "alice"))
    outcome = await quotas.alter_client_quotas([
        Alteration((("client-id", "app"),), {"producer_byte_rate": 1024.0}),
        Alteration((("user", None),), {"consumer_byte_rate": 2048.0, "request_percentage": 50.0}),
        Alteration(user_client, {"controller_mutation_rate": 10.0}),
        Alteration((("ip", "127.0.0.1"),), {"connection_creation_rate": 100.0}),
    ])
    assert all(error is None for error in outcome.values()), outcome
    every = await quotas.describe_client_quotas([])
    assert every == {
        (("client-id", "app"),): {"producer_byte_rate": 1024.0},
        (("user", None),): {"consumer_byte_rate": 2048.0, "request_percentage": 50.0},
        user_client: {"controller_mutation_rate": 10.0},
        (("ip", "127.0.0.1"),): {"connection_creation_rate": 100.0},
    }
    # Kafka's ZooKeeper paths, <default> as Kafka writes it.
    def stored(path: str) -> dict[str, str]:
        return dict(json.loads(broker.znode(path))["config"])

    assert stored("/config/clients/app") == {"producer_byte_rate": "1024"}
    assert stored("/config/users/<default>") == {
        "consumer_byte_rate": "2048", "request_percentage": "50.0"
    }
    assert stored("/config/users/alice/clients/app") == {"controller_mutation_rate": "10.0"}
    assert stored("/config/ips/127.0.0.1") == {"connection_creation_rate": "100"}

    users = await quotas.describe_client_quotas([FilterComponent("user", MATCH_SPECIFIED)])
    assert set(users) == {(("user", None),), user_client}
    strict = await quotas.describe_client_quotas(
        [FilterComponent("user", MATCH_SPECIFIED)], strict=True
    )
    assert set(strict) == {(("user", None),)}
    default = await quotas.describe_client_quotas([FilterComponent("user", MATCH_DEFAULT)])
    assert set(default) == {(("user", None),)}
    exact = await quotas.describe_client_quotas([FilterComponent("client-id", match="app")])
    assert set(exact) == {(("client-id", "app"),), user_client}

    # validate_only writes nothing; removing a key keeps the others
    await quotas.alter_client_quotas(
        [Alteration((("client-id", "app"),), {"producer_byte_rate": 1.0})], validate_only=True
    )
    await quotas.alter_client_quotas(
        [Alteration((("user", None),), {"request_percentage": None})]
    )
    after = await quotas.describe_client_quotas([])
    assert after[(("client-id", "app"),)] == {"producer_byte_rate": 1024.0}
    assert after[(("user", None),)] == {"consumer_byte_rate": 2048.0}


async def test_kafka_validation(quotas: QuotaAdmin) -> None:
    cases = {
        (("user", "u1"),): ({"no_such_quota": 1.0}, "Invalid configuration key no_such_quota"),
        (("user", "u2"),): ({"producer_byte_rate": 0.0}, "must be greater than 0"),
        (("user", "u3"),): ({"producer_byte_rate": 1.5}, "cannot be a fractional value"),
        (("ip", "10.0.0.1"), ("user", "u4")): (
            {"connection_creation_rate": 1.0}, "IP entity should"
        ),
        (("user", "u5"),): ({"connection_creation_rate": 1.0}, "Invalid configuration key"),
        (("group", "g"),): ({"producer_byte_rate": 1.0}, "Unhandled client quota entity type"),
        (("user", ""),): ({"producer_byte_rate": 1.0}, "Empty user not supported"),
        (("ip", "no.such.host.invalid"),): (
            {"connection_creation_rate": 1.0}, "is not a valid IP or resolvable host"
        ),
    }
    outcome = await quotas.alter_client_quotas(
        Alteration(entity, ops) for entity, (ops, _) in cases.items()
    )
    for entity, (_, message) in cases.items():
        error = outcome[entity]
        assert error is not None and error.code == ErrorCode.invalid_request, (entity, error)
        assert message in str(error.message), (entity, error.message)
    assert await quotas.describe_client_quotas([]) == {}

    with pytest.raises(KafkaError) as refused:
        await quotas.describe_client_quotas([FilterComponent("group", MATCH_SPECIFIED)])
    assert refused.value.code == ErrorCode.unsupported_version
    with pytest.raises(KafkaError) as refused:
        await quotas.describe_client_quotas(
            [FilterComponent("ip", MATCH_SPECIFIED), FilterComponent("user", MATCH_SPECIFIED)]
        )
    assert refused.value.code == ErrorCode.invalid_request
    with pytest.raises(KafkaError) as refused:
        await quotas.describe_client_quotas([FilterComponent("user", MATCH_DEFAULT, "x")])
    assert refused.value.code == ErrorCode.invalid_request


async def test_producer_throttled_by_client_quota(
    quotas: QuotaAdmin, broker: RunningBroker
) -> None:
    broker.create_topic("throttled", 1)
    await quotas.alter_client_quotas(
        [Alteration((("client-id", "slow"),), {"producer_byte_rate": 102400.0})]
    )
    throttle = produce_throttled(broker, "slow", "throttled", 4.0)
    assert throttle > 0
    seen = metric(broker, "kafka_server_produce_throttle_time", user="", client_id="slow")
    assert seen is not None and seen > 0
    rate = metric(broker, "kafka_server_produce_byte_rate", user="", client_id="slow")
    assert rate is not None and rate > 0
    # a client the quota does not name is not held
    assert produce_throttled(broker, "fast", "throttled", 2.0) == 0
