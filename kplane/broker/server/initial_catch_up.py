"""The broker's initial metadata catch-up: client requests wait for the controller's metadata.

A broker accepts connections before the controller's first UpdateMetadata reaches it (the
controller reaches every broker, itself included, over the network). Answered in that
window, a Metadata request would name no broker and no controller, which some clients
never retry (librdkafka's admin client then waits for a controller until it times out).
A KRaft broker enables request processing only once it has caught up with the metadata;
kplane holds each client request that arrives before then and hands it back to its
plane's queue once caught up. ApiVersions, SASL and the controller's own requests are
served at once, since the catch-up needs them.
"""

from __future__ import annotations

import threading

import structlog

from kplane.broker.network.request_channel import Request, RequestChannel
from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey

log = structlog.get_logger(__name__)

SERVED_AT_ONCE = frozenset(
    {
        ApiKey.API_VERSIONS,
        ApiKey.SASL_HANDSHAKE,
        ApiKey.SASL_AUTHENTICATE,
        ApiKey.LEADER_AND_ISR,
        ApiKey.UPDATE_METADATA,
        ApiKey.STOP_REPLICA,
        ApiKey.CONTROLLED_SHUTDOWN,
    }
)
"""What the catch-up itself needs: connecting, authenticating, the controller's requests."""


class InitialCatchUp:
    """Holds client requests until :meth:`complete`, then re-queues them in arrival order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: list[tuple[Request, RequestChannel]] | None = []

    @property
    def caught_up(self) -> bool:
        """Whether requests are served as they come."""
        return self._held is None

    def hold(self, request: Request, channel: RequestChannel) -> bool:
        """Keep ``request`` for later (True) unless it is served at once or the broker has
        caught up (False: handle it now)."""
        if request.header.api_key in SERVED_AT_ONCE:
            return False
        with self._lock:
            if self._held is None:
                return False
            self._held.append((request, channel))
        log.debug(
            "request held until the controller's metadata names this broker",
            api=api.API_NAMES.get(request.header.api_key),
            connection=request.connection_id,
            listener=request.listener_name,
        )
        return True

    def complete(self) -> None:
        """Caught up (or given up waiting, or shutting down): the held requests go back to
        their planes' queues, and later ones are served as they come."""
        with self._lock:
            held, self._held = self._held, None
        if held:
            log.debug("requests held for the controller's metadata released", count=len(held))
        for request, channel in held or ():
            channel.send_request(request)
