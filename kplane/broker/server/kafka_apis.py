"""KafkaApis: decode a request and dispatch it to the handler of its API."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from functools import partial

import structlog

from kplane.broker.logging_setup import exception_reason
from kplane.broker.network.request_channel import Request, RequestChannel, Response
from kplane.broker.security.authorizer import AclAuthorizer
from kplane.broker.server.api_versions import api_versions_response
from kplane.broker.server.context import ApiFamily, Handler, RequestContext
from kplane.broker.server.faults import FaultInjector, error_response
from kplane.broker.server.initial_catch_up import InitialCatchUp
from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode
from kplane.protocol.framing import response_frame_prefix

log = structlog.get_logger(__name__)


class KafkaApis:
    """One table from api key to handler, filled by API families; serves every plane."""

    def __init__(
        self,
        families: Iterable[ApiFamily],
        authorizer: AclAuthorizer | None = None,
        catch_up: InitialCatchUp | None = None,
    ) -> None:
        self.authorizer = authorizer
        self.catch_up = catch_up
        """Until the broker has the controller's metadata: holds client requests."""
        self.faults: FaultInjector | None = None
        """Set when ``kplane.faults.enable`` (or a test fixture) allows fault injection."""
        self.handlers: dict[int, Handler] = {}
        for family in families:
            for key, handler in family.handlers().items():
                if key in self.handlers:
                    raise ValueError(f"api key {key} registered twice")
                self.handlers[key] = handler

    def supported_versions(self) -> Mapping[int, range]:
        """api key -> versions served: every version kio has for an implemented API."""
        return {key: api.kio_versions(key) for key in sorted(self.handlers)}

    def is_known_api(self, api_key: int) -> bool:
        """Whether requests with ``api_key`` are served at all."""
        return api_key in self.handlers

    def handle(self, request: Request, channel: RequestChannel) -> None:
        """Decode ``request`` and run its handler; bad input closes only where Kafka does."""
        catch_up = self.catch_up
        if catch_up is not None:
            if catch_up.caught_up:
                self.catch_up = None
            elif catch_up.hold(request, channel):
                return
        header = request.header
        versions = api.kio_versions(header.api_key)
        if header.api_version not in versions:
            if header.api_key == ApiKey.API_VERSIONS:
                self._unsupported_api_versions(request, channel)
                return
            log.warning(
                "closing connection: unsupported api version",
                connection=request.connection_id,
                api=api.API_NAMES.get(header.api_key),
                api_version=header.api_version,
                supported=f"{versions.start}-{versions.stop - 1}",
            )
            channel.send_response(Response(request, None, close_connection=True))
            return
        try:
            body = api.read_request(
                header.api_key, header.api_version, request.frame, header.body_offset
            )
        except Exception as exc:
            log.warning(
                "closing connection: malformed request",
                connection=request.connection_id,
                listener=request.listener_name,
                api=api.API_NAMES.get(header.api_key),
                api_version=header.api_version,
                reason=exception_reason(exc),
            )
            channel.send_response(Response(request, None, close_connection=True))
            return
        ctx = RequestContext(request, body, channel, self.authorizer)
        faults = self.faults
        if faults is not None and faults.active:
            self._with_faults(faults, ctx)
            return
        self._run(ctx)

    def _run(self, ctx: RequestContext) -> None:
        try:
            self.handlers[ctx.api_key](ctx)
        except Exception as exc:
            ctx.fail(exc)

    def _with_faults(self, faults: FaultInjector, ctx: RequestContext) -> None:
        """A queued error answers instead of the handler; a round-trip time delays both."""
        error = faults.take_error(ctx.api_key)
        if error is None:
            answer = partial(self._run, ctx)
        else:
            log.info(
                "fault injected: request error",
                api=api.API_NAMES.get(ctx.api_key),
                error=error.name,
                connection=ctx.request.connection_id,
            )
            response = error_response(ctx.api_key, ctx.api_version, ctx.body, error)
            answer = partial(ctx.respond, response)
        delay = faults.rtt_s(ctx.listener_name)
        if delay > 0:
            timer = threading.Timer(delay, answer)
            timer.daemon = True
            timer.start()
        else:
            answer()

    def _unsupported_api_versions(self, request: Request, channel: RequestChannel) -> None:
        """Kafka answers an unknown ApiVersions version with a v0 response and error 35."""
        body = api_versions_response(0, self.supported_versions(), ErrorCode.unsupported_version)
        payload = api.encode(body)
        prefix = response_frame_prefix(
            ApiKey.API_VERSIONS, 0, request.header.correlation_id, len(payload)
        )
        channel.send_response(Response(request, [prefix, payload]))
