"""SaslHandshake and SaslAuthenticate: authenticate a SASL connection, once.

The exchange runs in SaslAuthenticate requests, one or more (SCRAM takes two). After a
SaslHandshake v0 Kafka expects raw SASL tokens without Kafka framing, which kplane does
not speak: such a client's first token is refused as a malformed request.
"""

from __future__ import annotations

from collections.abc import Mapping

import structlog

from kplane.broker.security.sasl import SaslListener
from kplane.broker.security.sasl_server import SaslAuthenticationFailed
from kplane.broker.server.context import Handler, RequestContext
from kplane.broker.utils.timer import SystemTimer
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode

log = structlog.get_logger(__name__)


class SaslApis:
    """The SASL exchange on each SASL listener."""

    def __init__(
        self, listeners: Mapping[str, SaslListener], timer: SystemTimer, failure_delay_ms: int
    ) -> None:
        self.listeners = listeners  # shared: changed at runtime by DynamicListenerSecurity
        self.timer = timer
        self.failure_delay_ms = failure_delay_ms

    def handlers(self) -> Mapping[int, Handler]:
        return {
            ApiKey.SASL_HANDSHAKE: self.handle_handshake,
            ApiKey.SASL_AUTHENTICATE: self.handle_authenticate,
        }

    def handle_handshake(self, ctx: RequestContext) -> None:
        session = ctx.request.session
        listener = self.listeners.get(ctx.listener_name)
        mechanisms = listener.mechanisms if listener else ()
        mechanism = ctx.body.mechanism
        if session is None or listener is None or session.authenticated:
            # Outside an authentication Kafka answers in KafkaApis and keeps the connection.
            log.info(
                "SASL handshake refused",
                listener=ctx.listener_name,
                reason="not a SASL listener" if session is None else "already authenticated",
            )
            ctx.respond(
                ctx.make_response(error_code=ErrorCode.illegal_sasl_state, mechanisms=mechanisms),
            )
            return
        if mechanism not in mechanisms:
            log.info("SASL mechanism not enabled", listener=ctx.listener_name, mechanism=mechanism)
            ctx.respond(
                ctx.make_response(
                    error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=mechanisms
                ),
                close_connection=True,
            )
            return
        session.mechanism = mechanism
        session.server = listener.servers[mechanism]()
        ctx.respond(ctx.make_response(error_code=ErrorCode.none, mechanisms=mechanisms))

    def handle_authenticate(self, ctx: RequestContext) -> None:
        session = ctx.request.session
        listener = self.listeners.get(ctx.listener_name)
        if session is None or listener is None or session.authenticated:
            # Outside an authentication Kafka answers in KafkaApis and keeps the connection.
            ctx.respond(
                ctx.make_response(
                    error_code=ErrorCode.illegal_sasl_state,
                    error_message="no SASL exchange on this connection",
                    auth_bytes=b"",
                )
            )
            return
        if session.server is None:
            ctx.respond(
                ctx.make_response(
                    error_code=ErrorCode.illegal_sasl_state,
                    error_message="SaslAuthenticate without a SaslHandshake first",
                    auth_bytes=b"",
                ),
                close_connection=True,
            )
            return
        server = session.server
        try:
            challenge = server.evaluate(bytes(ctx.body.auth_bytes))
        except SaslAuthenticationFailed as exc:
            log.info(
                "SASL authentication failed",
                listener=ctx.listener_name,
                client=f"{ctx.request.client_host}:{ctx.request.client_port}",
                mechanism=session.mechanism,
                user=server.user,
                reason=str(exc),
            )
            response = ctx.make_response(
                error_code=ErrorCode.sasl_authentication_failed,
                error_message=str(exc),
                auth_bytes=b"",
            )
            # Kafka delays the answer (connection.failed.authentication.delay.ms), then closes.
            self.timer.schedule(
                self.failure_delay_ms, lambda: ctx.respond(response, close_connection=True)
            )
            return
        if server.complete:
            session.authenticated = True
            session.principal = f"User:{server.user}"
            session.token_authenticated = server.token_authenticated
            session.server = None
        ctx.respond(
            ctx.make_response(error_code=ErrorCode.none, error_message=None, auth_bytes=challenge)
        )
