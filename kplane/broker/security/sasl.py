"""SASL on SASL_PLAINTEXT and SASL_SSL listeners: what each listener offers, per-connection state.

Mechanisms come from ``sasl.enabled.mechanisms``. PLAIN's users come from the JAAS login
context (``listener.name.<l>.<mechanism>.sasl.jaas.config`` or ``sasl.jaas.config``);
SCRAM's credentials from the metadata store.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kplane.broker.config.definitions import Password
from kplane.broker.config.endpoint import SecurityProtocol
from kplane.broker.config.errors import ConfigException
from kplane.broker.config.kafka_config import KafkaConfig
from kplane.broker.config.listener_key import ListenerKey
from kplane.broker.security.principal_mapping import ANONYMOUS
from kplane.broker.security.sasl_server import PlainServer, SaslServer
from kplane.broker.security.scram import SCRAM_MECHANISMS, ScramCredentialStore, ScramServer
from kplane.common.jaas import JaasError, LoginModule, parse_jaas_config

PLAIN = "PLAIN"
SUPPORTED_MECHANISMS = (PLAIN, *SCRAM_MECHANISMS)
SASL_PROTOCOLS = (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)
# Before authentication a SASL connection may send only these (Kafka's rule).
PRE_AUTH_APIS = frozenset({18, 17, 36})  # ApiVersions, SaslHandshake, SaslAuthenticate


@dataclass
class SaslSession:
    """One connection's SASL state; only the request in flight touches it (muting)."""

    mechanism: str | None = None
    server: SaslServer | None = None
    authenticated: bool = False
    principal: str = ANONYMOUS
    token_authenticated: bool = False
    """Authenticated with a delegation token (which may not then create or renew tokens)."""


@dataclass(frozen=True)
class SaslListener:
    """What one SASL listener offers: its mechanisms, and a new server per exchange."""

    mechanisms: tuple[str, ...]
    servers: dict[str, Callable[[], SaslServer]]


def sasl_listeners(
    config: KafkaConfig, credentials: ScramCredentialStore
) -> dict[str, SaslListener]:
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
                f"{ListenerKey.of(name, 'sasl.enabled.mechanisms').or_unprefixed()}: "
                f"{', '.join(unsupported) or 'none'} not supported "
                f"by kplane (supported: {', '.join(SUPPORTED_MECHANISMS)})",
                name="sasl.enabled.mechanisms",
            )
        servers: dict[str, Callable[[], SaslServer]] = {}
        for mechanism in mechanisms:
            module = _jaas_module(config, name, mechanism)
            if mechanism == PLAIN:
                users = {
                    k[len("user_") :]: v for k, v in module.options.items() if k.startswith("user_")
                }
                servers[mechanism] = lambda users=users: PlainServer(users)  # type: ignore[misc]
            else:
                servers[mechanism] = lambda m=mechanism: ScramServer(m, credentials)  # type: ignore[misc]
        out[name] = SaslListener(mechanisms, servers)
    return out


def _jaas_module(config: KafkaConfig, listener: str, mechanism: str) -> LoginModule:
    """The listener's JAAS login module for ``mechanism``; required for PLAIN's users."""
    key = str(ListenerKey.of(listener, "sasl.jaas.config", mechanism))
    value = config.sasl_jaas_config(listener, mechanism)
    text = value.value if isinstance(value, Password) else value
    if not text:
        if mechanism == PLAIN:
            raise ConfigException(
                f"{key} (or sasl.jaas.config): required for {mechanism} on listener {listener}",
                name="sasl.jaas.config",
            )
        return LoginModule("", "required")
    try:
        return parse_jaas_config(text)
    except JaasError as exc:
        raise ConfigException(f"{key}: {exc}", name="sasl.jaas.config") from exc
