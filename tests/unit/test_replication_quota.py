"""The replication throttle's rate over its sample window (KIP-73), on a fake clock."""

from __future__ import annotations

from kplane.broker.config.definitions import LONG_MAX
from kplane.broker.log.partition import TopicPartition
from kplane.broker.server.replication_quota import ReplicationQuota, throttled_replicas


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_rate_is_measured_over_the_window() -> None:
    clock = Clock()
    rate = [100]
    quota = ReplicationQuota(lambda: rate[0], lambda _tp: True, 11, 1.0, clock)
    assert not quota.is_quota_exceeded()
    quota.record(900)  # 900 bytes over at least ten full windows: 90 B/s
    assert not quota.is_quota_exceeded()
    quota.record(200)  # 110 B/s
    assert quota.is_quota_exceeded()
    clock.now += 12  # the samples age out of the window
    assert not quota.is_quota_exceeded()
    rate[0] = LONG_MAX
    quota.record(10**9)
    assert not quota.is_quota_exceeded()  # unthrottled: never exceeded


def test_throttled_replica_lists() -> None:
    assert throttled_replicas(["0:1", "1:2"], 0, 1)
    assert not throttled_replicas(["0:1", "1:2"], 0, 2)
    assert throttled_replicas(["*"], 7, 3)
    assert not throttled_replicas([], 0, 1)
    quota = ReplicationQuota(lambda: 1, lambda tp: tp.partition == 0)
    assert quota.is_throttled(TopicPartition("t", 0))
    assert not quota.is_throttled(TopicPartition("t", 1))
