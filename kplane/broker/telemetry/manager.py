"""ClientMetricsManager: KIP-714's client instances and subscriptions, as Kafka's
``ClientMetricsManager``.

Subscriptions are the CLIENT_METRICS resources in the metadata store, loaded at start-up
and re-read when a change notification names one. A client instance is created by its
first GetTelemetrySubscriptions (the broker assigns the id when the client sends the zero
uuid) or its first request here; it holds what the matching subscriptions ask of it (the
metrics, the shortest interval, the subscription id) and the times of its last requests.
A change of the subscriptions makes every instance re-evaluated at its next request, so a
push with the old subscription id gets UNKNOWN_SUBSCRIPTION_ID and the client asks again.
Instances expire after three push intervals (at least a minute) without a request, or when
more than 16384 are held (the least recently used first), as in Kafka; and, as Kafka's
connection-disconnect listener, when the connection that made (or last re-evaluated) the
instance closes: a client that comes back on another connection is a new instance to the
broker (its first push is not throttled).
"""

from __future__ import annotations

import base64
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import unquote

import structlog

from kplane.broker.telemetry.exporter import ClientMetricsExporter
from kplane.broker.telemetry.subscriptions import (
    ALL_METRICS,
    CLIENT_INSTANCE_ID,
    CLIENT_METRICS,
    DEFAULT_INTERVAL_MS,
    Subscription,
    java_hash_set_order,
    subscription_id,
    validate,
)
from kplane.protocol.compression import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NAMES,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    DecompressionError,
    decompress,
)
from kplane.protocol.errors import ErrorCode, KafkaError
from kplane.protocol.otlp import MetricsData, OtlpError, decode_metrics_data

log = structlog.get_logger(__name__)

ACCEPTED_COMPRESSION_TYPES = (
    COMPRESSION_ZSTD,
    COMPRESSION_LZ4,
    COMPRESSION_GZIP,
    COMPRESSION_SNAPPY,
)
"""What GetTelemetrySubscriptions offers, in Kafka's order (uncompressed is always taken)."""
MAX_INSTANCES = 16384
MIN_INSTANCE_EXPIRY_MS = 60_000
MAX_DECOMPRESSED_BYTES = 16 * 1024 * 1024
"""The most a pushed payload may inflate to."""
_ZERO = uuid.UUID(int=0)
_RESERVED = (_ZERO, uuid.UUID(int=1))


def kafka_uuid_text(value: uuid.UUID) -> str:
    """Kafka's text form of a Uuid: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


@dataclass
class GetResult:
    """What GetTelemetrySubscriptions answers (all but the error zero on an error)."""

    error: ErrorCode
    message: str | None = None
    instance_id: uuid.UUID = _ZERO
    subscription_id: int = 0
    accepted_compression_types: tuple[int, ...] = ()
    push_interval_ms: int = 0
    telemetry_max_bytes: int = 0
    requested_metrics: tuple[str, ...] = ()


@dataclass
class _Instance:
    instance_id: uuid.UUID
    client: dict[str, str | None]
    version: int
    subscription_id: int
    metrics: tuple[str, ...]
    interval_ms: int
    last_get_ms: float = -float("inf")
    last_push_ms: float = -float("inf")
    terminating: bool = False
    last_error: ErrorCode = ErrorCode.none
    expires_ms: float = field(default=0.0)
    connection_id: str = ""
    """The connection the instance was made or last re-evaluated on."""


class ConnectionWatch(Protocol):
    """The connection a request came on, as the manager sees it (a RequestContext)."""

    @property
    def connection_id(self) -> str: ...

    def on_connection_close(self, callback: Callable[[], object]) -> None: ...


class ClientMetricsManager:
    """Client instances and subscriptions; thread-safe (any handler thread calls it)."""

    def __init__(
        self,
        read_config: Callable[[str], Mapping[str, str]],
        list_names: Callable[[], list[str]],
        exporter: ClientMetricsExporter,
        telemetry_max_bytes: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``read_config(name)`` is ``/config/client-metrics/<name>`` (empty when gone),
        ``list_names()`` the names under ``/config/client-metrics``."""
        self._read = read_config
        self._list = list_names
        self.exporter = exporter
        self.telemetry_max_bytes = telemetry_max_bytes
        self._clock = clock
        self._lock = threading.Lock()
        self._subscriptions: dict[str, Subscription] = {}
        self._version = 0
        self._instances: OrderedDict[uuid.UUID, _Instance] = OrderedDict()
        self._next_sweep_ms = 0.0
        self._by_connection: dict[str, uuid.UUID] = {}
        """The instance each connection made last, until the connection closes."""

    # subscriptions -----------------------------------------------------------------
    def load(self) -> None:
        """Every subscription in the store (at start-up)."""
        for name in self._list():
            self.update_subscription(name, self._read(name))

    def on_config_change(self, entity_path: str) -> None:
        """A config change notification: re-read the subscription it names."""
        kind, _, node = entity_path.partition("/")
        if kind == CLIENT_METRICS and node:
            name = unquote(node)
            self.update_subscription(name, self._read(name))

    def update_subscription(self, name: str, configs: Mapping[str, str]) -> None:
        """Set (or, with no configs, remove) subscription ``name``."""
        with self._lock:
            if not configs:
                if self._subscriptions.pop(name, None) is not None:
                    self._version += 1
                    log.info("client metrics subscription removed", name=name)
                return
            try:
                subscription = validate(name, configs)
            except KafkaError as exc:
                log.warning("client metrics subscription ignored", name=name, reason=exc.message)
                return
            self._subscriptions[name] = subscription
            self._version += 1
        log.info(
            "client metrics subscription set",
            name=name,
            metrics=sorted(subscription.metrics),
            interval_ms=subscription.interval_ms,
            match=sorted(subscription.match),
        )

    def subscription_names(self) -> list[str]:
        with self._lock:
            return sorted(self._subscriptions)

    # GetTelemetrySubscriptions -----------------------------------------------------------
    def get_subscriptions(
        self,
        instance_id: uuid.UUID | None,
        client: Mapping[str, str | None],
        connection: ConnectionWatch | None = None,
    ) -> GetResult:
        """Kafka's ``processGetTelemetrySubscriptionRequest`` (``connection``: the one the
        request came on)."""
        now = self._now_ms()
        with self._lock:
            if instance_id is None or instance_id == _ZERO:
                instance_id = self._new_instance_id()
            instance, watch = self._instance(instance_id, client, now, connection)
        if watch and connection is not None:
            self._watch(connection)
        with self._lock:
            elapsed = now - max(instance.last_get_ms, instance.last_push_ms)
            retry = instance.last_error in (
                ErrorCode.unknown_subscription_id,
                ErrorCode.unsupported_compression_type,
            )
            if elapsed < instance.interval_ms and not retry:
                return GetResult(
                    ErrorCode.throttling_quota_exceeded,
                    f"Request from the client [{kafka_uuid_text(instance_id)}] arrived before "
                    "the next push interval time",
                )
            instance.last_get_ms = now
            instance.last_error = ErrorCode.none
            return GetResult(
                ErrorCode.none,
                None,
                instance_id,
                instance.subscription_id,
                ACCEPTED_COMPRESSION_TYPES,
                instance.interval_ms,
                self.telemetry_max_bytes,
                instance.metrics,
            )

    # PushTelemetry -------------------------------------------------------------------
    def push(
        self,
        instance_id: uuid.UUID | None,
        subscription: int,
        terminating: bool,
        compression_type: int,
        payload: bytes,
        client: Mapping[str, str | None],
        connection: ConnectionWatch | None = None,
    ) -> None:
        """Kafka's ``processPushTelemetryRequest``: KafkaError with Kafka's code when the
        push is refused; the metrics are exported when accepted."""
        if instance_id is None or instance_id in _RESERVED:
            raise KafkaError(
                ErrorCode.invalid_request,
                f"Invalid request from the client [{instance_id}], invalid client instance id",
            )
        text_id = kafka_uuid_text(instance_id)
        now = self._now_ms()
        with self._lock:
            instance, watch = self._instance(instance_id, client, now, connection)
        if watch and connection is not None:
            self._watch(connection)
        with self._lock:
            try:
                self._validate_push(
                    instance, text_id, subscription, terminating, compression_type, payload, now
                )
            except KafkaError as exc:
                instance.last_error = exc.code
                raise
            finally:
                instance.terminating = terminating
            keep_s = 3 * instance.interval_ms / 1000
            labels = {k: v or "" for k, v in instance.client.items()}
        if payload:
            try:
                data = _decode(compression_type, payload)
            except (OtlpError, DecompressionError) as exc:
                with self._lock:
                    instance.last_error = ErrorCode.invalid_record
                raise KafkaError(
                    ErrorCode.invalid_record, f"client metrics of {text_id} not decoded: {exc}"
                ) from None
            self.exporter.record(text_id, labels, data, keep_s)
        if terminating:
            self.exporter.forget(text_id)
        with self._lock:
            instance.last_error = ErrorCode.none

    def _validate_push(
        self,
        instance: _Instance,
        text_id: str,
        subscription: int,
        terminating: bool,
        compression_type: int,
        payload: bytes,
        now: float,
    ) -> None:
        if instance.terminating:
            raise KafkaError(
                ErrorCode.invalid_request,
                f"Client [{text_id}] sent the previous request with state terminating to "
                "TRUE, can not accept any requests after that",
            )
        # A push right after a GetTelemetrySubscriptions is taken early: clients jitter it.
        accept = instance.last_get_ms > instance.last_push_ms
        accept = accept or now - instance.last_push_ms >= instance.interval_ms
        if accept:
            instance.last_push_ms = now
        elif not terminating:
            raise KafkaError(
                ErrorCode.throttling_quota_exceeded,
                f"Request from the client [{text_id}] arrived before the next push interval time",
            )
        if subscription != instance.subscription_id:
            raise KafkaError(
                ErrorCode.unknown_subscription_id,
                f"Unknown client subscription id for the client [{text_id}]",
            )
        if compression_type not in COMPRESSION_NAMES:
            raise KafkaError(
                ErrorCode.unsupported_compression_type,
                f"Unknown compression type [{compression_type}] is received in telemetry "
                f"request from [{text_id}]",
            )
        if len(payload) > self.telemetry_max_bytes:
            raise KafkaError(
                ErrorCode.telemetry_too_large,
                f"Telemetry request from [{text_id}] is larger than the maximum allowed size "
                f"[{self.telemetry_max_bytes}]",
            )

    # instances -----------------------------------------------------------------------
    def instances(self) -> int:
        """Client instances held."""
        with self._lock:
            self._expire(self._now_ms(), every_ms=0.0)
            return len(self._instances)

    def _now_ms(self) -> float:
        return self._clock() * 1000

    def _new_instance_id(self) -> uuid.UUID:
        while True:
            candidate = uuid.uuid4()
            text = kafka_uuid_text(candidate)
            if candidate not in self._instances and not text.startswith("-"):
                return candidate

    def _instance(
        self,
        instance_id: uuid.UUID,
        client: Mapping[str, str | None],
        now: float,
        connection: ConnectionWatch | None,
    ) -> tuple[_Instance, bool]:
        """The instance of ``instance_id``, created or re-evaluated against the current
        subscriptions as needed (then bound to ``connection``); its expiry pushed back.
        True with it when ``connection``'s close is not looked out for yet."""
        self._expire(now)
        instance = self._instances.get(instance_id)
        stale = instance is not None and instance.expires_ms <= now
        watch = False
        if instance is None or stale or instance.version < self._version:
            known = dict(instance.client) if instance is not None and not stale else dict(client)
            known[CLIENT_INSTANCE_ID] = kafka_uuid_text(instance_id)
            instance = self._evaluate(instance_id, known)
            self._instances[instance_id] = instance
            if connection is not None:
                instance.connection_id = connection.connection_id
                watch = connection.connection_id not in self._by_connection
                self._by_connection[connection.connection_id] = instance_id
        self._instances.move_to_end(instance_id)
        instance.expires_ms = now + max(MIN_INSTANCE_EXPIRY_MS, 3 * instance.interval_ms)
        while len(self._instances) > MAX_INSTANCES:
            evicted, _ = self._instances.popitem(last=False)
            self.exporter.forget(kafka_uuid_text(evicted))
        return instance, watch

    def _watch(self, connection: ConnectionWatch) -> None:
        connection_id = connection.connection_id
        connection.on_connection_close(lambda: self.connection_closed(connection_id))

    def connection_closed(self, connection_id: str) -> None:
        """Kafka's connection-disconnect listener: forget the instance ``connection_id``
        made last, unless another connection has made it again since."""
        with self._lock:
            instance_id = self._by_connection.pop(connection_id, None)
            instance = self._instances.get(instance_id) if instance_id is not None else None
            if instance is not None and instance.connection_id == connection_id:
                del self._instances[instance.instance_id]

    def _evaluate(self, instance_id: uuid.UUID, client: dict[str, str | None]) -> _Instance:
        interval = DEFAULT_INTERVAL_MS
        metrics: set[str] = set()
        every = False
        for subscription in self._subscriptions.values():
            if subscription.matches(client):
                every = every or ALL_METRICS in subscription.metrics
                metrics |= subscription.metrics
                interval = min(interval, subscription.interval_ms)
        if every:
            metrics = {ALL_METRICS}
        ordered = tuple(java_hash_set_order(metrics))
        return _Instance(
            instance_id,
            client,
            self._version,
            subscription_id(ordered, interval, instance_id),
            ordered,
            interval,
        )

    def _expire(self, now: float, every_ms: float = 1000.0) -> None:
        """Drop the instances past their expiry (a sweep at most once a second)."""
        if now < self._next_sweep_ms:
            return
        self._next_sweep_ms = now + every_ms
        gone = [i for i, inst in self._instances.items() if inst.expires_ms <= now]
        for instance_id in gone:
            del self._instances[instance_id]


def _decode(compression_type: int, payload: bytes) -> MetricsData:
    if compression_type != 0:
        payload = decompress(compression_type, payload, MAX_DECOMPRESSED_BYTES)
    return decode_metrics_data(payload)
