"""ConnectionQuotas: Kafka's connection limits (KIP-402; the broker configs of KIP-612),
as Kafka's ``ConnectionQuotas`` keeps them, and a KIP-226 reconfigurable.

Every Acceptor asks ``inc`` before it hands a socket to a Processor, and the Processor
calls ``dec`` when the connection is gone:

- ``max.connections`` (broker-wide) and ``listener.name.<l>.max.connections`` (a listener's
  own limit is the broker-wide value unless set, as in Kafka): the Acceptor waits until a
  slot frees (it stops accepting; connections wait in the listen backlog). The
  inter-broker and control-plane listeners are exempt from the broker-wide count while
  there are other listeners; a connection to them past it makes the network threads of
  the other listeners close their least recently used connection.
- ``max.connection.creation.rate`` (broker-wide, not for the inter-broker and
  control-plane listeners) and ``listener.name.<l>.max.connection.creation.rate``: the
  Acceptor delays accepting until the rates, measured as Kafka measures a quota, are back
  under their bounds (at most one sample window per connection).
- ``max.connections.per.ip`` and ``max.connections.per.ip.overrides``: a connection past
  its address's limit is closed at once (``TooManyConnections``).
- IP quotas (KIP-612, ``connection_creation_rate`` of ``/config/ips/<ip>`` and
  ``/config/ips/<default>``, set by the client quotas through
  ``update_ip_connection_rate_quota``): a connection that takes its address's creation
  rate over the quota is not counted (``ConnectionThrottled``, with the time the rate needs
  to come back, at most one sample window); the Acceptor closes it once that time passed.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from kplane.broker.config.errors import ConfigException
from kplane.broker.config.kafka_config import KafkaConfig
from kplane.broker.config.validators import parse_host_counts
from kplane.broker.metrics.idle import IdleMeter
from kplane.broker.metrics.registry import (
    ACCEPTOR_BLOCKED_PERCENT,
    BROKER_CONNECTION_ACCEPT_RATE,
    CONNECTION_ACCEPT_RATE,
    CONNECTION_ACCEPT_THROTTLE_TIME,
    CONNECTION_COUNT,
    CONNECTION_CREATION_TOTAL,
    CONTROL_PLANE_ACCEPTOR_BLOCKED_PERCENT,
    BrokerMetrics,
    known_doc,
)
from kplane.broker.network.sampled_stats import SampledAverage, SampledRate

log = structlog.get_logger(__name__)

MAX_CONNECTIONS = "max.connections"
MAX_CONNECTIONS_PER_IP = "max.connections.per.ip"
MAX_CONNECTIONS_PER_IP_OVERRIDES = "max.connections.per.ip.overrides"
MAX_CONNECTION_CREATION_RATE = "max.connection.creation.rate"
_IP_SENSORS_KEPT = 1024
"""Addresses whose connection rate is kept before quiet ones are forgotten."""


class TooManyConnections(Exception):
    """The client's address already has its limit of connections."""

    def __init__(self, host: str, limit: int) -> None:
        super().__init__(f"{host} already has the configured maximum of {limit} connections")
        self.host = host
        self.limit = limit


class ConnectionThrottled(TooManyConnections):
    """The client's address is over its connection creation rate (KIP-612)."""

    def __init__(self, host: str, rate: int, throttle_ms: float) -> None:
        Exception.__init__(
            self, f"{host} is over its connection creation rate of {rate}/s ({throttle_ms:.0f} ms)"
        )
        self.host = host
        self.limit = rate
        self.throttle_ms = throttle_ms


class AcceptorStopped(Exception):
    """The Acceptor stopped while it waited for a slot."""


def client_host(address: str) -> str:
    """The address connections are counted by (an IPv4-mapped IPv6 address as IPv4)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


@dataclass
class _ListenerQuota:
    """One listener's connections, limits, rate and throttle times."""

    max_connections: int
    max_rate: int
    blocked: IdleMeter | None
    count: int = 0
    created: int = 0
    rate: SampledRate = field(default_factory=SampledRate)
    throttle: SampledAverage = field(default_factory=SampledAverage)


class ConnectionQuotas:
    """Connection counts per address, per listener and for the broker, and the limits on
    them; thread-safe (the Acceptors wait on its condition)."""

    reconfigurable_configs = frozenset(
        {
            MAX_CONNECTIONS,
            MAX_CONNECTIONS_PER_IP,
            MAX_CONNECTIONS_PER_IP_OVERRIDES,
            MAX_CONNECTION_CREATION_RATE,
            # a listener added at runtime reads its limits from the new config (this is
            # registered before DynamicListenerConfig, so it has it when the listener comes)
            "listeners",
        }
    )

    def __init__(self, config: KafkaConfig, metrics: BrokerMetrics | None = None) -> None:
        self.validate_reconfiguration(config)
        self._cond = threading.Condition()
        self._metrics = metrics
        self._by_host: dict[str, int] = {}
        self._listeners: dict[str, _ListenerQuota] = {}
        self._total = 0
        self._rate = SampledRate()  # every listener's but the protected ones'
        self._protected = frozenset(
            name
            for name in (config.inter_broker_listener_name, config.control_plane_listener_name)
            if name
        )
        self._control = config.control_plane_listener_name
        self._ip_rates: dict[str, int] = {}
        self._default_ip_rate: int | None = None
        self._ip_sensors: dict[str, SampledRate] = {}
        self._apply(config)
        if metrics is not None:
            metrics.register_gauge(
                BROKER_CONNECTION_ACCEPT_RATE,
                known_doc(BROKER_CONNECTION_ACCEPT_RATE),
                lambda: self._measure(self._rate),
            )

    # KIP-226 ---------------------------------------------------------------------------
    def validate_reconfiguration(self, new: KafkaConfig) -> None:
        """Kafka's checks: per-IP 0 needs overrides, overrides name hosts that resolve,
        each listener's limits (its own, else the broker-wide ones) are positive."""
        overrides = _resolve(new.get_str(MAX_CONNECTIONS_PER_IP_OVERRIDES))
        if new.get_int(MAX_CONNECTIONS_PER_IP) == 0 and not overrides:
            raise ConfigException(
                f"{MAX_CONNECTIONS_PER_IP} can be set to zero only if "
                f"{MAX_CONNECTIONS_PER_IP_OVERRIDES} is set",
                name=MAX_CONNECTIONS_PER_IP,
            )
        for endpoint in new.listeners:
            for name in (MAX_CONNECTIONS, MAX_CONNECTION_CREATION_RATE):
                value = new.listener_get(endpoint.listener_name, name)
                if value <= 0:
                    raise ConfigException(
                        f"Invalid {name} {value} for listener {endpoint.listener_name}",
                        name=name,
                    )

    def reconfigure(self, old: KafkaConfig, new: KafkaConfig) -> None:
        """Apply the new limits; Acceptors waiting for a slot look again."""
        with self._cond:
            self._apply(new)
            self._cond.notify_all()
        log.info(
            "connection limits updated",
            max_connections=self._max_connections,
            max_connections_per_ip=self._max_per_host,
            max_connections_per_ip_overrides=self._overrides,
            max_connection_creation_rate=self._max_rate,
            listeners={
                name: (quota.max_connections, quota.max_rate)
                for name, quota in self._listeners.items()
            },
        )

    def _apply(self, config: KafkaConfig) -> None:
        self._config = config
        self._max_connections = config.get_int(MAX_CONNECTIONS)
        self._max_per_host = config.get_int(MAX_CONNECTIONS_PER_IP)
        self._overrides = _resolve(config.get_str(MAX_CONNECTIONS_PER_IP_OVERRIDES))
        self._max_rate = config.get_int(MAX_CONNECTION_CREATION_RATE)
        for name, quota in self._listeners.items():
            quota.max_connections = self._listener_limit(name, MAX_CONNECTIONS)
            quota.max_rate = self._listener_limit(name, MAX_CONNECTION_CREATION_RATE)

    def _listener_limit(self, listener: str, name: str) -> int:
        """``listener.name.<listener>.<name>``, else the broker-wide value (as Kafka's
        listener quotas read their configs, prefix overrides over the rest)."""
        return int(self._config.listener_get(listener, name))

    # listeners -------------------------------------------------------------------------
    def add_listener(self, listener: str) -> None:
        """Count ``listener``'s connections (at start-up, or a listener added at runtime)."""
        blocked = None
        if self._metrics is not None:
            control = listener == self._control
            name = CONTROL_PLANE_ACCEPTOR_BLOCKED_PERCENT if control else ACCEPTOR_BLOCKED_PERCENT
            blocked = self._metrics.idle_meter(name, {"listener": listener})
        with self._cond:
            quota = _ListenerQuota(
                self._listener_limit(listener, MAX_CONNECTIONS),
                self._listener_limit(listener, MAX_CONNECTION_CREATION_RATE),
                blocked,
            )
            self._listeners[listener] = quota
            self._cond.notify_all()
        if self._metrics is not None:
            for metric, read in self._listener_gauges(quota).items():
                self._metrics.register_gauge(
                    metric, known_doc(metric), read, {"listener": listener}
                )

    def remove_listener(self, listener: str) -> None:
        """Stop counting ``listener`` (removed at runtime)."""
        with self._cond:
            quota = self._listeners.pop(listener, None)
            self._cond.notify_all()
        if quota is not None and self._metrics is not None:
            for metric in (*self._listener_gauges(quota), ACCEPTOR_BLOCKED_PERCENT):
                self._metrics.unregister_gauge(metric, {"listener": listener})

    def _listener_gauges(self, quota: _ListenerQuota) -> dict[str, Callable[[], float]]:
        return {
            CONNECTION_COUNT: lambda: float(quota.count),
            CONNECTION_CREATION_TOTAL: lambda: float(quota.created),
            CONNECTION_ACCEPT_RATE: lambda: self._measure(quota.rate),
            CONNECTION_ACCEPT_THROTTLE_TIME: lambda: self._measure(quota.throttle),
        }

    def _measure(self, stat: SampledRate | SampledAverage) -> float:
        with self._cond:
            return stat.measure(time.monotonic())

    # connections -----------------------------------------------------------------------
    def inc(self, listener: str, host: str, running: Callable[[], bool]) -> None:
        """Count a connection accepted on ``listener`` from ``host``, first waiting (while
        ``running``) for a slot and for the creation rate; TooManyConnections when
        ``host`` is at its limit, AcceptorStopped when the wait was cut short."""
        with self._cond:
            self._wait_for_slot(listener, running)
            self._record_ip_connection(host)
            limit = self._overrides.get(host, self._max_per_host)
            count = self._by_host.get(host, 0)
            if count >= limit:
                raise TooManyConnections(host, limit)
            self._by_host[host] = count + 1
            self._total += 1
            quota = self._listeners.get(listener)
            if quota is not None:
                quota.count += 1
                quota.created += 1

    def update_ip_connection_rate_quota(self, ip: str | None, rate: int | None) -> None:
        """Set (``rate``) or remove (``None``) the connection creation rate of ``ip``
        (``None``: every address without its own)."""
        with self._cond:
            if ip is None:
                self._default_ip_rate = rate
                self._ip_sensors.clear()
            else:
                host = client_host(ip)
                if rate is None:
                    self._ip_rates.pop(host, None)
                else:
                    self._ip_rates[host] = rate
                self._ip_sensors.pop(host, None)
        log.info("ip connection rate quota updated", ip=ip or "<default>", rate=rate)

    def _record_ip_connection(self, host: str) -> None:
        """Kafka's recordIpConnectionMaybeThrottle: count the connection in its address's
        rate; over the quota it is not counted and ConnectionThrottled is raised."""
        rate = self._ip_rates.get(host, self._default_ip_rate)
        if rate is None:
            return
        now = time.monotonic()
        sensor = self._ip_sensors.get(host)
        if sensor is None:
            if len(self._ip_sensors) >= _IP_SENSORS_KEPT:  # forget addresses gone quiet
                for quiet in [h for h, r in self._ip_sensors.items() if not r.measure(now)]:
                    del self._ip_sensors[quiet]
            sensor = self._ip_sensors[host] = SampledRate()
        throttle = sensor.record_and_throttle_ms(now, rate)
        if throttle > 0:
            sensor.record(now, -1.0)
            raise ConnectionThrottled(host, rate, throttle)

    def dec(self, listener: str, host: str) -> None:
        """A connection ``inc`` counted is gone."""
        with self._cond:
            count = self._by_host.get(host, 0) - 1
            if count > 0:
                self._by_host[host] = count
            else:
                self._by_host.pop(host, None)
            self._total -= 1
            quota = self._listeners.get(listener)
            if quota is not None:
                quota.count -= 1
            self._cond.notify_all()

    def wake(self) -> None:
        """Make a waiting Acceptor look at ``running`` again (it is stopping)."""
        with self._cond:
            self._cond.notify_all()

    def max_connections_exceeded(self, listener: str) -> bool:
        """Over ``max.connections`` because of an exempt listener: ``listener``'s network
        threads close their least recently used connection."""
        return self._total > self._max_connections and not self._is_protected(listener)

    def _is_protected(self, listener: str) -> bool:
        return listener in self._protected and len(self._listeners) > 1

    def _slot_available(self, listener: str) -> bool:
        quota = self._listeners.get(listener)
        if quota is not None and quota.count >= quota.max_connections:
            return False
        return self._is_protected(listener) or self._total < self._max_connections

    def _wait_for_slot(self, listener: str, running: Callable[[], bool]) -> None:
        """Record the connection in the creation rates; wait out the throttle they ask for
        and until a slot is free (Kafka's waitForConnectionSlot)."""
        now = time.monotonic()
        until = now + self._throttle_ms(listener, now) / 1000.0
        if until <= now and self._slot_available(listener):
            return
        started_ns = time.monotonic_ns()
        while True:
            if not running():
                raise AcceptorStopped
            remaining = until - time.monotonic()
            if remaining <= 0 and self._slot_available(listener):
                break
            self._cond.wait(remaining if remaining > 0 else None)
        quota = self._listeners.get(listener)
        if quota is not None and quota.blocked is not None:
            quota.blocked.record_idle(time.monotonic_ns() - started_ns)

    def _throttle_ms(self, listener: str, now: float) -> float:
        """The delay the broker-wide and the listener's creation rates ask for."""
        throttle = 0.0
        if not self._is_protected(listener):
            throttle = self._rate.record_and_throttle_ms(now, self._max_rate)
        quota = self._listeners.get(listener)
        if quota is not None:
            throttle = max(throttle, quota.rate.record_and_throttle_ms(now, quota.max_rate))
            if throttle > 0:
                quota.throttle.record(now, throttle)
        return throttle


def _resolve(overrides: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides`` by address: a host name counts for each of its
    addresses, as Kafka resolves it."""
    resolved: dict[str, int] = {}
    for host, count in parse_host_counts(MAX_CONNECTIONS_PER_IP_OVERRIDES, overrides).items():
        try:
            addresses = {client_host(str(ipaddress.ip_address(host)))}
        except ValueError:
            try:
                addresses = {client_host(str(a[4][0])) for a in socket.getaddrinfo(host, None)}
            except OSError as exc:
                raise ConfigException(
                    f"{MAX_CONNECTIONS_PER_IP_OVERRIDES}: cannot resolve {host}: {exc}",
                    name=MAX_CONNECTIONS_PER_IP_OVERRIDES,
                ) from None
        for address in addresses:
            resolved[address] = count
    return resolved
