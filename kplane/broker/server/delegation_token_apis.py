"""CreateDelegationToken, RenewDelegationToken, ExpireDelegationToken and
DescribeDelegationToken (KIP-48, KIP-373), as Kafka's KafkaApis serves them.

None of them is allowed on a connection that itself logged in with a token, on PLAINTEXT,
or on SSL without a client certificate (DELEGATION_TOKEN_REQUEST_NOT_ALLOWED). Creating a
token for another owner needs CREATE_TOKENS on that USER; renewers must be users. Renewing
and expiring are for the token's owner and renewers. Describe shows a principal the tokens
it owns or renews, and the others it may DESCRIBE (the DELEGATION_TOKEN) or whose owner's
tokens it may DESCRIBE_TOKENS (the USER).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from kplane.broker.config.endpoint import SecurityProtocol
from kplane.broker.security.delegation_token import USER_TYPE, TokenInformation, split_principal
from kplane.broker.security.delegation_token_manager import (
    ERROR_TIMESTAMP,
    DelegationToken,
    DelegationTokenManager,
)
from kplane.broker.security.principal_mapping import ANONYMOUS
from kplane.broker.server.context import Handler, RequestContext
from kplane.common.acl import AclOperation, AclResourceType
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode

log = structlog.get_logger(__name__)


def allow_token_requests(ctx: RequestContext) -> bool:
    """Kafka's ``allowTokenRequests``: not over a token's own login, not on PLAINTEXT, not
    on one-way SSL."""
    session = ctx.request.session
    if session is not None and session.token_authenticated:
        return False
    protocol = ctx.security_protocol
    if protocol is SecurityProtocol.PLAINTEXT:
        return False
    return not (protocol is SecurityProtocol.SSL and ctx.principal == ANONYMOUS)


def _at(ms: int) -> datetime.datetime:
    """A wire timestamp (``datetime_i64``) of epoch milliseconds; -1 stays -1."""
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)


def _ms(period: datetime.timedelta) -> int:
    return round(period.total_seconds() * 1000)


class DelegationTokenApis:
    """The four token APIs over the broker's DelegationTokenManager."""

    def __init__(self, tokens: DelegationTokenManager) -> None:
        self.tokens = tokens

    def handlers(self) -> Mapping[int, Handler]:
        return {
            ApiKey.CREATE_DELEGATION_TOKEN: self.handle_create,
            ApiKey.RENEW_DELEGATION_TOKEN: self.handle_renew,
            ApiKey.EXPIRE_DELEGATION_TOKEN: self.handle_expire,
            ApiKey.DESCRIBE_DELEGATION_TOKEN: self.handle_describe,
        }

    def handle_create(self, ctx: RequestContext) -> None:
        body = ctx.body
        requester = ctx.principal
        owner_name = getattr(body, "owner_principal_name", None)  # v3 on
        owner = f"{body.owner_principal_type}:{owner_name}" if owner_name else requester
        renewers = [f"{r.principal_type}:{r.principal_name}" for r in body.renewers]

        def refuse(error: ErrorCode) -> None:
            ctx.respond(self._created(ctx, error, owner, requester))

        if not allow_token_requests(ctx):
            log.info("delegation token request not allowed", principal=requester, api=ctx.api_name)
            refuse(ErrorCode.delegation_token_request_not_allowed)
        elif owner != requester and not ctx.authorized(
            AclOperation.CREATE_TOKENS, AclResourceType.USER, owner
        ):
            refuse(ErrorCode.delegation_token_authorization_failed)
        elif any(r.principal_type != USER_TYPE for r in body.renewers):
            log.warning(
                "CreateDelegationToken refused: renewers must be users",
                principal=requester,
                renewers=renewers,
            )
            refuse(ErrorCode.invalid_principal_type)
        elif not self.tokens.enabled:
            refuse(ErrorCode.delegation_token_auth_disabled)
        else:
            token = self.tokens.create(owner, requester, renewers, _ms(body.max_lifetime))
            ctx.respond(self._created(ctx, ErrorCode.none, owner, requester, token))

    @staticmethod
    def _created(
        ctx: RequestContext,
        error: ErrorCode,
        owner: str,
        requester: str,
        token: DelegationToken | None = None,
    ) -> Any:
        owner_type, owner_name = split_principal(owner)
        requester_type, requester_name = split_principal(requester)
        info = token.info if token is not None else None
        return ctx.make_response(
            error_code=error,
            principal_type=owner_type,
            principal_name=owner_name,
            token_requester_principal_type=requester_type,
            token_requester_principal_name=requester_name,
            issue_timestamp=_at(info.issue_timestamp if info else ERROR_TIMESTAMP),
            expiry_timestamp=_at(info.expiry_timestamp if info else ERROR_TIMESTAMP),
            max_timestamp=_at(info.max_timestamp if info else ERROR_TIMESTAMP),
            token_id=info.token_id if info else "",
            hmac=token.hmac if token is not None else b"",
        )

    def handle_renew(self, ctx: RequestContext) -> None:
        body = ctx.body
        self._answer_expiry(
            ctx, lambda: self.tokens.renew(ctx.principal, bytes(body.hmac), _ms(body.renew_period))
        )

    def handle_expire(self, ctx: RequestContext) -> None:
        body = ctx.body
        self._answer_expiry(
            ctx,
            lambda: self.tokens.expire(
                ctx.principal, bytes(body.hmac), _ms(body.expiry_time_period)
            ),
        )

    @staticmethod
    def _answer_expiry(ctx: RequestContext, change: Callable[[], tuple[ErrorCode, int]]) -> None:
        """Renew and Expire: the token's new expiry, or why not."""
        if not allow_token_requests(ctx):
            log.info(
                "delegation token request not allowed", principal=ctx.principal, api=ctx.api_name
            )
            error, expiry = ErrorCode.delegation_token_request_not_allowed, ERROR_TIMESTAMP
        else:
            error, expiry = change()
        ctx.respond(ctx.make_response(error_code=error, expiry_timestamp=_at(expiry)))

    def handle_describe(self, ctx: RequestContext) -> None:
        owners_asked = ctx.body.owners
        found: list[DelegationToken] = []
        if not allow_token_requests(ctx):
            log.info(
                "delegation token request not allowed", principal=ctx.principal, api=ctx.api_name
            )
            error = ErrorCode.delegation_token_request_not_allowed
        elif not self.tokens.enabled:
            error = ErrorCode.delegation_token_auth_disabled
        elif owners_asked is not None and not owners_asked:
            error = ErrorCode.none
        else:
            owners = (
                None
                if owners_asked is None
                else [f"{o.principal_type}:{o.principal_name}" for o in owners_asked]
            )

            def eligible(info: TokenInformation) -> bool:
                # Kafka's DelegationTokenManager.filterToken
                if owners is not None and not any(info.owner_or_renewer(o) for o in owners):
                    return False
                return (
                    info.owner_or_renewer(ctx.principal)
                    or ctx.authorized(
                        AclOperation.DESCRIBE,
                        AclResourceType.DELEGATION_TOKEN,
                        info.token_id,
                        log_denied=False,
                    )
                    or ctx.authorized(
                        AclOperation.DESCRIBE_TOKENS,
                        AclResourceType.USER,
                        info.owner,
                        log_denied=False,
                    )
                )

            error, found = ErrorCode.none, self.tokens.tokens(eligible)
        ctx.respond(
            ctx.make_response(
                error_code=error, tokens=tuple(self._described(ctx, t) for t in found)
            )
        )

    @staticmethod
    def _described(ctx: RequestContext, token: DelegationToken) -> Any:
        info = token.info
        owner_type, owner_name = split_principal(info.owner)
        requester_type, requester_name = split_principal(info.requester)
        return ctx.make(
            "DescribedDelegationToken",
            principal_type=owner_type,
            principal_name=owner_name,
            token_requester_principal_type=requester_type,
            token_requester_principal_name=requester_name,
            issue_timestamp=info.issue_timestamp,
            expiry_timestamp=info.expiry_timestamp,
            max_timestamp=info.max_timestamp,
            token_id=info.token_id,
            hmac=token.hmac,
            renewers=tuple(
                ctx.make("DescribedDelegationTokenRenewer", principal_type=t, principal_name=n)
                for t, n in map(split_principal, info.renewers)
            ),
        )
