"""ClientQuotas: the broker's quota managers (Kafka's QuotaManagers) and how a response
pays for its request (KIP-219).

One ClientQuotaManager per kind: produce (``producer_byte_rate``, over the request's
bytes), fetch (``consumer_byte_rate``, over the response's bytes), request
(``request_percentage``, over the time the handler and network threads spent on the
request, as a percentage of one thread) and controller mutation
(``controller_mutation_rate``, over the partitions CreateTopics, DeleteTopics and
CreatePartitions change: see ``controller_mutation``). When a response is handed back,
each kind records its value; the largest throttle goes into the response's
``throttle_time_ms`` at once and the connection is muted for that long. A throttled
consumer's Fetch is answered empty and its bytes are not counted (Kafka's
handleFetchRequest). A ShareFetch counts against the same fetch quota (Kafka's
handleShareFetchRequest); throttled, it keeps the records it acquired for its member, and
its bytes stay counted. Controller requests, followers' fetches, the brokers'
AddPartitionsToTxn (v4+) and the control plane are never throttled; an acks=0 Produce only
by its bytes.

Configs come from the metadata store (``ClientQuotaStore``) at start-up and from change
notifications; IP entities' ``connection_creation_rate`` goes to ConnectionQuotas
(KIP-612).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping
from typing import Any

from kplane.broker.config.kafka_config import KafkaConfig
from kplane.broker.metrics.registry import CONTROL_PLANE, BrokerMetrics
from kplane.broker.network.request_channel import Request
from kplane.broker.quota.controller_mutation import (
    ControllerMutationQuota,
    ControllerMutationQuotaManager,
)
from kplane.broker.quota.entity import (
    CLIENT_ID,
    IP,
    IP_CONNECTION_RATE,
    USER,
    QuotaEntity,
    entity_of_path,
)
from kplane.broker.quota.manager import ClientQuotaManager, QuotaKind
from kplane.broker.quota.store import ClientQuotaStore
from kplane.broker.security.scram import sanitize
from kplane.protocol.api_keys import ApiKey

QUOTA_WINDOW_NUM = "quota.window.num"
QUOTA_WINDOW_SIZE_SECONDS = "quota.window.size.seconds"
NANOS_TO_PERCENTAGE = 100.0 / 1e9
"""Kafka's NanosToPercentagePerSecond: a thread's nanoseconds as a percentage rate."""

EXEMPT_APIS = frozenset(
    {
        ApiKey.LEADER_AND_ISR,
        ApiKey.STOP_REPLICA,
        ApiKey.UPDATE_METADATA,
        ApiKey.CONTROLLED_SHUTDOWN,
        ApiKey.WRITE_TXN_MARKERS,
    }
)
"""Kafka's cluster-action APIs: inter-broker requests, never throttled."""

IpQuotaSink = Callable[[str | None, int | None], None]
"""Sets (a rate) or removes (``None``) the connection rate of an IP (``None``: default)."""


class ClientQuotas:
    """The produce, fetch and request quota managers, fed by the store's configs."""

    def __init__(
        self,
        config: KafkaConfig,
        store: ClientQuotaStore,
        metrics: BrokerMetrics | None = None,
        ip_quotas: IpQuotaSink | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self._ip_quotas = ip_quotas
        samples = config.get_int(QUOTA_WINDOW_NUM)
        window_s = float(config.get_int(QUOTA_WINDOW_SIZE_SECONDS))
        self.produce = ClientQuotaManager(QuotaKind.PRODUCE, samples, window_s, metrics, clock)
        self.fetch = ClientQuotaManager(QuotaKind.FETCH, samples, window_s, metrics, clock)
        # Kafka bounds a request-quota throttle by one window (ClientRequestQuotaManager).
        self.request = ClientQuotaManager(
            QuotaKind.REQUEST, samples, window_s, metrics, clock, max_throttle_ms=window_s * 1000.0
        )
        self.controller_mutation = ControllerMutationQuotaManager(samples, window_s, metrics, clock)
        self.managers = (self.produce, self.fetch, self.request, self.controller_mutation)
        self._applied: set[QuotaEntity] = set()

    # configs ---------------------------------------------------------------------------
    def load(self) -> None:
        """Make the store's quotas the ones applied (at start-up, and once the change
        listener follows the store, for what changed in between)."""
        stored = self.store.all()
        for entity in self._applied - stored.keys():
            self.apply(entity, {})
        for entity, values in stored.items():
            self.apply(entity, values)

    def on_config_change(self, entity_path: str) -> None:
        """A change notification: re-read the entity it names (if a quota entity)."""
        entity = entity_of_path(entity_path)
        if entity is not None:
            self.apply(entity, self.store.read(entity))

    def apply(self, entity: QuotaEntity, values: Mapping[str, float]) -> None:
        """Make ``values`` the entity's quotas (keys missing are removed)."""
        if values:
            self._applied.add(entity)
        else:
            self._applied.discard(entity)
        has_ip, ip = entity.get(IP)
        if has_ip:
            if self._ip_quotas is not None:
                rate = values.get(IP_CONNECTION_RATE)
                self._ip_quotas(ip, None if rate is None else int(rate))
            return
        has_user, user = entity.get(USER)
        has_client, client_id = entity.get(CLIENT_ID)
        sanitized = sanitize(user) if user is not None else None
        for manager in self.managers:  # as Kafka's config handlers: every kind, each time
            bound = values.get(manager.kind.config_key)
            manager.update_quota(sanitized, client_id, has_user, has_client, bound)

    # controller mutations (KIP-599) ----------------------------------------------------
    def controller_mutation_quota(
        self, request: Request, strict_since: int
    ) -> ControllerMutationQuota | None:
        """The mutation quota of one CreateTopics, DeleteTopics or CreatePartitions (strict
        from ``strict_since`` on), its throttle handed to the response; ``None`` when it is
        not limited (no such quota was ever set, or the control plane)."""
        quota = self._mutation_quota(request, request.header.api_version >= strict_since)
        if quota is not None:
            request.api_throttle_ms = quota.throttle_time_ms
        return quota

    def auto_creation_quota(self, request: Request) -> ControllerMutationQuota | None:
        """The mutation quota that the topics a Metadata request creates count against:
        permissive, and the Metadata answer is not throttled for it (Kafka's
        ``newPermissiveQuotaFor`` in handleTopicMetadataRequest); ``None`` when not limited."""
        return self._mutation_quota(request, strict=False)

    def _mutation_quota(self, request: Request, strict: bool) -> ControllerMutationQuota | None:
        if not self.controller_mutation.enabled or request.plane == CONTROL_PLANE:
            return None
        return self.controller_mutation.quota_for(
            _quota_user(request.principal), request.header.client_id or "", strict
        )

    # the response path (RequestChannel's ResponseThrottler) ----------------------------
    def throttle_time_ms(self, request: Request, body: Any, response_bytes: int) -> int:
        """Record the request against the client's quotas; the throttle time (ms)."""
        if request.api_throttle_ms is None and not (
            self.produce.enabled or self.fetch.enabled or self.request.enabled
        ):
            return 0  # no quota was ever set: nothing to record
        api_key = request.header.api_key
        if request.plane == CONTROL_PLANE or api_key in EXEMPT_APIS:
            return 0
        if api_key == ApiKey.FETCH and body.replica_id >= 0:
            return 0  # a follower's fetch (FetchRequestData has its id whichever version)
        if api_key == ApiKey.ADD_PARTITIONS_TO_TXN and request.header.api_version >= 4:
            return 0  # only brokers send these (ClusterAction)
        user = _quota_user(request.principal)
        client_id = request.header.client_id or ""
        bandwidth_ms = 0
        bandwidth = None
        if api_key == ApiKey.PRODUCE:
            bandwidth = self.produce
            bandwidth_ms = bandwidth.record_and_get_throttle_time_ms(
                user, client_id, float(len(request.frame))
            )
        elif api_key in (ApiKey.FETCH, ApiKey.SHARE_FETCH):
            bandwidth = self.fetch
            bandwidth_ms = bandwidth.record_and_get_throttle_time_ms(
                user, client_id, float(response_bytes)
            )
        elif request.api_throttle_ms is not None:  # a controller mutation quota's
            bandwidth = self.controller_mutation
            bandwidth_ms = request.api_throttle_ms()
        request_ms = 0
        # an acks=0 Produce is exempt from the request quota (Kafka's), not its bandwidth
        if self.request.enabled and not (api_key == ApiKey.PRODUCE and body.acks == 0):
            request_ms = self.request.record_and_get_throttle_time_ms(
                user, client_id, _thread_ns(request) * NANOS_TO_PERCENTAGE
            )
            quota = self.request

            def network_time(ns: int) -> None:
                quota.record_no_throttle(user, client_id, ns * NANOS_TO_PERCENTAGE)

            request.record_network_time = network_time
        if api_key == ApiKey.FETCH and (bandwidth_ms or request_ms):
            # answered empty (throttle_time.throttled_fetch): its bytes are not counted
            self.fetch.unrecord(user, client_id, float(response_bytes))
        if bandwidth is not None and bandwidth_ms > request_ms:
            bandwidth.record_throttle(user, client_id, bandwidth_ms)
            return bandwidth_ms
        if request_ms > 0:
            self.request.record_throttle(user, client_id, request_ms)
        return request_ms

    # Fetch sizes -----------------------------------------------------------------------
    def max_fetch_bytes(self, request: Request) -> int | None:
        """What a consumer's Fetch may read at most: Kafka's getMaxValueInQuotaWindow, the
        bytes its fetch quota allows over ``quota.window.num - 1`` windows (more is throttled
        even after a quiet window); ``None`` without a fetch quota for it."""
        if not self.fetch.enabled or request.plane == CONTROL_PLANE:
            return None
        return self.fetch.max_value_in_quota_window(
            _quota_user(request.principal), request.header.client_id or ""
        )


@functools.lru_cache(maxsize=1024)
def _quota_user(principal: str) -> str:
    """The sanitized ``principal.getName`` quotas know a user by: ``User:alice`` -> ``alice``."""
    return sanitize(principal.partition(":")[2] or principal)


def _thread_ns(request: Request) -> int:
    """The ns a handler spent on the request so far (to its first return when parked)."""
    end = request.api_local_complete_ns or time.monotonic_ns()
    return max(0, end - request.dequeue_ns)
