"""RequestContext: what a handler sees of one request, and how it answers."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import structlog

from kplane.broker.config.endpoint import SecurityProtocol
from kplane.broker.logging_setup import exception_reason
from kplane.broker.network.request_channel import Request, RequestChannel, Response
from kplane.broker.quota.throttle_time import patch_throttle_time, with_throttle_time
from kplane.broker.utils.file_region import Transferable
from kplane.common.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclOperation,
    AclResourceType,
)
from kplane.protocol import api
from kplane.protocol.errors import ErrorCode
from kplane.protocol.framing import response_frame_prefix

if TYPE_CHECKING:
    from kplane.broker.security.authorizer import AclAuthorizer

E = TypeVar("E")
T = TypeVar("T")
log = structlog.get_logger(__name__)


class RequestContext:
    """One decoded request: its origin (listener, protocol, principal) and its answer.

    ``respond`` may be called from any thread, once; a handler that parks the request in
    a purgatory answers later from the thread that completes it.
    """

    __slots__ = ("_answered", "_authorizer", "_channel", "_lock", "body", "request")

    def __init__(
        self,
        request: Request,
        body: Any,
        channel: RequestChannel,
        authorizer: AclAuthorizer | None = None,
    ) -> None:
        self.request = request
        self.body = body
        self._channel = channel
        self._authorizer = authorizer
        self._answered = False
        self._lock = threading.Lock()

    @property
    def api_key(self) -> int:
        return self.request.header.api_key

    @property
    def api_name(self) -> str | None:
        """Kafka's name of the request's API, for log lines."""
        return api.API_NAMES.get(self.api_key)

    @property
    def api_version(self) -> int:
        return self.request.header.api_version

    @property
    def client_id(self) -> str | None:
        return self.request.header.client_id

    @property
    def listener_name(self) -> str:
        return self.request.listener_name

    @property
    def security_protocol(self) -> SecurityProtocol:
        return self.request.security_protocol

    @property
    def principal(self) -> str:
        return self.request.principal

    @property
    def connection_id(self) -> str:
        return self.request.connection_id

    def on_connection_close(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` once when the connection this request came on closes (see
        ``Request.on_connection_close``)."""
        self.request.on_connection_close(callback)

    @property
    def authorization_enabled(self) -> bool:
        return self._authorizer is not None

    def authorized(
        self,
        operation: AclOperation,
        resource_type: AclResourceType,
        name: str = CLUSTER_NAME,
        log_denied: bool = True,
    ) -> bool:
        """Whether this request's principal may do ``operation`` on the resource (always,
        without an authorizer). The cluster is the default resource; filtering checks
        (which topics a listing shows) pass ``log_denied=False``."""
        authorizer = self._authorizer
        if authorizer is None:
            return True
        allowed = authorizer.authorize(
            self.principal, self.request.client_host, operation, resource_type, name
        )
        if not allowed and log_denied:
            log.info(
                "authorization denied",
                principal=self.principal,
                host=self.request.client_host,
                operation=operation.name,
                resource=f"{resource_type.name}:{name}",
                api=self.api_name,
            )
        return allowed

    def authorized_any(self, operation: AclOperation, resource_type: AclResourceType) -> bool:
        """Whether the principal may do ``operation`` on some resource of the type."""
        authorizer = self._authorizer
        return authorizer is None or authorizer.any_allowed(
            self.principal, self.request.client_host, operation, resource_type
        )

    def authorized_operations(
        self, resource_type: AclResourceType, name: str = CLUSTER_NAME
    ) -> int:
        """KIP-430's bit field of the operations the principal may do on the resource (all
        the type supports without an authorizer), as Kafka's AuthHelper.authorizedOperations;
        denials are not logged."""
        allowed = (
            op
            for op in SUPPORTED_OPERATIONS[resource_type]
            if self.authorized(op, resource_type, name, log_denied=False)
        )
        return sum(1 << op for op in allowed)

    @property
    def response_module(self) -> ModuleType:
        """The kio module with this version's response entities (nested ones too)."""
        return api.response_module(self.api_key, self.api_version)

    def make(self, entity: str, /, **values: Any) -> Any:
        """Build the entity ``entity`` of this version's response module (see ``api.make``)."""
        return api.make(getattr(self.response_module, entity), **values)

    def make_response(self, **values: Any) -> Any:
        """Build this version's response entity from values (see ``api.make``)."""
        return api.make(api.response_class(self.api_key, self.api_version), **values)

    def _claim(self) -> bool:
        with self._lock:
            if self._answered:
                return False
            self._answered = True
            return True

    def respond(self, body: Any, close_connection: bool = False) -> None:
        """Encode ``body`` with its response header and hand it to the Processor; with
        ``close_connection`` the connection closes once the answer is written."""
        if not self._claim():
            return
        try:
            payload = api.encode(body)
            throttle_ms = self._throttle_ms(len(payload))
            throttled = with_throttle_time(body, throttle_ms) if throttle_ms > 0 else None
            if throttled is not None:
                payload = api.encode(throttled)
        except Exception as exc:  # a value the schema cannot carry: close, never go silent
            log.warning(
                "closing connection: response cannot be encoded",
                connection=self.request.connection_id,
                listener=self.listener_name,
                api=self.api_name,
                api_version=self.api_version,
                reason=f"{type(exc).__name__}: {exc}",
            )
            self._channel.send_response(Response(self.request, None, close_connection=True))
            return
        prefix = response_frame_prefix(
            self.api_key, self.api_version, self.request.header.correlation_id, len(payload)
        )
        self._channel.send_response(
            Response(self.request, [prefix, payload], close_connection, throttle_ms)
        )

    def respond_pieces(self, body_pieces: list[Transferable]) -> None:
        """Send a body already serialized in pieces (Fetch keeps stored batches out of kio)."""
        if not self._claim():
            return
        size = sum(map(len, body_pieces))
        throttle_ms = self._throttle_ms(size)
        if throttle_ms > 0:
            body_pieces = patch_throttle_time(
                self.api_key, self.api_version, body_pieces, throttle_ms
            )
            size = sum(map(len, body_pieces))  # a throttled Fetch is answered empty
        prefix = response_frame_prefix(
            self.api_key, self.api_version, self.request.header.correlation_id, size
        )
        self._channel.send_response(
            Response(self.request, [prefix, *body_pieces], throttle_ms=throttle_ms)
        )

    def respond_nothing(self) -> None:
        """No response is owed (acks=0 produce); the connection is unmuted (after the
        client's throttle, if its quota asks for one)."""
        if self._claim():
            throttle_ms = self._throttle_ms(0)
            self._channel.send_response(Response(self.request, None, throttle_ms=throttle_ms))

    def _throttle_ms(self, response_bytes: int) -> int:
        """What the client quotas make of this answer (KIP-219): ms to throttle."""
        throttler = self._channel.throttler
        if throttler is None:
            return 0
        return throttler.throttle_time_ms(self.request, self.body, response_bytes)

    def fail(self, exc: BaseException) -> None:
        """A handler failed on this request: one warning line, then UNKNOWN_SERVER_ERROR
        where the response has a top-level error code, else a close; never silence."""
        log.warning(
            "request failed",
            connection=self.request.connection_id,
            listener=self.listener_name,
            api=self.api_name,
            api_version=self.api_version,
            reason=exception_reason(exc),
        )
        log.debug("request failed: traceback", exc_info=exc)
        cls = api.response_class(self.api_key, self.api_version)
        if "error_code" in getattr(cls, "__dataclass_fields__", {}):
            self.respond(self.make_response(error_code=ErrorCode.unknown_server_error))
        else:
            self.close_connection()

    def guarded(self, fn: Callable[[T], None]) -> Callable[[T], None]:
        """``fn`` for a callback that answers this request later (a group coordinator's):
        should it raise, the request still gets ``fail``'s answer."""

        def run(arg: T) -> None:
            try:
                fn(arg)
            except Exception as exc:
                self.fail(exc)

        return run

    def close_connection(self) -> None:
        """Close the connection without an answer (what Kafka does for some bad requests)."""
        if self._claim():
            self._channel.send_response(Response(self.request, None, close_connection=True))


Handler = Callable[[RequestContext], None]


class ApiFamily(Protocol):
    """A group of handlers KafkaApis dispatches to, e.g. produce, fetch or groups."""

    def handlers(self) -> Mapping[int, Handler]:
        """api key -> handler. Every version kio knows for the key is advertised."""
        ...
