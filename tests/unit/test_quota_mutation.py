"""Controller mutation quotas (KIP-599) as Kafka's ControllerMutationQuotaManager keeps
them (a token bucket per quota id, strict and permissive quotas, the throttle handed to
the response), and the fetch quota's seams (Kafka's getMaxValueInQuotaWindow and a
throttled Fetch's bytes taken back)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from prometheus_client import generate_latest

from kplane.broker.metrics.registry import CONTROL_PLANE, BrokerMetrics
from kplane.broker.quota.controller_mutation import ControllerMutationQuotaManager
from kplane.broker.quota.entity import QuotaEntity
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode, KafkaError
from tests.unit.test_quota_manager import Clock
from tests.unit.test_quota_throttle import quotas_over_a_store, request


def mutation_manager(
    clock: Clock, rate: float | None = 2.0, metrics: BrokerMetrics | None = None
) -> ControllerMutationQuotaManager:
    m = ControllerMutationQuotaManager(11, 1.0, metrics, clock=clock)
    if rate is not None:
        m.update_quota(None, "app", False, True, rate)  # /config/clients/app
    return m


def test_strict_refuses_once_the_bucket_is_empty() -> None:
    clock = Clock()
    m = mutation_manager(clock)  # 2/s: a burst of 2 * 11 * 1 s = 22 partitions
    quota = m.quota_for("", "app", strict=True)
    assert quota is not None
    quota.record(20)
    quota.record(5)  # 2 tokens were left: taken, the bucket goes to -3
    assert quota.throttle_time_ms() == 0  # nothing refused yet
    with pytest.raises(KafkaError) as refused:
        quota.record(1)
    assert refused.value.code == ErrorCode.throttling_quota_exceeded
    assert quota.throttle_time_ms() == 1500  # 3 tokens at 2/s
    clock.now += 1.0
    assert quota.throttle_time_ms() == 500  # less the time since it was measured
    clock.now += 0.5
    m.quota_for("", "app", strict=True).record(1)  # type: ignore[union-attr]  # back to 0


def test_permissive_makes_every_change_and_throttles() -> None:
    clock = Clock()
    m = mutation_manager(clock)
    quota = m.quota_for("", "app", strict=False)
    assert quota is not None
    quota.record(30)  # 8 past the burst: made, throttled for 8 / 2 s
    quota.record(2)
    assert quota.throttle_time_ms() == 5000
    clock.now += 60.0  # refilled to the burst, no more
    again = m.quota_for("", "app", strict=False)
    assert again is not None
    again.record(22)
    assert again.throttle_time_ms() == 0
    again.record(1)
    assert again.throttle_time_ms() == 500


def test_not_limited_without_a_quota() -> None:
    clock = Clock()
    assert mutation_manager(clock, rate=None).quota_for("", "app", strict=True) is None
    m = mutation_manager(clock)
    other = m.quota_for("", "other", strict=True)  # no quota holds this client id
    assert other is not None
    other.record(10_000)
    other.record(1)
    assert other.throttle_time_ms() == 0


def test_tokens_metric() -> None:
    clock = Clock()
    metrics = BrokerMetrics()
    m = mutation_manager(clock, metrics=metrics)
    m.quota_for("", "app", strict=False).record(30)  # type: ignore[union-attr]
    text = generate_latest(metrics.registry).decode()
    assert 'kafka_server_controllermutation_tokens{client_id="app",user=""} -8.0' in text
    assert 'kafka_server_controllermutation_mutation_rate{client_id="app",user=""}' in text


def test_the_response_carries_the_mutation_throttle() -> None:
    quotas, store, _ = quotas_over_a_store()
    create = request(ApiKey.CREATE_TOPICS, 5)  # permissive before v6
    assert quotas.controller_mutation_quota(create, 6) is None  # no such quota yet
    store.alter(QuotaEntity.of(client_id="app"), {"controller_mutation_rate": 1.0})
    quota = quotas.controller_mutation_quota(create, 6)
    assert quota is not None and not quota.strict
    quota.record(100)  # the burst is 11
    throttle = quotas.throttle_time_ms(create, None, 10)
    assert 88_000 < throttle <= 89_000
    strict = request(ApiKey.CREATE_TOPICS, 7)
    assert quotas.controller_mutation_quota(strict, 6).strict  # type: ignore[union-attr]
    control = request(ApiKey.CREATE_TOPICS, 7, plane=CONTROL_PLANE)
    assert quotas.controller_mutation_quota(control, 6) is None
    assert quotas.throttle_time_ms(control, None, 10) == 0


def test_fetch_window_and_throttled_bytes_taken_back() -> None:
    quotas, store, _ = quotas_over_a_store()
    fetch = request(ApiKey.FETCH, 12)
    assert quotas.max_fetch_bytes(fetch) is None
    store.alter(QuotaEntity.of(client_id="app"), {"consumer_byte_rate": 1000.0})
    assert quotas.max_fetch_bytes(fetch) == 10_000  # 1000/s over 10 of the 11 windows
    consumer = SimpleNamespace(replica_id=-1)
    assert quotas.throttle_time_ms(fetch, consumer, 10_000) == 0
    assert quotas.throttle_time_ms(fetch, consumer, 5_000) > 0  # answered empty ...
    # ... and not counted: the bytes of the first fetch only are in the rate
    assert quotas.fetch.record_and_get_throttle_time_ms("alice", "app", 0) == 0
    assert quotas.throttle_time_ms(fetch, consumer, 1) > 0
