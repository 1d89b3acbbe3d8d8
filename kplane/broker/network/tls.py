"""TLS for SSL listeners: the server SSLContext of a listener, and client principals.

Every ``ssl.*`` setting is read per listener (``listener.name.<name>.ssl.*`` wins over the
unprefixed value). Key material is loaded through ``cryptography`` (PKCS12 or PEM), so no
keytool is needed; JKS is refused with the conversion to run.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kplane.broker.config.definitions import Password
from kplane.broker.config.endpoint import SecurityProtocol
from kplane.broker.config.errors import ConfigException
from kplane.broker.config.kafka_config import KafkaConfig
from kplane.broker.config.listener_key import ListenerKey
from kplane.broker.security.principal_mapping import ANONYMOUS, SslPrincipalMapper

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}

if TYPE_CHECKING:
    from cryptography import x509


def _secret(value: Any) -> str | None:
    return value.value if isinstance(value, Password) else value


def server_ssl_context(
    config: KafkaConfig, listener_name: str
) -> tuple[ssl.SSLContext, x509.Certificate]:
    """The SSLContext of an SSL listener and its certificate; ConfigException naming the
    key when unusable."""
    from cryptography import x509  # TLS only: imported when an SSL listener is set up

    from kplane.common.certs import load_cert_chain, load_keystore, load_truststore

    def get(name: str) -> Any:
        return config.listener_get(listener_name, name)

    def key(name: str) -> str:
        return ListenerKey.of(listener_name, name).or_unprefixed()

    location = get("ssl.keystore.location")
    if not location:
        raise ConfigException(
            f"{key('ssl.keystore.location')}: required by the SSL listener {listener_name}",
            name="ssl.keystore.location",
        )
    try:
        chain_pem, key_pem = load_keystore(
            location,
            str(get("ssl.keystore.type")).upper(),
            _secret(get("ssl.keystore.password")),
            _secret(get("ssl.key.password")),
        )
    except (OSError, ValueError) as exc:
        raise ConfigException(
            f"{key('ssl.keystore.location')}: {exc}", name="ssl.keystore.location"
        ) from exc
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    load_cert_chain(context, chain_pem, key_pem)
    certificate = x509.load_pem_x509_certificates(chain_pem)[0]
    enabled = [p for p in get("ssl.enabled.protocols") if p in _VERSIONS]
    if not enabled:
        raise ConfigException(
            f"{key('ssl.enabled.protocols')}: none of {get('ssl.enabled.protocols')} is "
            "supported (TLSv1.2, TLSv1.3)",
            name="ssl.enabled.protocols",
        )
    context.minimum_version = min(_VERSIONS[p] for p in enabled)
    context.maximum_version = max(_VERSIONS[p] for p in enabled)
    ciphers = get("ssl.cipher.suites")
    if ciphers:
        try:
            context.set_ciphers(":".join(ciphers))
        except ssl.SSLError as exc:
            raise ConfigException(
                f"{key('ssl.cipher.suites')}: {exc}", name="ssl.cipher.suites"
            ) from exc
    context.verify_mode = _CLIENT_AUTH[str(get("ssl.client.auth"))]
    truststore = get("ssl.truststore.location")
    if truststore:
        try:
            cadata = load_truststore(
                truststore,
                str(get("ssl.truststore.type")).upper(),
                _secret(get("ssl.truststore.password")),
            )
        except (OSError, ValueError) as exc:
            raise ConfigException(
                f"{key('ssl.truststore.location')}: {exc}", name="ssl.truststore.location"
            ) from exc
        context.load_verify_locations(cadata=cadata.decode())
    elif context.verify_mode != ssl.CERT_NONE:
        raise ConfigException(
            f"{key('ssl.truststore.location')}: required when ssl.client.auth is "
            f"{get('ssl.client.auth')}",
            name="ssl.truststore.location",
        )
    return context, certificate


@dataclass(frozen=True)
class ServerTls:
    """One TLS listener: its SSLContext and how a client certificate becomes a principal."""

    context: ssl.SSLContext
    mapper: SslPrincipalMapper
    certificate: x509.Certificate

    def principal_of(self, ssl_object: ssl.SSLObject | None) -> str:
        """``User:<name>`` of a client certificate's subject DN after
        ``ssl.principal.mapping.rules``; ANONYMOUS without a certificate. Raises
        NoMatchingRuleError when no rule applies (Kafka fails the authentication)."""
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        if not der:
            return ANONYMOUS
        from cryptography import x509

        dn = x509.load_der_x509_certificate(der).subject.rfc4514_string()
        return "User:" + self.mapper.get_name(dn)


def server_tls(config: KafkaConfig) -> dict[str, ServerTls]:
    """The TLS set-up of every SSL and SASL_SSL listener; ConfigException naming the key."""
    out = {}
    for endpoint in config.listeners:
        if endpoint.security_protocol not in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL):
            continue
        name = endpoint.listener_name
        rules = config.listener_get(name, "ssl.principal.mapping.rules")
        try:
            mapper = SslPrincipalMapper.from_rules(rules)
        except ValueError as exc:
            raise ConfigException(
                f"{ListenerKey.of(name, 'ssl.principal.mapping.rules').or_unprefixed()}: {exc}",
                name="ssl.principal.mapping.rules",
            ) from exc
        context, certificate = server_ssl_context(config, name)
        out[name] = ServerTls(context, mapper, certificate)
    return out
