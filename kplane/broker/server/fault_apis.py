"""KplaneFaults (kplane's own API key 10000, not Kafka's): ``kplane faults`` driving a running
broker's FaultInjector over the wire. Served, and listed by ApiVersions, only with
``kplane.faults.enable=true``; with an authorizer, only super users may use it.

Actions: ``push-errors`` (api key, error codes), ``rtt`` (ms, listener or all),
``drop-connections`` (listener), ``down`` (every listener closed for ``down_ms``, then
reopened on the same ports), ``clear``, ``describe``. Actions that close connections run just
after the answer is sent, so the caller gets it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

import structlog

from kplane.broker.security.authorizer import AclAuthorizer
from kplane.broker.server.context import Handler, RequestContext
from kplane.broker.server.faults import FaultInjector
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode

log = structlog.get_logger(__name__)
AFTER_ANSWER_S = 0.1
"""How long a connection-closing action waits for its own answer to leave."""


class FaultApis:
    """The KplaneFaults handler."""

    def __init__(
        self, faults: Callable[[], FaultInjector], authorizer: AclAuthorizer | None
    ) -> None:
        self.faults = faults
        self.authorizer = authorizer

    def handlers(self) -> Mapping[int, Handler]:
        return {ApiKey.KPLANE_FAULTS: self.handle_faults}

    def handle_faults(self, ctx: RequestContext) -> None:
        if self.authorizer is not None and ctx.principal not in self.authorizer.super_users:
            self._answer(ctx, ErrorCode.cluster_authorization_failed,
                         f"fault injection is for super users, not {ctx.principal}")
            return
        faults = self.faults()
        body = ctx.body
        action = body.action
        later: Callable[[], None] | None = None
        if action == "push-errors":
            try:
                errors = [ErrorCode(int(code)) for code in body.error_codes]
            except ValueError as exc:
                self._answer(ctx, ErrorCode.invalid_request, str(exc))
                return
            faults.push_request_errors(int(body.api_key), *errors)
        elif action == "rtt":
            faults.set_rtt(int(body.rtt_ms), body.listener)
        elif action == "drop-connections":
            if body.listener is None:
                self._answer(ctx, ErrorCode.invalid_request, "drop-connections needs a listener")
                return
            later = lambda: faults.drop_connections(body.listener)  # noqa: E731
        elif action == "down":
            seconds = max(0, int(body.down_ms)) / 1000.0

            def down_then_up() -> None:
                faults.broker_down()
                timer = threading.Timer(seconds, faults.broker_up)
                timer.daemon = True
                timer.start()

            later = down_then_up
        elif action == "clear":
            faults.clear()
        elif action != "describe":
            self._answer(ctx, ErrorCode.invalid_request, f"unknown action {action!r}")
            return
        log.info("fault injection", action=action, principal=ctx.principal)
        self._answer(ctx, ErrorCode.none, None)
        if later is not None:
            timer = threading.Timer(AFTER_ANSWER_S, later)
            timer.daemon = True
            timer.start()

    def _answer(self, ctx: RequestContext, error: ErrorCode, message: str | None) -> None:
        queued = self.faults().queued() if error == ErrorCode.none else {}
        ctx.respond(
            ctx.make_response(
                error_code=error,
                error_message=message,
                queued=tuple(
                    ctx.make("QueuedErrors", api_key=key, count=count)
                    for key, count in sorted(queued.items())
                ),
            )
        )
