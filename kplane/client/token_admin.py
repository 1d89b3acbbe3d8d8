"""TokenAdmin: delegation tokens (KIP-48) — CreateDelegationToken, RenewDelegationToken,
ExpireDelegationToken and DescribeDelegationToken (APIs 38-41), each sent to the least
loaded broker, as Kafka's AdminClient sends them. A refusal raises KafkaError with the
broker's code."""

from __future__ import annotations

import base64
import datetime
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kplane.client.admin import Admin
from kplane.common.network.connection import UnsupportedApi
from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode, KafkaError

OWNER_VERSION = 3
"""The first CreateDelegationToken version carrying an owner (KIP-373)."""


def principal_parts(principal: str) -> tuple[str, str]:
    """``Type:name`` split at the first colon; ValueError without one (Kafka's
    ``SecurityUtils.parseKafkaPrincipal``)."""
    principal_type, sep, name = principal.partition(":")
    if not sep or not principal_type or not name:
        raise ValueError(
            f"expected a string in format principalType:principalName but got {principal}"
        )
    return principal_type, name


@dataclass(frozen=True)
class TokenInformation:
    """A token as described by the broker (Kafka's TokenInformation); times in epoch ms."""

    token_id: str
    owner: str
    requester: str
    renewers: tuple[str, ...]
    issue_timestamp: int
    expiry_timestamp: int
    max_timestamp: int


@dataclass(frozen=True)
class DelegationToken:
    """A token and its HMAC, the password a client logs in with (as base64)."""

    info: TokenInformation
    hmac: bytes

    @property
    def hmac_base64(self) -> str:
        return base64.b64encode(self.hmac).decode()


def _ms(value: datetime.datetime | int) -> int:
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    return int(value)


def _period(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)


def _check(response: Any, what: str) -> None:
    if response.error_code != ErrorCode.none:
        raise KafkaError(response.error_code, f"{what}: {response.error_code.name.upper()}")


class TokenAdmin:
    """Delegation tokens through an :class:`Admin`'s client."""

    def __init__(self, admin: Admin) -> None:
        self.client = admin.client

    async def create_delegation_token(
        self, renewers: Iterable[str] = (), max_lifetime_ms: int = -1, owner: str | None = None
    ) -> DelegationToken:
        """A new token for ``owner`` (None: the principal this client logged in as),
        renewable by ``renewers``; -1 takes the broker's maximum lifetime."""
        renewer_parts = [principal_parts(r) for r in renewers]
        owner_parts = principal_parts(owner) if owner is not None else None

        def build(version: int) -> Any:
            if owner_parts is not None and version < OWNER_VERSION:
                raise UnsupportedApi(
                    f"CreateDelegationToken v{version} cannot name an owner (v3 can)"
                )
            module = api.request_module(ApiKey.CREATE_DELEGATION_TOKEN, version)
            return api.make(
                module.CreateDelegationTokenRequest,
                owner_principal_type=owner_parts[0] if owner_parts else None,
                owner_principal_name=owner_parts[1] if owner_parts else None,
                renewers=tuple(
                    api.make(module.CreatableRenewers, principal_type=t, principal_name=n)
                    for t, n in renewer_parts
                ),
                max_lifetime=_period(max_lifetime_ms),
            )

        response = await self.client.request(None, ApiKey.CREATE_DELEGATION_TOKEN, build)
        _check(response, "CreateDelegationToken")
        owner_text = f"{response.principal_type}:{response.principal_name}"
        requester_name = getattr(response, "token_requester_principal_name", "")
        requester = (
            f"{response.token_requester_principal_type}:{requester_name}"
            if requester_name
            else owner_text
        )
        return DelegationToken(
            TokenInformation(
                str(response.token_id),
                owner_text,
                requester,
                tuple(f"{t}:{n}" for t, n in renewer_parts),
                _ms(response.issue_timestamp),
                _ms(response.expiry_timestamp),
                _ms(response.max_timestamp),
            ),
            bytes(response.hmac),
        )

    async def renew_delegation_token(self, hmac: bytes, renew_period_ms: int = -1) -> int:
        """Renew the token of ``hmac``; its new expiry time (epoch ms)."""
        response = await self.client.request(
            None,
            ApiKey.RENEW_DELEGATION_TOKEN,
            lambda v: api.make(
                api.request_class(ApiKey.RENEW_DELEGATION_TOKEN, v),
                hmac=hmac,
                renew_period=_period(renew_period_ms),
            ),
        )
        _check(response, "RenewDelegationToken")
        return _ms(response.expiry_timestamp)

    async def expire_delegation_token(self, hmac: bytes, expiry_period_ms: int = -1) -> int:
        """Move the expiry of the token of ``hmac`` (-1: now, removing it); the new expiry
        time (epoch ms)."""
        response = await self.client.request(
            None,
            ApiKey.EXPIRE_DELEGATION_TOKEN,
            lambda v: api.make(
                api.request_class(ApiKey.EXPIRE_DELEGATION_TOKEN, v),
                hmac=hmac,
                expiry_time_period=_period(expiry_period_ms),
            ),
        )
        _check(response, "ExpireDelegationToken")
        return _ms(response.expiry_timestamp)

    async def describe_delegation_token(
        self, owners: Iterable[str] | None = None
    ) -> list[DelegationToken]:
        """The tokens of ``owners`` (owned or renewable by them) this client may see; None:
        every token it may see."""
        parts = None if owners is None else [principal_parts(o) for o in owners]

        def build(version: int) -> Any:
            module = api.request_module(ApiKey.DESCRIBE_DELEGATION_TOKEN, version)
            return api.make(
                module.DescribeDelegationTokenRequest,
                owners=None
                if parts is None
                else tuple(
                    api.make(
                        module.DescribeDelegationTokenOwner, principal_type=t, principal_name=n
                    )
                    for t, n in parts
                ),
            )

        response = await self.client.request(None, ApiKey.DESCRIBE_DELEGATION_TOKEN, build)
        _check(response, "DescribeDelegationToken")
        return [
            DelegationToken(
                TokenInformation(
                    str(t.token_id),
                    f"{t.principal_type}:{t.principal_name}",
                    f"{t.token_requester_principal_type}:{t.token_requester_principal_name}"
                    if getattr(t, "token_requester_principal_name", "")
                    else f"{t.principal_type}:{t.principal_name}",
                    tuple(f"{r.principal_type}:{r.principal_name}" for r in t.renewers),
                    _ms(t.issue_timestamp),
                    _ms(t.expiry_timestamp),
                    _ms(t.max_timestamp),
                ),
                bytes(t.hmac),
            )
            for t in response.tokens
        ]
