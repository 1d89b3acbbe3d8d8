"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677): credentials and the server side.

Credentials live in the metadata store at ``/config/users/<name>`` in Kafka's format,
``{"version":1,"config":{"SCRAM-SHA-256":"salt=..,stored_key=..,server_key=..,iterations=N"}}``;
only the salt and the two derived keys are kept, never the password. The exchange itself
is `scramp`'s.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import threading
from dataclasses import dataclass
from enum import IntEnum

import scramp

from broker.metadata.kafka_store import KafkaMetadataClient
from broker.security.sasl_server import SaslAuthenticationFailed

USERS = "users"
# Kafka's bounds on SCRAM iterations (ScramMechanism.minIterations and the admin limit).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
# scramp (and RFC 5802 practice) wants salts of at least 12 bytes.
MIN_SALT_BYTES = 12


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


class ScramCredentialStore:
    """Users' SCRAM credentials at ``/config/users`` of the metadata store."""

    def __init__(self, client: KafkaMetadataClient) -> None:
        self.client = client
        self._lock = threading.Lock()

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        text = self.client.get_entity_config(USERS, user).get(mechanism)
        return ScramCredential.from_config(text) if text else None

    def describe(self, user: str) -> dict[ScramMechanismType, int]:
        """Mechanism -> iterations of every credential ``user`` has."""
        out: dict[ScramMechanismType, int] = {}
        for name, text in self.client.get_entity_config(USERS, user).items():
            mechanism = ScramMechanismType.of(name)
            if mechanism is not ScramMechanismType.UNKNOWN:
                out[mechanism] = ScramCredential.from_config(text).iterations
        return out

    def users(self) -> list[str]:
        """Every user with at least one SCRAM credential."""
        return [u for u in self.client.get_entities(USERS) if self.describe(u)]

    def upsert(self, user: str, mechanism: ScramMechanismType, credential: ScramCredential) -> None:
        with self._lock:
            configs = self.client.get_entity_config(USERS, user)
            configs[mechanism.mechanism_name] = credential.to_config()
            self.client.set_entity_config(USERS, user, configs)

    def delete(self, user: str, mechanism: ScramMechanismType) -> bool:
        """Remove one credential; False when ``user`` had none for ``mechanism``."""
        with self._lock:
            configs = self.client.get_entity_config(USERS, user)
            if configs.pop(mechanism.mechanism_name, None) is None:
                return False
            self.client.set_entity_config(USERS, user, configs)
            return True


class ScramServer:
    """One connection's SCRAM exchange: client-first, then client-final."""

    def __init__(self, mechanism: str, credentials: ScramCredentialStore) -> None:
        self.mechanism = mechanism
        self._credentials = credentials
        self._server = scramp.ScramMechanism(mechanism).make_server(self._auth_info)
        self._step = 0
        self.user: str | None = None
        self.complete = False

    def _auth_info(self, user: str) -> tuple[bytes, bytes, bytes, int]:
        credential = self._credentials.get(user, self.mechanism)
        if credential is None:
            raise scramp.ScramException(f"unknown user {user!r}")
        self.user = user
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations

    def evaluate(self, token: bytes) -> bytes:
        """The server's answer to ``token``; SaslAuthenticationFailed when refused."""
        try:
            if self._step == 0:
                self._step = 1
                self._server.set_client_first(token.decode("utf-8"))
                return self._server.get_server_first().encode()
            if self._step == 1:
                self._step = 2
                self._server.set_client_final(token.decode("utf-8"))
                self.complete = True
                return self._server.get_server_final().encode()
        except (scramp.ScramException, UnicodeDecodeError, ValueError) as exc:
            raise SaslAuthenticationFailed(
                "Authentication failed during authentication due to invalid credentials "
                f"with SASL mechanism {self.mechanism}"
            ) from exc
        raise SaslAuthenticationFailed(f"{self.mechanism}: unexpected message after completion")
