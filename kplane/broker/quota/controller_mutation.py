"""Controller mutation quotas (KIP-599), as Kafka's ``ControllerMutationQuotaManager``.

``controller_mutation_rate`` bounds the partitions a client creates or deletes per second
(CreateTopics, DeleteTopics, CreatePartitions). Each quota id has a token bucket that
refills at the rate up to a burst of ``rate * quota.window.num *
quota.window.size.seconds``; each topic's partitions are recorded before its change is
made. A request gets a ``ControllerMutationQuota`` for its lifetime:

- strict (CreateTopics v6+, DeleteTopics v5+, CreatePartitions v3+): a topic is refused
  with THROTTLING_QUOTA_EXCEEDED once the bucket is empty (below zero), and none is
  throttled while tokens are left, however many partitions it takes;
- permissive (older versions, whose clients do not know the error): every change is made,
  and the response is throttled once the bucket is empty.

The response's throttle is the time the bucket needs to come back to zero, less the time
since it was measured (a request may wait for its topics in the topic purgatory).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from kplane.broker.metrics.registry import BrokerMetrics, metric_name
from kplane.broker.quota.manager import ClientQuotaManager, QuotaKind, QuotaSensors, TokenBucket
from kplane.protocol.errors import ErrorCode, KafkaError

_INT32_MAX = 2**31 - 1
THROTTLING_QUOTA_EXCEEDED_MESSAGE = "The throttling quota has been exceeded."
"""Kafka's ``Errors.THROTTLING_QUOTA_EXCEEDED`` message."""


class ControllerMutationQuota:
    """One request's view of its client's mutation quota (strict or permissive)."""

    def __init__(
        self,
        manager: ControllerMutationQuotaManager,
        tags: tuple[str, str],
        strict: bool,
    ) -> None:
        self._manager = manager
        self._tags = tags
        self.strict = strict
        self._throttle_ms = 0
        self._measured_at = 0.0

    def record(self, partitions: float) -> None:
        """Count ``partitions`` created or deleted before the change is made; a strict
        quota whose bucket is already empty raises THROTTLING_QUOTA_EXCEEDED instead."""
        now, throttle_ms = self._manager.take(self._tags, partitions, self.strict)
        if throttle_ms is None:
            return
        self._throttle_ms, self._measured_at = throttle_ms, now
        if self.strict:
            raise KafkaError(ErrorCode.throttling_quota_exceeded, THROTTLING_QUOTA_EXCEEDED_MESSAGE)

    def throttle_time_ms(self) -> int:
        """The throttle the response carries: the last violation's, less the time since."""
        if not self._throttle_ms:
            return 0
        elapsed_ms = (self._manager.now() - self._measured_at) * 1000.0
        return max(0, round(self._throttle_ms - elapsed_ms))


class ControllerMutationQuotaManager(ClientQuotaManager):
    """The controller mutation quota of every client: token buckets by quota id (Kafka's
    ``tokens`` metric beside the ``mutation-rate`` and ``throttle-time``)."""

    def __init__(
        self,
        samples: int,
        window_s: float,
        metrics: BrokerMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(QuotaKind.CONTROLLER_MUTATION, samples, window_s, metrics, clock)
        self._tokens_name = metric_name("server", self.kind.group, "tokens")
        self._gauge_names.append(self._tokens_name)

    def now(self) -> float:
        return self._clock()

    def quota_for(self, user: str, client_id: str, strict: bool) -> ControllerMutationQuota | None:
        """A quota for one request of the client, or ``None`` while no controller mutation
        quota was ever set (Kafka's UnboundedControllerMutationQuota)."""
        if not self.enabled:
            return None
        with self._lock:
            tags = self.quota_metric_tags(user, client_id)
        return ControllerMutationQuota(self, tags, strict)

    def take(
        self, tags: tuple[str, str], partitions: float, strict: bool
    ) -> tuple[float, int | None]:
        """Record ``partitions`` against the quota id's bucket: (now, the throttle in ms
        when the bucket is empty, else ``None``). Strict: checked first, and nothing is
        taken from an empty bucket; permissive: taken, then checked."""
        now = self._clock()
        with self._lock:
            bound = self.quota_limit(*tags)
            sensors = self._sensors_for(tags, now)
            bucket = sensors.tokens
            if bound is None or bucket is None:
                sensors.rate.record(now, partitions)
                return now, None
            burst = bound * self._samples * self._window_s
            if strict and bucket.measure(now, bound, burst) < 0:
                return now, _throttle_ms(bucket.tokens, bound)
            sensors.rate.record(now, partitions)
            bucket.record(now, partitions, bound, burst)
            if not strict and bucket.tokens < 0:
                return now, _throttle_ms(bucket.tokens, bound)
            return now, None

    def _new_sensors(self, now: float) -> QuotaSensors:
        sensors = super()._new_sensors(now)
        sensors.tokens = TokenBucket(math.inf, now)  # full: the burst caps it
        return sensors

    def _register(self, tags: tuple[str, str], sensors: QuotaSensors) -> None:
        super()._register(tags, sensors)
        if self._metrics is None:
            return
        self._metrics.register_gauge(
            self._tokens_name,
            "Tracking remaining tokens in the token bucket per user/client-id.",
            lambda: self._tokens(tags, sensors),
            {"user": tags[0], "client_id": tags[1]},
        )

    def _tokens(self, tags: tuple[str, str], sensors: QuotaSensors) -> float:
        with self._lock:
            bound = self.quota_limit(*tags)
            if bound is None or sensors.tokens is None:
                return math.inf
            burst = bound * self._samples * self._window_s
            return sensors.tokens.measure(self._clock(), bound, burst)


def _throttle_ms(tokens: float, bound: float) -> int:
    """Kafka's ControllerMutationQuotaManager.throttleTimeMs: the time to refill to zero."""
    if bound <= 0:
        return _INT32_MAX
    return min(round(-tokens / bound * 1000.0), _INT32_MAX)
