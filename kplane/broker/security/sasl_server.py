"""The server side of a SASL mechanism, and SASL/PLAIN."""

from __future__ import annotations

import hmac
from typing import Protocol


class SaslAuthenticationFailed(Exception):
    """Credentials refused; the message goes to the client."""


class SaslServer(Protocol):
    """One connection's exchange: tokens in, challenges out, until ``complete``."""

    user: str | None
    complete: bool
    token_authenticated: bool
    """Whether the user logged in with a delegation token (SCRAM ``tokenauth=true``)."""

    def evaluate(self, token: bytes) -> bytes:
        """The answer to the client's ``token``; SaslAuthenticationFailed when refused."""
        ...


class PlainServer:
    """SASL/PLAIN (RFC 4616) against the JAAS ``user_<name>="<password>"`` options."""

    def __init__(self, users: dict[str, str]) -> None:
        self._users = users
        self.user: str | None = None
        self.complete = False
        self.token_authenticated = False

    def evaluate(self, token: bytes) -> bytes:
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise SaslAuthenticationFailed("Invalid SASL/PLAIN request: expected 3 tokens")
        authzid, user, password = (p.decode("utf-8", "replace") for p in parts)
        if authzid and authzid != user:
            raise SaslAuthenticationFailed("Authentication failed: Invalid authorization id")
        expected = self._users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise SaslAuthenticationFailed("Authentication failed: Invalid username or password")
        self.user = user
        self.complete = True
        return b""
