"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677): credentials and the server side.

Credentials live in the metadata store at ``/config/users/<name>`` in Kafka's format,
``{"version":1,"config":{"SCRAM-SHA-256":"salt=..,stored_key=..,server_key=..,iterations=N"}}``;
only the salt and the two derived keys are kept, never the password. ``<name>`` is the user
name sanitized as Kafka's ``Sanitizer`` does (URL-encoded). Salts of any length are accepted,
as Kafka accepts them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading
from dataclasses import dataclass
from enum import IntEnum
from typing import Protocol
from urllib.parse import quote, unquote

from kplane.broker.metadata.kafka_store import KafkaMetadataClient
from kplane.broker.security.sasl_server import SaslAuthenticationFailed

USERS = "users"
# Kafka's bounds on SCRAM iterations (ScramMechanism.minIterations and the admin limit).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


class ScramMechanismType(IntEnum):
    """The wire code of each mechanism in Alter/DescribeUserScramCredentials."""

    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def mechanism_name(self) -> str:
        """``SCRAM-SHA-256`` style name used in SASL and in the store."""
        return self.name.replace("_", "-")

    @property
    def hash_name(self) -> str:
        return "sha256" if self is ScramMechanismType.SCRAM_SHA_256 else "sha512"

    @classmethod
    def of(cls, name: str) -> ScramMechanismType:
        """The type of a mechanism name; UNKNOWN for anything else."""
        try:
            return cls[name.upper().replace("-", "_")]
        except KeyError:
            return cls.UNKNOWN


SCRAM_MECHANISMS = tuple(
    m.mechanism_name for m in ScramMechanismType if m is not ScramMechanismType.UNKNOWN
)


@dataclass(frozen=True)
class ScramCredential:
    """What the server keeps of a password: salt, StoredKey, ServerKey, iterations."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_salted_password(
        cls, mechanism: ScramMechanismType, salt: bytes, salted_password: bytes, iterations: int
    ) -> ScramCredential:
        """The credential of SaltedPassword = Hi(password, salt, iterations) (RFC 5802 §3)."""
        digest = mechanism.hash_name
        client_key = hmac.digest(salted_password, b"Client Key", digest)
        return cls(
            salt,
            hashlib.new(digest, client_key).digest(),
            hmac.digest(salted_password, b"Server Key", digest),
            iterations,
        )

    @classmethod
    def from_password(
        cls, mechanism: ScramMechanismType, password: str, salt: bytes, iterations: int
    ) -> ScramCredential:
        """The credential of a clear password (the CLI salts and hashes it locally)."""
        salted = hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode(), salt, iterations)
        return cls.from_salted_password(mechanism, salt, salted, iterations)

    def to_config(self) -> str:
        """Kafka's stored form."""
        b64 = base64.b64encode
        return (
            f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
            f"server_key={b64(self.server_key).decode()},iterations={self.iterations}"
        )

    @classmethod
    def from_config(cls, text: str) -> ScramCredential:
        """Parse Kafka's stored form (ValueError when malformed)."""
        fields = dict(part.split("=", 1) for part in text.split(","))
        return cls(
            base64.b64decode(fields["salt"]),
            base64.b64decode(fields["stored_key"]),
            base64.b64decode(fields["server_key"]),
            int(fields["iterations"]),
        )


def sanitize(name: str) -> str:
    """An entity name as Kafka's ``Sanitizer`` writes it in a store path: URL-encoded, only
    ASCII letters, digits, ``.``, ``-`` and ``_`` kept; ``.`` and ``..`` (no node name in
    ZooKeeper, which Kafka fails on) are encoded whole."""
    encoded = quote(name, safe="").replace("~", "%7E")
    return encoded.replace(".", "%2E") if encoded in (".", "..") else encoded


class TokenCredentials(Protocol):
    """Delegation tokens' SCRAM credentials (the DelegationTokenManager's cache)."""

    def token_login(
        self, token_id: str, mechanism: ScramMechanismType
    ) -> tuple[str, ScramCredential] | None:
        """The owner's name and the credential of a live token; None otherwise."""
        ...


class ScramCredentialStore:
    """Users' SCRAM credentials at ``/config/users`` of the metadata store, and the
    delegation tokens' (``tokens``, set when the broker serves tokens)."""

    def __init__(self, client: KafkaMetadataClient) -> None:
        self.client = client
        self.tokens: TokenCredentials | None = None
        self._lock = threading.Lock()

    def _configs(self, user: str) -> dict[str, str]:
        """The stored configs of ``user`` (none for the empty name, which has no node)."""
        return self.client.get_entity_config(USERS, sanitize(user)) if user else {}

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        text = self._configs(user).get(mechanism)
        return ScramCredential.from_config(text) if text else None

    def describe(self, user: str) -> dict[ScramMechanismType, int]:
        """Mechanism -> iterations of every credential ``user`` has."""
        out: dict[ScramMechanismType, int] = {}
        for name, text in self._configs(user).items():
            mechanism = ScramMechanismType.of(name)
            if mechanism is not ScramMechanismType.UNKNOWN:
                out[mechanism] = ScramCredential.from_config(text).iterations
        return out

    def users(self) -> list[str]:
        """Every user with at least one SCRAM credential."""
        names = (unquote(entity) for entity in self.client.get_entities(USERS))
        return [u for u in names if self.describe(u)]

    def upsert(self, user: str, mechanism: ScramMechanismType, credential: ScramCredential) -> None:
        with self._lock:
            configs = self._configs(user)
            configs[mechanism.mechanism_name] = credential.to_config()
            self.client.set_entity_config(USERS, sanitize(user), configs)

    def delete(self, user: str, mechanism: ScramMechanismType) -> bool:
        """Remove one credential; False when ``user`` had none for ``mechanism``."""
        with self._lock:
            configs = self._configs(user)
            if configs.pop(mechanism.mechanism_name, None) is None:
                return False
            self.client.set_entity_config(USERS, sanitize(user), configs)
            return True


class ScramServer:
    """One connection's SCRAM exchange (RFC 5802 server side, no channel binding, as in
    Kafka): client-first, then client-final. A client-first message with the extension
    ``tokenauth=true`` logs in with a delegation token: the user name is the token id, the
    password its HMAC, and the user authenticated is the token's owner."""

    def __init__(self, mechanism: str, credentials: ScramCredentialStore) -> None:
        self.mechanism = mechanism
        self._hash = ScramMechanismType.of(mechanism).hash_name
        self._credentials = credentials
        self._step = 0
        self.user: str | None = None
        self.complete = False
        self.token_authenticated = False
        self._credential: ScramCredential | None = None
        self._gs2_header = ""
        self._nonce = ""
        self._first_bare = ""
        self._server_first = ""

    def evaluate(self, token: bytes) -> bytes:
        """The server's answer to ``token``; SaslAuthenticationFailed when refused."""
        try:
            if self._step == 0:
                self._step = 1
                return self._client_first(token.decode("utf-8")).encode()
            if self._step == 1:
                self._step = 2
                answer = self._client_final(token.decode("utf-8")).encode()
                self.complete = True
                return answer
        except (ValueError, KeyError) as exc:  # UnicodeDecodeError, binascii.Error among them
            raise SaslAuthenticationFailed(
                "Authentication failed during authentication due to invalid credentials "
                f"with SASL mechanism {self.mechanism}"
            ) from exc
        raise SaslAuthenticationFailed(f"{self.mechanism}: unexpected message after completion")

    def _client_first(self, message: str) -> str:
        flag, authzid, bare = message.split(",", 2)
        if flag not in ("n", "y"):
            raise ValueError("channel binding is not supported")
        attributes = _attributes(bare)
        user = attributes["n"].replace("=2C", ",").replace("=3D", "=")
        if authzid and authzid != f"a={attributes['n']}":
            raise ValueError("the authorization id differs from the user name")
        if attributes.get("tokenauth", "").lower() == "true":  # Java's Boolean.parseBoolean
            tokens = self._credentials.tokens
            mechanism = ScramMechanismType.of(self.mechanism)
            login = tokens.token_login(user, mechanism) if tokens is not None else None
            if login is None:
                raise ValueError(f"unknown or expired delegation token {user!r}")
            user, credential = login
            self.token_authenticated = True
        else:
            found = self._credentials.get(user, self.mechanism)
            if found is None:
                raise ValueError(f"unknown user {user!r}")
            credential = found
        self.user, self._credential = user, credential
        self._gs2_header = f"{flag},{authzid},"
        self._nonce = attributes["r"] + secrets.token_urlsafe(24)
        self._first_bare = bare
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        return self._server_first

    def _client_final(self, message: str) -> str:
        without_proof, _, proof_attribute = message.rpartition(",")
        attributes = _attributes(without_proof)
        channel_binding = base64.b64encode(self._gs2_header.encode()).decode()
        if attributes["c"] != channel_binding or attributes["r"] != self._nonce:
            raise ValueError("channel binding or nonce differ")
        if not proof_attribute.startswith("p=") or self._credential is None:
            raise ValueError("no client proof")
        proof = base64.b64decode(proof_attribute[2:], validate=True)
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac.digest(self._credential.stored_key, auth_message, self._hash)
        client_key = bytes(p ^ s for p, s in zip(proof, signature, strict=True))
        if not hmac.compare_digest(
            hashlib.new(self._hash, client_key).digest(), self._credential.stored_key
        ):
            raise ValueError("wrong client proof")
        verifier = hmac.digest(self._credential.server_key, auth_message, self._hash)
        return f"v={base64.b64encode(verifier).decode()}"


def _attributes(text: str) -> dict[str, str]:
    """``k=v,k=v`` of a SCRAM message (values may hold ``=``)."""
    return dict(part.split("=", 1) for part in text.split(","))
