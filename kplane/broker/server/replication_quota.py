"""ReplicationQuota: a replication throttle (KIP-73, Kafka's ReplicationQuotaManager).

Two per broker: the leader's (``leader.replication.throttled.rate`` for the replicas named
in its topics' ``leader.replication.throttled.replicas``) and the follower's
(``follower.replication.throttled.rate``, ``follower.replication.throttled.replicas``). Both
rates are dynamic broker configs, read at each check. A throttle applies only to followers
out of the ISR, as in Kafka: a replica being added by a reassignment catches up within the
rate, the ISR is never slowed. The rate is measured over ``replication.quota.window.num``
samples of ``replication.quota.window.size.seconds``, as Kafka's Rate measures it.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from kplane.broker.config.definitions import LONG_MAX
from kplane.broker.log.partition import TopicPartition

ThrottledCheck = Callable[[TopicPartition], bool]


class ReplicationQuota:
    """Bytes recorded per sample window, and whether the rate went over ``rate()``."""

    def __init__(
        self,
        rate: Callable[[], int],
        throttled: ThrottledCheck,
        window_num: int = 11,
        window_size_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._rate = rate
        self._throttled = throttled
        self._window_num = window_num
        self._window_size_s = window_size_s
        self._clock = clock
        self._samples: deque[list[float]] = deque()  # [start, bytes]
        self._lock = threading.Lock()

    def is_throttled(self, tp: TopicPartition) -> bool:
        """Whether the topic's throttled-replicas list names this broker's replica of
        ``tp`` (or is ``*``)."""
        return self._throttled(tp)

    def record(self, nbytes: int) -> None:
        """Count ``nbytes`` replicated for throttled replicas."""
        now = self._clock()
        with self._lock:
            self._roll(now)
            self._samples[-1][1] += nbytes

    def is_quota_exceeded(self) -> bool:
        """Whether the rate measured over the window is above the configured one."""
        limit = self._rate()
        if limit >= LONG_MAX:
            return False
        now = self._clock()
        with self._lock:
            self._roll(now)
            total = sum(sample[1] for sample in self._samples)
            elapsed = now - self._samples[0][0]
            # Kafka's Rate: at least the full windows of all but the current sample.
            elapsed = max(elapsed, (self._window_num - 1) * self._window_size_s, 1e-3)
        return total / elapsed > limit

    def _roll(self, now: float) -> None:
        if not self._samples or now - self._samples[-1][0] >= self._window_size_s:
            self._samples.append([now, 0.0])
        while len(self._samples) > self._window_num:
            self._samples.popleft()


def throttled_replicas(entries: list[str], partition: int, broker_id: int) -> bool:
    """Whether a ``*.replication.throttled.replicas`` list names ``partition:broker_id``."""
    wanted = f"{partition}:{broker_id}"
    return any(item.strip() in ("*", wanted) for item in entries)
