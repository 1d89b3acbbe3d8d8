"""Delegation tokens (KIP-48): what a token is, its HMAC, and its stored form.

A token is an id (a random UUID in URL-safe base64), an owner, the principal that asked
for it (KIP-373), renewers, and three times: issued, expires (moved by renewals) and the
maximum it can be renewed to. Its password is the HMAC-SHA512 of the id keyed with
``delegation.token.secret.key``, so every broker with the same key computes it; the store
never holds it. The stored form is Kafka's ZooKeeper one (``DelegationTokenManagerZk``):
``{"version":3,"owner":..,"tokenRequester":..,"renewers":[..],"issueTimestamp":..,
"maxTimestamp":..,"expiryTimestamp":..,"tokenId":..}``, principals sanitized as Kafka's
``Sanitizer`` does.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import uuid
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import unquote

from kplane.broker.security.scram import sanitize

TOKEN_VERSION = 3
"""Kafka's current version of the stored token (3 adds the requester, KIP-373)."""
USER_TYPE = "User"


def split_principal(text: str) -> tuple[str, str]:
    """``Type:name`` split at the first colon, as Kafka's ``parseKafkaPrincipal`` does."""
    principal_type, _, name = text.partition(":")
    return principal_type, name


def new_token_id() -> str:
    """A random UUID as URL-safe base64 without padding (Kafka's generateUuidAsBase64)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def create_hmac(token_id: str, secret_key: str) -> bytes:
    """HMAC-SHA512 of the token id, keyed with the secret (both as UTF-8)."""
    return hmac.digest(secret_key.encode(), token_id.encode(), hashlib.sha512)


def hmac_text(token_hmac: bytes) -> str:
    """The HMAC as the client's SCRAM password and the CLI show it: standard base64."""
    return base64.b64encode(token_hmac).decode()


@dataclass(frozen=True)
class TokenInformation:
    """One token's details; principals are ``Type:name`` strings."""

    token_id: str
    owner: str
    requester: str
    renewers: tuple[str, ...]
    issue_timestamp: int
    max_timestamp: int
    expiry_timestamp: int

    def owner_or_renewer(self, principal: str) -> bool:
        """Whether ``principal`` owns the token or may renew it (Kafka's ownerOrRenewer)."""
        return principal == self.owner or principal in self.renewers

    def expired(self, now_ms: int) -> bool:
        """Past its expiry or its maximum lifetime."""
        return self.max_timestamp < now_ms or self.expiry_timestamp < now_ms

    def with_expiry(self, expiry_timestamp: int) -> TokenInformation:
        return replace(self, expiry_timestamp=expiry_timestamp)

    def to_json(self) -> bytes:
        doc: dict[str, Any] = {
            "version": TOKEN_VERSION,
            "owner": sanitize(self.owner),
            "tokenRequester": sanitize(self.requester),
            "renewers": [sanitize(r) for r in self.renewers],
            "issueTimestamp": self.issue_timestamp,
            "maxTimestamp": self.max_timestamp,
            "expiryTimestamp": self.expiry_timestamp,
            "tokenId": self.token_id,
        }
        return json.dumps(doc).encode()

    @classmethod
    def from_json(cls, data: bytes) -> TokenInformation:
        """Versions 1 to 3 (before 3 the requester is the owner); ValueError, KeyError or
        TypeError when malformed."""
        doc = json.loads(data)
        version = int(doc["version"])
        if not 0 < version <= TOKEN_VERSION:
            raise ValueError(f"unknown delegation token version {version}")
        owner = unquote(doc["owner"])
        requester = unquote(doc["tokenRequester"]) if version >= 3 else owner
        return cls(
            token_id=str(doc["tokenId"]),
            owner=owner,
            requester=requester,
            renewers=tuple(unquote(r) for r in doc["renewers"]),
            issue_timestamp=int(doc["issueTimestamp"]),
            max_timestamp=int(doc["maxTimestamp"]),
            expiry_timestamp=int(doc["expiryTimestamp"]),
        )
