"""SASL on SASL_PLAINTEXT and SASL_SSL listeners: per-connection state and PLAIN.

Mechanisms come from ``sasl.enabled.mechanisms`` and their users from the JAAS login
context (``listener.name.<l>.<mechanism>.sasl.jaas.config`` or ``sasl.jaas.config``).
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field

from broker.config.definitions import Password
from broker.config.endpoint import SecurityProtocol
from broker.config.errors import ConfigException
from broker.config.kafka_config import KafkaConfig
from broker.network.tls import ANONYMOUS
from broker.security.jaas import JaasError, parse_jaas_config

PLAIN = "PLAIN"
SUPPORTED_MECHANISMS = (PLAIN,)
SASL_PROTOCOLS = (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)
# Before authentication a SASL connection may send only these (Kafka's rule).
PRE_AUTH_APIS = frozenset({18, 17, 36})  # ApiVersions, SaslHandshake, SaslAuthenticate


class SaslAuthenticationFailed(Exception):
    """Credentials refused; the message goes to the client."""


@dataclass
class SaslSession:
    """One connection's SASL state; only the request in flight touches it (muting)."""

    mechanism: str | None = None
    authenticated: bool = False
    principal: str = ANONYMOUS


@dataclass(frozen=True)
class PlainAuthenticator:
    """SASL/PLAIN (RFC 4616) against the JAAS ``user_<name>="<password>"`` options."""

    users: dict[str, str] = field(default_factory=dict)

    def authenticate(self, token: bytes) -> str:
        """The authenticated user name; SaslAuthenticationFailed otherwise."""
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise SaslAuthenticationFailed("Invalid SASL/PLAIN request: expected 3 tokens")
        authzid, user, password = (p.decode("utf-8", "replace") for p in parts)
        if authzid and authzid != user:
            raise SaslAuthenticationFailed("Authentication failed: Invalid authorization id")
        expected = self.users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise SaslAuthenticationFailed("Authentication failed: Invalid username or password")
        return user


@dataclass(frozen=True)
class SaslListener:
    """What one SASL listener offers."""

    mechanisms: tuple[str, ...]
    authenticators: dict[str, PlainAuthenticator]


def sasl_listeners(config: KafkaConfig) -> dict[str, SaslListener]:
    """The SASL set-up of every SASL listener; ConfigException naming the key otherwise."""
    out: dict[str, SaslListener] = {}
    for endpoint in config.listeners:
        if endpoint.security_protocol not in SASL_PROTOCOLS:
            continue
        name = endpoint.listener_name
        mechanisms = tuple(m.upper() for m in config.listener_get(name, "sasl.enabled.mechanisms"))
        unsupported = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
        if not mechanisms or unsupported:
            raise ConfigException(
                f"listener.name.{name.lower()}.sasl.enabled.mechanisms (or "
                f"sasl.enabled.mechanisms): {', '.join(unsupported) or 'none'} not supported "
                f"by kplane yet (supported: {', '.join(SUPPORTED_MECHANISMS)})",
                name="sasl.enabled.mechanisms",
            )
        authenticators = {}
        for mechanism in mechanisms:
            key = f"listener.name.{name.lower()}.{mechanism.lower()}.sasl.jaas.config"
            value = config.sasl_jaas_config(name, mechanism)
            text = value.value if isinstance(value, Password) else value
            if not text:
                raise ConfigException(
                    f"{key} (or sasl.jaas.config): required for {mechanism} on listener {name}",
                    name="sasl.jaas.config",
                )
            try:
                module = parse_jaas_config(text)
            except JaasError as exc:
                raise ConfigException(f"{key}: {exc}", name="sasl.jaas.config") from exc
            users = {
                k[len("user_") :]: v for k, v in module.options.items() if k.startswith("user_")
            }
            authenticators[mechanism] = PlainAuthenticator(users)
        out[name] = SaslListener(mechanisms, authenticators)
    return out
