"""ClientConfig: the Kafka client settings kplane's client honours, by their Kafka names.

Security settings take Kafka's names: librdkafka's (``ssl.ca.location``,
``ssl.certificate.location``, ``ssl.key.location``, ``sasl.username``, ``sasl.password``)
and Java's (``ssl.truststore.*``, ``ssl.keystore.*``, ``sasl.jaas.config``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from kplane.common.jaas import JaasError, parse_jaas_config
from kplane.common.network.sasl import MECHANISMS, SaslCredentials

RECOVERY_STRATEGIES = ("none", "rebootstrap")
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
STORE_TYPES = ("PEM", "PKCS12")
ENDPOINT_IDENTIFICATION = ("https", "", "none")
JAAS_MODULES = ("PlainLoginModule", "ScramLoginModule")

JKS_UNSUPPORTED = (
    "ssl.keystore.type=JKS is not supported: convert it with keytool -importkeystore "
    "-srcstoretype JKS -deststoretype PKCS12 -srckeystore STORE.jks -destkeystore STORE.p12"
)
JKS_TRUSTSTORE_UNSUPPORTED = (
    "ssl.truststore.type=JKS is not supported: convert it with keytool -importkeystore "
    "-srcstoretype JKS -deststoretype PKCS12 -srckeystore STORE.jks -destkeystore STORE.p12"
)



def parse_bootstrap(value: str | list[str]) -> list[tuple[str, int]]:
    """``host:port,host:port`` (or a list) -> [(host, port)]."""
    items = value.split(",") if isinstance(value, str) else list(value)
    out = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"bootstrap.servers: {item!r} is not host:port")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("bootstrap.servers: no servers given")
    return out


@dataclass
class ClientConfig:
    """Settings of KafkaClient; build it from Kafka-style keys with ``from_properties``.

    ``ssl.*`` settings apply with ``security.protocol`` SSL or SASL_SSL, ``sasl.*`` ones
    with SASL_PLAINTEXT or SASL_SSL. Store types default to PKCS12 (librdkafka's keystore
    format; Java's JKS is refused with the keytool conversion to run).
    """

    bootstrap_servers: list[tuple[str, int]]
    client_id: str = "kplane"
    security_protocol: str = "PLAINTEXT"
    request_timeout_ms: int = 30_000
    reconnect_backoff_ms: int = 50
    reconnect_backoff_max_ms: int = 1_000
    connections_max_idle_ms: int = 540_000
    metadata_max_age_ms: int = 300_000
    metadata_recovery_strategy: str = "none"
    metadata_recovery_rebootstrap_trigger_ms: int = 300_000
    ssl_ca_location: str | None = None
    ssl_truststore_location: str | None = None
    ssl_truststore_type: str = "PKCS12"
    ssl_truststore_password: str | None = field(default=None, repr=False)
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password: str | None = field(default=None, repr=False)
    ssl_keystore_location: str | None = None
    ssl_keystore_type: str = "PKCS12"
    ssl_keystore_password: str | None = field(default=None, repr=False)
    ssl_endpoint_identification_algorithm: str = "https"
    sasl_mechanism: str = "GSSAPI"
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    sasl_jaas_config: str | None = field(default=None, repr=False)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.metadata_recovery_strategy not in RECOVERY_STRATEGIES:
            raise ValueError(
                f"metadata.recovery.strategy: {self.metadata_recovery_strategy!r} is not one "
                f"of {', '.join(RECOVERY_STRATEGIES)}"
            )
        self.security_protocol = self.security_protocol.strip().upper()
        if self.security_protocol not in SECURITY_PROTOCOLS:
            raise ValueError(
                f"security.protocol: {self.security_protocol!r} is not one of "
                f"{', '.join(SECURITY_PROTOCOLS)}"
            )
        if self.uses_ssl:
            self._check_ssl()
        if self.uses_sasl:
            self.sasl_credentials()

    @property
    def uses_ssl(self) -> bool:
        """TLS on every connection (SSL, SASL_SSL)."""
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        """SASL authentication on every connection (SASL_PLAINTEXT, SASL_SSL)."""
        return self.security_protocol.startswith("SASL_")

    def _check_ssl(self) -> None:
        self.ssl_truststore_type = _store_type(
            "ssl.truststore.type", self.ssl_truststore_type, JKS_TRUSTSTORE_UNSUPPORTED
        )
        self.ssl_keystore_type = _store_type(
            "ssl.keystore.type", self.ssl_keystore_type, JKS_UNSUPPORTED
        )
        algorithm = self.ssl_endpoint_identification_algorithm.strip().lower()
        if algorithm not in ENDPOINT_IDENTIFICATION:
            raise ValueError(
                f"ssl.endpoint.identification.algorithm: {algorithm!r} is not supported "
                "(https verifies the broker's hostname; '' or none does not)"
            )
        self.ssl_endpoint_identification_algorithm = algorithm
        if bool(self.ssl_certificate_location) != bool(self.ssl_key_location):
            raise ValueError(
                "ssl.certificate.location and ssl.key.location: set both for a client "
                "certificate, or neither"
            )
        if self.ssl_certificate_location and self.ssl_keystore_location:
            raise ValueError(
                "ssl.keystore.location: set either it or ssl.certificate.location and "
                "ssl.key.location for the client certificate, not both"
            )

    def sasl_credentials(self) -> SaslCredentials:
        """The mechanism, user and password to authenticate with, from ``sasl.username`` and
        ``sasl.password`` or from ``sasl.jaas.config``; ValueError naming the key when
        unusable."""
        mechanism = self.sasl_mechanism.strip().upper()
        if mechanism not in MECHANISMS:
            raise ValueError(
                f"sasl.mechanism: {mechanism!r} is not supported by kplane's client "
                f"(supported: {', '.join(MECHANISMS)})"
            )
        direct = self.sasl_username is not None or self.sasl_password is not None
        if direct and self.sasl_jaas_config:
            raise ValueError(
                "sasl.jaas.config: set either it or sasl.username and sasl.password, not both"
            )
        if self.sasl_jaas_config:
            username, password, token_auth = _jaas_credentials(self.sasl_jaas_config)
            return SaslCredentials(mechanism, username, password, token_auth)
        if not self.sasl_username or self.sasl_password is None:
            raise ValueError(
                f"sasl.username and sasl.password (or sasl.jaas.config): required with "
                f"security.protocol={self.security_protocol}"
            )
        return SaslCredentials(mechanism, self.sasl_username, self.sasl_password)

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> ClientConfig:
        """Build from ``{"bootstrap.servers": ..., "metadata.recovery.strategy": ...}``.

        Keys this client does not know are kept in ``extra`` (producer and consumer
        settings read them from there).
        """
        known = {f.name.replace("_", "."): f for f in fields(cls) if f.name != "extra"}
        values: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in props.items():
            f = known.get(key)
            if f is None:
                extra[key] = value
            elif f.name == "bootstrap_servers":
                values[f.name] = parse_bootstrap(value)
            elif f.type in ("int", int):
                values[f.name] = int(value)
            else:
                values[f.name] = str(value)
        if "bootstrap_servers" not in values:
            raise ValueError("bootstrap.servers is required")
        return cls(**values, extra=extra)


def _store_type(key: str, value: str, jks_message: str) -> str:
    kind = value.strip().upper()
    if kind == "JKS":
        raise ValueError(jks_message)
    if kind not in STORE_TYPES:
        raise ValueError(f"{key}: {value!r} is not one of {', '.join(STORE_TYPES)}")
    return kind


def _jaas_credentials(text: str) -> tuple[str, str, bool]:
    """``username`` and ``password`` of a PlainLoginModule or ScramLoginModule entry, and
    ScramLoginModule's ``tokenauth`` (a delegation token's id and HMAC as user and password)."""
    try:
        module = parse_jaas_config(text)
    except JaasError as exc:
        raise ValueError(f"sasl.jaas.config: {exc}") from exc
    if module.name.rsplit(".", 1)[-1] not in JAAS_MODULES:
        raise ValueError(
            f"sasl.jaas.config: {module.name} is not supported by kplane's client "
            f"(supported: {', '.join(JAAS_MODULES)})"
        )
    username, password = module.options.get("username"), module.options.get("password")
    if not username or password is None:
        raise ValueError('sasl.jaas.config: needs username="..." and password="..." options')
    return username, password, module.options.get("tokenauth", "").lower() == "true"
