"""ClientQuotaManager: Kafka's eight-level precedence (DefaultQuotaCallback) and its sampled
rate windows and throttle times (QuotaUtils.throttleTime), on a fake clock."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from kplane.broker.metrics.registry import BrokerMetrics
from kplane.broker.quota.manager import ClientQuotaManager, QuotaKind

# (user, client id) of each level's override, None the default, "" the type absent
LEVELS = [
    ("alice", "app"),  # 1 /config/users/alice/clients/app
    ("alice", None),  # 2 /config/users/alice/clients/<default>
    ("alice", ""),  # 3 /config/users/alice
    (None, "app"),  # 4 /config/users/<default>/clients/app
    (None, None),  # 5 /config/users/<default>/clients/<default>
    (None, ""),  # 6 /config/users/<default>
    ("", "app"),  # 7 /config/clients/app
    ("", None),  # 8 /config/clients/<default>
]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def manager(clock: Clock | None = None, metrics: BrokerMetrics | None = None) -> ClientQuotaManager:
    return ClientQuotaManager(QuotaKind.PRODUCE, 11, 1.0, metrics, clock=clock or Clock())


def set_level(m: ClientQuotaManager, level: int, bound: float | None) -> None:
    user, client = LEVELS[level - 1]
    m.update_quota(user or None, client or None, user != "", client != "", bound)


@pytest.mark.parametrize("top", range(1, 9))
def test_each_level_wins_over_those_below_it(top: int) -> None:
    m = manager()
    for level in range(top, 9):
        set_level(m, level, float(level * 100))
    assert m.quota("alice", "app") == top * 100


def test_removing_a_level_falls_back_to_the_next() -> None:
    m = manager()
    for level in range(1, 9):
        set_level(m, level, float(level * 100))
    for level in range(1, 8):
        set_level(m, level, None)
        assert m.quota("alice", "app") == (level + 1) * 100
    set_level(m, 8, None)
    assert m.quota("alice", "app") is None


def test_other_clients_and_users_take_the_defaults() -> None:
    m = manager()
    set_level(m, 1, 100.0)
    set_level(m, 3, 300.0)
    set_level(m, 8, 800.0)
    assert m.quota("alice", "app") == 100
    assert m.quota("alice", "other") == 300  # the user's own quota before client defaults
    assert m.quota("bob", "app") == 800


def test_a_user_quota_is_one_rate_over_all_its_clients() -> None:
    clock = Clock()
    m = manager(clock)
    set_level(m, 3, 1000.0)  # users/alice
    set_level(m, 7, 1e9)  # clients/app, far looser
    # 11 windows of 1 s: 10 s of history at least; 10 kB over two client ids is 1000 B/s
    assert m.record_and_get_throttle_time_ms("alice", "app", 5000.0) == 0
    assert m.record_and_get_throttle_time_ms("alice", "other", 5000.0) == 0
    throttle = m.record_and_get_throttle_time_ms("alice", "other", 1000.0)
    # rate 11000/10 = 1100 B/s: (1100 - 1000) / 1000 * 10 s
    assert throttle == 1000
    assert m.quota_metric_tags("alice", "app") == ("alice", "")


def test_throttle_time_is_kafkas() -> None:
    clock = Clock()
    m = manager(clock)
    set_level(m, 7, 100.0)
    assert m.record_and_get_throttle_time_ms("u", "app", 1000.0) == 0  # 100 B/s over 10 s
    # 3000 B over the 10 s minimum: 300 B/s, (300 - 100) / 100 * 10 s = 20 s
    assert m.record_and_get_throttle_time_ms("u", "app", 2000.0) == 20000
    clock.now += 12.0  # the samples expire
    assert m.record_and_get_throttle_time_ms("u", "app", 500.0) == 0


def test_request_quota_throttle_is_at_most_one_window() -> None:
    m = ClientQuotaManager(QuotaKind.REQUEST, 11, 1.0, clock=Clock(), max_throttle_ms=1000.0)
    m.update_quota(None, None, False, True, 1.0)  # clients/<default>: 1 % of a thread
    assert m.record_and_get_throttle_time_ms("u", "c", 500.0) == 1000


def test_no_quota_no_recording() -> None:
    m = manager()
    assert not m.enabled
    assert m.record_and_get_throttle_time_ms("u", "c", 1e12) == 0
    set_level(m, 7, 10.0)  # another client id's quota: this one is unbounded
    assert m.record_and_get_throttle_time_ms("u", "c", 1e12) == 0


def test_metrics_per_entity() -> None:
    metrics = BrokerMetrics()
    clock = Clock()
    m = manager(clock, metrics=metrics)
    set_level(m, 7, 100.0)
    m.record_and_get_throttle_time_ms("u", "app", 5000.0)
    m.record_throttle("u", "app", 250)
    text = metrics_text(metrics)
    assert 'kafka_server_produce_byte_rate{client_id="app",user=""} 500.0' in text
    assert 'kafka_server_produce_throttle_time{client_id="app",user=""} 250.0' in text


def metrics_text(metrics: BrokerMetrics) -> str:
    return generate_latest(metrics.registry).decode()
