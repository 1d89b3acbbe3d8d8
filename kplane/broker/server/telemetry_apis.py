"""Client telemetry (KIP-714): GetTelemetrySubscriptions (71), PushTelemetry (72) and
ListClientMetricsResources / ListConfigResources (74), over the ClientMetricsManager.

The broker always serves 71 and 72, as a Kafka broker with a telemetry receiver does; with no
subscription matching a client, GetTelemetrySubscriptions names no metrics and the client
pushes nothing. A client's software name and version, which subscriptions may match on and
which label its metrics, come from the ApiVersions request of its connection (Kafka's
ClientInformation): :meth:`TelemetryApis.noting_client_software` wraps the ApiVersions
handler to note them.
"""

from __future__ import annotations

import datetime
import threading
from collections import OrderedDict
from collections.abc import Mapping

import structlog

from kplane.broker.server.context import ApiFamily, Handler, RequestContext
from kplane.broker.telemetry.manager import ClientMetricsManager
from kplane.broker.telemetry.subscriptions import (
    CLIENT_ID,
    CLIENT_SOFTWARE_NAME,
    CLIENT_SOFTWARE_VERSION,
    CLIENT_SOURCE_ADDRESS,
    CLIENT_SOURCE_PORT,
)
from kplane.common.acl import AclOperation, AclResourceType
from kplane.common.config_ops import ConfigResourceType
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode, KafkaError

log = structlog.get_logger(__name__)

MAX_CONNECTIONS_NOTED = 16384
"""Connections whose client software is remembered (the least recently seen go first)."""
_QUIET = (ErrorCode.throttling_quota_exceeded, ErrorCode.unknown_subscription_id)
"""Errors a well-behaved client meets in its normal course: not logged."""


class TelemetryApis:
    """The KIP-714 handlers."""

    def __init__(self, manager: ClientMetricsManager) -> None:
        self.manager = manager
        self._software: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self._lock = threading.Lock()

    def handlers(self) -> Mapping[int, Handler]:
        return {
            ApiKey.GET_TELEMETRY_SUBSCRIPTIONS: self.handle_get_subscriptions,
            ApiKey.PUSH_TELEMETRY: self.handle_push,
            ApiKey.LIST_CONFIG_RESOURCES: self.handle_list_resources,
        }

    def noting_client_software(self, api_versions: ApiFamily) -> ApiFamily:
        """``api_versions`` with each request's client software name and version noted."""
        (handle,) = api_versions.handlers().values()
        outer = self

        class _Noting:
            def handlers(self) -> Mapping[int, Handler]:
                return {ApiKey.API_VERSIONS: self.handle}

            def handle(self, ctx: RequestContext) -> None:
                name = getattr(ctx.body, "client_software_name", "")
                if name:
                    version = getattr(ctx.body, "client_software_version", "")
                    outer._note(ctx.request.connection_id, name, version)
                handle(ctx)

        return _Noting()

    def _note(self, connection_id: str, name: str, version: str) -> None:
        with self._lock:
            self._software[connection_id] = (name, version)
            self._software.move_to_end(connection_id)
            while len(self._software) > MAX_CONNECTIONS_NOTED:
                self._software.popitem(last=False)

    def _client(self, ctx: RequestContext) -> dict[str, str | None]:
        """What subscriptions match a client on (but its instance id)."""
        with self._lock:
            name, version = self._software.get(ctx.request.connection_id, (None, None))
        return {
            CLIENT_ID: ctx.client_id,
            CLIENT_SOFTWARE_NAME: name,
            CLIENT_SOFTWARE_VERSION: version,
            CLIENT_SOURCE_ADDRESS: ctx.request.client_host,
            CLIENT_SOURCE_PORT: str(ctx.request.client_port),
        }

    # GetTelemetrySubscriptions -----------------------------------------------------------
    def handle_get_subscriptions(self, ctx: RequestContext) -> None:
        result = self.manager.get_subscriptions(ctx.body.client_instance_id, self._client(ctx), ctx)
        self._log(ctx, result.error, result.message)
        ctx.respond(
            ctx.make_response(
                throttle_time=datetime.timedelta(0),
                error_code=result.error,
                client_instance_id=result.instance_id,
                subscription_id=result.subscription_id,
                accepted_compression_types=result.accepted_compression_types,
                push_interval=datetime.timedelta(milliseconds=result.push_interval_ms),
                telemetry_max_bytes=result.telemetry_max_bytes,
                delta_temporality=result.error is ErrorCode.none,
                requested_metrics=result.requested_metrics,
            )
        )

    # PushTelemetry -------------------------------------------------------------------
    def handle_push(self, ctx: RequestContext) -> None:
        body = ctx.body
        error, message = ErrorCode.none, None
        try:
            self.manager.push(
                body.client_instance_id,
                int(body.subscription_id),
                bool(body.terminating),
                int(body.compression_type),
                bytes(body.metrics),
                self._client(ctx),
                ctx,
            )
        except KafkaError as exc:
            error, message = exc.code, exc.message
        self._log(ctx, error, message)
        ctx.respond(ctx.make_response(throttle_time=datetime.timedelta(0), error_code=error))

    # ListClientMetricsResources (v0) / ListConfigResources (v1) ---------------------------
    def handle_list_resources(self, ctx: RequestContext) -> None:
        """The subscriptions' names (CLUSTER DESCRIBE_CONFIGS); v1 lists client-metrics
        resources only, other resource types are refused."""
        error, names = ErrorCode.none, []
        types = [int(t) for t in getattr(ctx.body, "resource_types", ())]
        other = [t for t in types if t != ConfigResourceType.CLIENT_METRICS]
        if not ctx.authorized(AclOperation.DESCRIBE_CONFIGS, AclResourceType.CLUSTER):
            error = ErrorCode.cluster_authorization_failed
        elif other:
            error = ErrorCode.unsupported_version
            self._log(ctx, error, f"resource types {other} are not listed by this broker")
        else:
            names = self.manager.subscription_names()
        resources = tuple(
            ctx.make(
                "ConfigResource",
                resource_name=name,
                resource_type=int(ConfigResourceType.CLIENT_METRICS),
            )
            for name in names
        )
        ctx.respond(
            ctx.make_response(
                throttle_time=datetime.timedelta(0), error_code=error, config_resources=resources
            )
        )

    @staticmethod
    def _log(ctx: RequestContext, error: ErrorCode, message: str | None) -> None:
        if error is ErrorCode.none or error in _QUIET:
            return
        log.warning(
            "telemetry request refused",
            api=ctx.api_name,
            connection=ctx.request.connection_id,
            client_id=ctx.client_id,
            error=error.name,
            reason=message,
        )
