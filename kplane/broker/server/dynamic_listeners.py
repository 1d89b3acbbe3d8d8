"""Listeners and their security changed at runtime (KIP-226).

DynamicListenerConfig adds and removes listeners (``listeners``, ``advertised.listeners``,
``listener.security.protocol.map``) and publishes the broker's new endpoints;
DynamicListenerSecurity swaps a listener's keystore/truststore or SASL login context for
new connections while open ones keep theirs.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping

import structlog

from kplane.broker.config.errors import ConfigException
from kplane.broker.config.kafka_config import KafkaConfig
from kplane.broker.config.listener_key import ListenerKey
from kplane.broker.network.socket_server import SocketServer, log_listener_bound
from kplane.broker.network.tls import ServerTls, server_tls
from kplane.broker.security.sasl import SaslListener, sasl_listeners
from kplane.broker.security.scram import ScramCredentialStore

log = structlog.get_logger(__name__)

LISTENER_CONFIGS = frozenset(
    {"listeners", "advertised.listeners", "listener.security.protocol.map"}
)


class ProposedListenerSecurity:
    """The TLS and SASL set-ups of a proposed config, loaded (keystores read, login
    contexts built) once for its validation and the reconfiguration that follows, whichever
    component asks first."""

    def __init__(self, credentials: ScramCredentialStore) -> None:
        self.credentials = credentials
        self._last: tuple[KafkaConfig, dict[str, ServerTls], dict[str, SaslListener]] | None
        self._last = None

    def of(self, config: KafkaConfig) -> tuple[dict[str, ServerTls], dict[str, SaslListener]]:
        """(TLS by listener, SASL by listener) of ``config``; ConfigException naming the key
        that does not load."""
        last = self._last
        if last is not None and last[0] is config:
            return last[1], last[2]
        tls, sasl = server_tls(config), sasl_listeners(config, self.credentials)
        self._last = (config, tls, sasl)
        return tls, sasl


class DynamicListenerConfig:
    """Adds and removes listeners; the inter-broker and control-plane listeners stay, and
    no listener changes its security protocol."""

    reconfigurable_configs = LISTENER_CONFIGS

    def __init__(
        self,
        config: KafkaConfig,
        socket_server: SocketServer,
        sasl: MutableMapping[str, SaslListener],
        proposed: ProposedListenerSecurity,
        publish: Callable[[], None],
    ) -> None:
        self._current = config
        self.socket_server = socket_server
        self.sasl = sasl
        self.proposed = proposed
        self._publish = publish

    def validate_reconfiguration(self, new: KafkaConfig) -> None:
        old = self._current
        old_protocols = {e.listener_name: e.security_protocol for e in old.listeners}
        new_names = {e.listener_name for e in new.listeners}
        for endpoint in new.listeners:
            before = old_protocols.get(endpoint.listener_name)
            if before is not None and before is not endpoint.security_protocol:
                raise ConfigException(
                    f"listeners: security protocol cannot be updated for existing listener "
                    f"{endpoint.listener_name} ({before.value} -> "
                    f"{endpoint.security_protocol.value}); add a listener with a new name",
                    name="listeners",
                )
        for kept, why in (
            (old.inter_broker_listener_name, "the inter-broker listener"),
            (old.control_plane_listener_name, "the control-plane listener"),
        ):
            if kept and kept not in new_names:
                raise ConfigException(
                    f"listeners: {kept} cannot be removed, it is {why}", name="listeners"
                )
        # Keystores and login contexts of new listeners must load before anything changes.
        self.proposed.of(new)

    def reconfigure(self, old: KafkaConfig, new: KafkaConfig) -> None:
        self._current = new
        old_names = {e.listener_name for e in old.listeners}
        new_names = {e.listener_name for e in new.listeners}
        for name in sorted(old_names - new_names):
            self.socket_server.remove_listener(name)
            self.sasl.pop(name, None)
            log.info("listener removed", listener=name)
        added = [e for e in new.listeners if e.listener_name not in old_names]
        if added:
            tls, sasl = self.proposed.of(new)
            for endpoint in added:
                name = endpoint.listener_name
                if name in sasl:
                    self.sasl[name] = sasl[name]
                bound = self.socket_server.add_listener(endpoint, tls.get(name))
                log_listener_bound(endpoint, bound.port, dynamic=True)
        self._publish()


def _sans(tls: ServerTls) -> set[str]:
    """Subject alternative names of a listener's certificate."""
    from cryptography import x509  # TLS only

    cert = tls.certificate
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {str(v) for v in ext.get_values_for_type(x509.DNSName)} | {
        str(v) for v in ext.get_values_for_type(x509.IPAddress)
    }


class DynamicListenerSecurity:
    """``listener.name.<l>.ssl.*`` and ``listener.name.<l>.<mechanism>.sasl.jaas.config``:
    new connections get the new keystore or login context. A keystore that does not load,
    or whose certificate's subject alternative names differ from the old one's, is refused."""

    reconfigurable_configs = frozenset(
        {
            "ssl.keystore.type",
            "ssl.keystore.location",
            "ssl.keystore.password",
            "ssl.key.password",
            "ssl.truststore.type",
            "ssl.truststore.location",
            "ssl.truststore.password",
            "ssl.client.auth",
            "ssl.enabled.protocols",
            "ssl.cipher.suites",
            "sasl.enabled.mechanisms",
            "sasl.jaas.config",
        }
    )

    def __init__(
        self,
        socket_server: SocketServer,
        tls: MutableMapping[str, ServerTls],
        sasl: MutableMapping[str, SaslListener],
        proposed: ProposedListenerSecurity,
    ) -> None:
        self.socket_server = socket_server
        self.tls = tls
        self.sasl = sasl
        self.proposed = proposed

    def validate_reconfiguration(self, new: KafkaConfig) -> None:
        fresh, _ = self.proposed.of(new)
        for name, tls in fresh.items():
            old = self.tls.get(name)
            if old is None or old.certificate == tls.certificate:
                continue
            if _sans(old) != _sans(tls):
                raise ConfigException(
                    f"{ListenerKey.of(name, 'ssl.keystore.location')}: the new certificate's "
                    f"subject alternative names {sorted(_sans(tls))} do not match the current "
                    f"ones {sorted(_sans(old))}",
                    name="ssl.keystore.location",
                )

    def reconfigure(self, old: KafkaConfig, new: KafkaConfig) -> None:
        tls_listeners, sasl = self.proposed.of(new)
        for name, tls in tls_listeners.items():
            if name in self.socket_server.acceptors:
                self.tls[name] = tls
                self.socket_server.set_tls(name, tls)
        for name, listener in sasl.items():
            self.sasl[name] = listener
        log.info("listener security reloaded", listeners=sorted(self.tls) + sorted(self.sasl))
