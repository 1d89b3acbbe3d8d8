"""TLS for kplane's client: the SSLContext of a ClientConfig, and authentication errors.

Trusted CAs come from ``ssl.ca.location`` (a PEM file) and/or ``ssl.truststore.*`` (PEM or
PKCS12); without either the system's default CAs are trusted. The client certificate for
mutual TLS comes from ``ssl.certificate.location`` + ``ssl.key.location`` (PEM files) or
``ssl.keystore.*`` (PKCS12 or PEM), read with common.certs.
"""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from kplane.common.network.config import ClientConfig


class AuthenticationError(Exception):
    """The broker and the client could not authenticate each other (TLS or SASL), Kafka's
    AuthenticationException: retrying with the same settings cannot help, so it is not
    retried."""


class SslAuthenticationError(AuthenticationError):
    """The TLS handshake failed: the broker's certificate did not verify, or the broker
    refused the client's certificate (or its absence)."""


def tls_failure(address: str, exc: ssl.SSLError) -> SslAuthenticationError | None:
    """The SslAuthenticationError of a failed TLS handshake; None when the connection only
    closed (EOF, reset), which may be transient and stays a connection error."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return SslAuthenticationError(
            f"TLS handshake with {address} failed: {exc.verify_message} (check "
            "ssl.ca.location / ssl.truststore.location and ssl.endpoint.identification.algorithm)"
        )
    if isinstance(exc, ssl.SSLEOFError | ssl.SSLZeroReturnError | ssl.SSLSyscallError):
        return None
    return SslAuthenticationError(f"TLS handshake with {address} failed: {exc.reason or exc}")


def client_ssl_context(config: ClientConfig) -> ssl.SSLContext:
    """The SSLContext of ``config``'s ``ssl.*`` settings; ValueError naming the key when a
    file cannot be used."""
    from kplane.common.certs import load_cert_chain, load_keystore, load_truststore  # TLS only

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = config.ssl_endpoint_identification_algorithm == "https"
    if config.ssl_ca_location:
        try:
            context.load_verify_locations(cafile=config.ssl_ca_location)
        except (OSError, ValueError) as exc:
            _fail("ssl.ca.location", config.ssl_ca_location, exc)
    if config.ssl_truststore_location:
        try:
            cadata = load_truststore(
                config.ssl_truststore_location,
                config.ssl_truststore_type,
                config.ssl_truststore_password,
            )
        except (OSError, ValueError) as exc:
            _fail("ssl.truststore.location", config.ssl_truststore_location, exc)
        context.load_verify_locations(cadata=cadata.decode())
    if not config.ssl_ca_location and not config.ssl_truststore_location:
        context.load_default_certs()
    if config.ssl_certificate_location and config.ssl_key_location:
        try:
            context.load_cert_chain(
                config.ssl_certificate_location,
                config.ssl_key_location,
                config.ssl_key_password or _no_key_password,
            )
        except (OSError, ValueError) as exc:
            _fail("ssl.certificate.location/ssl.key.location", config.ssl_key_location, exc)
    elif config.ssl_keystore_location:
        try:
            chain_pem, key_pem = load_keystore(
                config.ssl_keystore_location,
                config.ssl_keystore_type,
                config.ssl_keystore_password,
                config.ssl_key_password,
            )
        except (OSError, ValueError) as exc:
            _fail("ssl.keystore.location", config.ssl_keystore_location, exc)
        load_cert_chain(context, chain_pem, key_pem)
    return context


def _fail(key: str, path: str, exc: Exception) -> NoReturn:
    raise ValueError(f"{key}: {path}: {exc}") from exc


def _no_key_password() -> str:
    """Asked for by OpenSSL only for an encrypted key (instead of prompting on the tty)."""
    raise ValueError("the private key is encrypted: set ssl.key.password")
