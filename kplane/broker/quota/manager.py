"""ClientQuotaManager: one kind of client quota (produce, fetch, request), as Kafka's
``ClientQuotaManager`` with its ``DefaultQuotaCallback``.

A client is known by its user (the principal's name, sanitized) and its client id. Which
entity's quota holds it is Kafka's eight-level precedence, taken over the entities that
set this kind's key:

1. ``/config/users/<user>/clients/<client-id>``
2. ``/config/users/<user>/clients/<default>``
3. ``/config/users/<user>``
4. ``/config/users/<default>/clients/<client-id>``
5. ``/config/users/<default>/clients/<default>``
6. ``/config/users/<default>``
7. ``/config/clients/<client-id>``
8. ``/config/clients/<default>``

The level chosen also decides which clients share one rate: a user quota is measured over
all of the user's clients. Rates are Kafka's sampled ``Rate`` over ``quota.window.num``
samples of ``quota.window.size.seconds``; a recorded value that takes the rate over the
bound returns the time the client must wait to bring it back (QuotaUtils.throttleTime).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

import structlog

from kplane.broker.metrics.registry import BrokerMetrics, metric_name
from kplane.broker.network.sampled_stats import SampledAverage, SampledRate
from kplane.broker.quota.entity import (
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
)

log = structlog.get_logger(__name__)

SENSOR_EXPIRY_S = 3600.0
"""Kafka's InactiveSensorExpirationTimeSeconds: a client's sensors go after an idle hour."""

_INT32_MAX = 2**31 - 1

UserClient = tuple[str | None, str | None]
"""(user, client id) of an override; ``None`` in a place is that type's default, a missing
type is ``""`` (Kafka's tags)."""


class QuotaKind(Enum):
    """Kafka's QuotaType: the metric group, the config key and the rate's metric name."""

    PRODUCE = ("Produce", PRODUCER_BYTE_RATE, "byte-rate")
    FETCH = ("Fetch", CONSUMER_BYTE_RATE, "byte-rate")
    REQUEST = ("Request", REQUEST_PERCENTAGE, "request-time")
    CONTROLLER_MUTATION = ("ControllerMutation", CONTROLLER_MUTATION_RATE, "mutation-rate")

    def __init__(self, group: str, config_key: str, rate_metric: str) -> None:
        self.group = group
        self.config_key = config_key
        self.rate_metric = rate_metric


_CLIENT_ID_ENABLED = 1
_USER_ENABLED = 2
_USER_CLIENT_ENABLED = 4


@dataclass(slots=True, eq=False)
class TokenBucket:
    """Kafka's ``TokenBucket`` stat: tokens refill at the bound per second up to a burst of
    ``bound * samples * window``; a recorded value takes them, below zero too."""

    tokens: float
    last: float

    def measure(self, now: float, bound: float, burst: float) -> float:
        """The tokens left now (refilled since the last look)."""
        self.tokens = min(burst, self.tokens + bound * max(0.0, now - self.last))
        self.last = now
        return self.tokens

    def record(self, now: float, value: float, bound: float, burst: float) -> None:
        self.tokens = min(burst, self.measure(now, bound, burst) - value)


@dataclass(slots=True, eq=False)
class QuotaSensors:
    """One quota id's rate and throttle times (and the token bucket of a controller
    mutation quota)."""

    rate: SampledRate
    throttle: SampledAverage = field(default_factory=SampledAverage)
    last_used: float = 0.0
    tokens: TokenBucket | None = None  # a controller mutation quota's


class ClientQuotaManager:
    """Overrides of one quota kind by entity, and the sensors of the clients they hold."""

    def __init__(
        self,
        kind: QuotaKind,
        samples: int,
        window_s: float,
        metrics: BrokerMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_throttle_ms: float | None = None,
    ) -> None:
        self.kind = kind
        self._samples = samples
        self._window_s = window_s
        self._metrics = metrics
        self._clock = clock
        self._max_throttle_ms = max_throttle_ms
        self._overrides: dict[UserClient, float] = {}
        self._enabled = 0
        self._sensors: dict[tuple[str, str], QuotaSensors] = {}
        self._lock = threading.Lock()
        self._last_sweep = clock()
        self._rate_name = metric_name("server", kind.group, kind.rate_metric)
        self._throttle_name = metric_name("server", kind.group, "throttle-time")
        self._gauge_names = [self._rate_name, self._throttle_name]

    @property
    def enabled(self) -> bool:
        """Whether a quota of this kind was ever set (as in Kafka, until restart)."""
        return self._enabled != 0

    # overrides -------------------------------------------------------------------------
    def update_quota(
        self,
        user: str | None,
        client_id: str | None,
        has_user: bool,
        has_client: bool,
        bound: float | None,
    ) -> None:
        """Set (``bound``) or remove (``None``) the override of an entity: ``user`` and
        ``client_id`` are the sanitized user and the client id, ``None`` the default;
        ``has_*`` say which types the entity has."""
        key: UserClient = (user if has_user else "", client_id if has_client else "")
        with self._lock:
            if has_user:
                self._enabled |= _USER_CLIENT_ENABLED if has_client else _USER_ENABLED
            elif has_client:
                self._enabled |= _CLIENT_ID_ENABLED
            previous = self._overrides.get(key)
            if bound is None:
                self._overrides.pop(key, None)
            else:
                self._overrides[key] = bound
        if previous == bound:
            return
        log.info(
            "client quota removed" if bound is None else "client quota changed",
            quota=self.kind.config_key,
            user=_shown(key[0]),
            client_id=_shown(key[1]),
            value=bound,
        )

    def quota_metric_tags(self, user: str, client_id: str) -> tuple[str, str]:
        """The (user, client-id) tags of the rate that holds this client: Kafka's
        DefaultQuotaCallback.quotaMetricTags, the eight levels when several are enabled."""
        enabled = self._enabled
        if enabled in (0, _CLIENT_ID_ENABLED):
            return "", client_id
        if enabled == _USER_ENABLED:
            return user, ""
        if enabled == _USER_CLIENT_ENABLED:
            return user, client_id
        has = self._overrides.__contains__
        if has((user, client_id)) or has((user, None)):
            return user, client_id
        if has((user, "")):
            return user, ""
        if has((None, client_id)) or has((None, None)):
            return user, client_id
        if has((None, "")):
            return user, ""
        return "", client_id

    def quota_limit(self, user: str, client_id: str) -> float | None:
        """The bound of the rate tagged (user, client-id): DefaultQuotaCallback.quotaLimit."""
        get = self._overrides.get
        if user and client_id:
            for key in ((user, client_id), (user, None), (None, client_id), (None, None)):
                if (bound := get(key)) is not None:
                    return bound
            return None
        if user:
            bound = get((user, ""))
            return bound if bound is not None else get((None, ""))
        if client_id:
            bound = get(("", client_id))
            return bound if bound is not None else get(("", None))
        return None

    def quota(self, user: str, client_id: str) -> float | None:
        """The bound holding a client (sanitized user, client id), or ``None``."""
        with self._lock:
            return self.quota_limit(*self.quota_metric_tags(user, client_id))

    # recording -------------------------------------------------------------------------
    def record_and_get_throttle_time_ms(self, user: str, client_id: str, value: float) -> int:
        """Record ``value`` for the client; the time (ms) it must wait when that took its
        rate over the bound (0 without quotas of this kind)."""
        if not self._enabled:
            return 0
        now = self._clock()
        with self._lock:
            tags = self.quota_metric_tags(user, client_id)
            bound = self.quota_limit(*tags)
            sensors = self._sensors_for(tags, now)
            sensors.rate.record(now, value)
            if bound is None:
                return 0
            throttle = sensors.rate.throttle_ms(now, bound)
        if self._max_throttle_ms is not None:
            throttle = min(throttle, self._max_throttle_ms)
        return min(round(throttle), _INT32_MAX)  # throttle_time_ms is an int32

    def record_no_throttle(self, user: str, client_id: str, value: float) -> None:
        """Record ``value`` without a check: the next request pays for it."""
        if not self._enabled:
            return
        now = self._clock()
        with self._lock:
            tags = self.quota_metric_tags(user, client_id)
            self._sensors_for(tags, now).rate.record(now, value)

    def unrecord(self, user: str, client_id: str, value: float) -> None:
        """Take back ``value`` recorded for the client (Kafka's unrecordQuotaSensor: a
        throttled Fetch is answered without its bytes)."""
        self.record_no_throttle(user, client_id, -value)

    def max_value_in_quota_window(self, user: str, client_id: str) -> int | None:
        """The most one request may record without being throttled for certain, even
        after a quiet window (Kafka's getMaxValueInQuotaWindow): the bound over
        ``samples - 1`` windows; ``None`` when no bound holds the client."""
        bound = self.quota(user, client_id) if self._enabled else None
        if bound is None:
            return None
        return min(int(bound * (self._samples - 1) * self._window_s), _INT32_MAX)

    def record_throttle(self, user: str, client_id: str, throttle_ms: int) -> None:
        """A client was throttled for ``throttle_ms`` (the throttle-time metric)."""
        now = self._clock()
        with self._lock:
            tags = self.quota_metric_tags(user, client_id)
            self._sensors_for(tags, now).throttle.record(now, float(throttle_ms))

    def _sensors_for(self, tags: tuple[str, str], now: float) -> QuotaSensors:
        sensors = self._sensors.get(tags)
        if sensors is None:
            if now - self._last_sweep > 60.0:
                self._sweep(now)
            sensors = self._sensors[tags] = self._new_sensors(now)
            self._register(tags, sensors)
        sensors.last_used = now
        return sensors

    def _new_sensors(self, now: float) -> QuotaSensors:
        return QuotaSensors(SampledRate(self._samples, self._window_s))

    def _sweep(self, now: float) -> None:
        """Drop the sensors idle for Kafka's hour, with their metrics."""
        self._last_sweep = now
        for tags, sensors in list(self._sensors.items()):
            if now - sensors.last_used > SENSOR_EXPIRY_S:
                del self._sensors[tags]
                if self._metrics is not None:
                    labels = _labels(tags)
                    for name in self._gauge_names:
                        self._metrics.unregister_gauge(name, labels)

    def _register(self, tags: tuple[str, str], sensors: QuotaSensors) -> None:
        if self._metrics is None:
            return
        labels = _labels(tags)
        what = {
            QuotaKind.REQUEST: "request-time (percent of a thread)",
            QuotaKind.CONTROLLER_MUTATION: "mutation-rate",
        }.get(self.kind, "byte-rate")
        self._metrics.register_gauge(
            self._rate_name,
            f"Tracking {what} per user/client-id ({self.kind.group} quota).",
            lambda: self._measure(sensors.rate),
            labels,
        )
        self._metrics.register_gauge(
            self._throttle_name,
            f"Tracking average throttle-time (ms) per user/client-id ({self.kind.group} quota).",
            lambda: self._measure(sensors.throttle),
            labels,
        )

    def _measure(self, stat: SampledRate | SampledAverage) -> float:
        with self._lock:
            return stat.measure(self._clock())


def _labels(tags: tuple[str, str]) -> dict[str, str]:
    return {"user": tags[0], "client_id": tags[1]}


def _shown(name: str | None) -> str:
    return "<default>" if name is None else name
