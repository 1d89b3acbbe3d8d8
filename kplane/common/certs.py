"""Test PKI generation (a keytool replacement for trying kplane) and keystore loading.

:func:`create_test_pki` writes a CA, a broker certificate and a client certificate in PEM and
PKCS12 forms. :func:`load_keystore` and :func:`load_truststore` read Kafka's
``ssl.keystore.*`` / ``ssl.truststore.*`` files (PEM or PKCS12) and return PEM bytes for
Python's :mod:`ssl`.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
import ssl
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kplane.common.network.config import JKS_TRUSTSTORE_UNSUPPORTED, JKS_UNSUPPORTED

DEFAULT_PASSWORD = "kplane-secret"
BROKER_CN = "kplane-broker"
CLIENT_CN = "kplane-client"
CA_CN = "kplane-test-ca"


_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----\r?\n.*?-----END \1-----\r?\n?", re.DOTALL)


@dataclass(frozen=True)
class PkiFiles:
    """Every file :func:`create_test_pki` wrote, and the password protecting them."""

    directory: Path
    password: str
    ca_cert: Path
    ca_key: Path
    broker_cert: Path
    broker_key: Path
    broker_p12: Path
    client_cert: Path
    client_key: Path
    client_p12: Path
    truststore_pem: Path
    truststore_p12: Path

    def paths(self) -> list[Path]:
        """The written files, in a stable order."""
        return [
            self.ca_cert,
            self.ca_key,
            self.broker_cert,
            self.broker_key,
            self.broker_p12,
            self.client_cert,
            self.client_key,
            self.client_p12,
            self.truststore_pem,
            self.truststore_p12,
        ]


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _pem_key(key: ec.EllipticCurvePrivateKey, password: str | None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode())
        if password
        else serialization.NoEncryption()
    )
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )


def _write(path: Path, data: bytes, private: bool = False) -> None:
    path.write_bytes(data)
    if private:
        path.chmod(0o600)


def _leaf(
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    key: ec.EllipticCurvePrivateKey,
    subject: x509.Name,
    hosts: Sequence[str],
    days: int,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=True,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if hosts:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([_general_name(h) for h in hosts]), critical=False
        )
    return builder.sign(ca_key, hashes.SHA256())


def _ca(days: int) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kplane"),
            x509.NameAttribute(NameOID.COMMON_NAME, CA_CN),
        ]
    )
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _truststore_p12(ca_cert: x509.Certificate, password: str) -> bytes:
    encryption = serialization.BestAvailableEncryption(password.encode())
    # Java's keytool/KeyStore only treats a PKCS12 certificate as a trusted entry when it
    # carries Oracle's trusted-key-usage attribute, which serialize_java_truststore adds
    # (cryptography >= 45); older versions fall back to a plain certificate bag.
    java = getattr(pkcs12, "serialize_java_truststore", None)
    if java is not None:
        data: bytes = java([pkcs12.PKCS12Certificate(ca_cert, b"kplane-ca")], encryption)
        return data
    return pkcs12.serialize_key_and_certificates(b"kplane-ca", None, None, [ca_cert], encryption)


def create_test_pki(
    directory: Path,
    hosts: Sequence[str],
    password: str = DEFAULT_PASSWORD,
    days: int = 365,
) -> PkiFiles:
    """Write a test CA, a broker and a client certificate under ``directory``.

    ``hosts`` become the broker certificate's subjectAltName (IP literals as IPAddress
    entries, everything else as DNS names). Private keys of the CA and the client are
    unencrypted PKCS8 (so librdkafka's ``ssl.key.location`` works without a password); the
    broker key and every PKCS12 file are protected by ``password``.
    """
    if not password:
        raise ValueError("a non-empty password is required")
    if days < 1:
        raise ValueError("days must be at least 1")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    hosts = [h.strip() for h in hosts if h.strip()]
    p12_encryption = serialization.BestAvailableEncryption(password.encode())

    ca_cert, ca_key = _ca(days)
    broker_key = _key()
    broker_cert = _leaf(
        ca_cert,
        ca_key,
        broker_key,
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, BROKER_CN)]),
        hosts,
        days,
    )
    client_key = _key()
    client_cert = _leaf(
        ca_cert,
        ca_key,
        client_key,
        x509.Name(
            [
                # Most significant first, so the DN reads CN=...,OU=...,O=... (RFC 2253)
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kplane"),
                x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "test"),
                x509.NameAttribute(NameOID.COMMON_NAME, CLIENT_CN),
            ]
        ),
        [],
        days,
    )

    files = PkiFiles(
        directory=directory,
        password=password,
        ca_cert=directory / "ca.pem",
        ca_key=directory / "ca-key.pem",
        broker_cert=directory / "broker.pem",
        broker_key=directory / "broker-key.pem",
        broker_p12=directory / "broker.p12",
        client_cert=directory / "client.pem",
        client_key=directory / "client-key.pem",
        client_p12=directory / "client.p12",
        truststore_pem=directory / "truststore.pem",
        truststore_p12=directory / "truststore.p12",
    )
    ca_pem = _pem_cert(ca_cert)
    _write(files.ca_cert, ca_pem)
    _write(files.ca_key, _pem_key(ca_key, None), private=True)
    _write(files.broker_cert, _pem_cert(broker_cert) + ca_pem)
    _write(files.broker_key, _pem_key(broker_key, password), private=True)
    _write(
        files.broker_p12,
        pkcs12.serialize_key_and_certificates(
            b"kplane-broker", broker_key, broker_cert, [ca_cert], p12_encryption
        ),
        private=True,
    )
    _write(files.client_cert, _pem_cert(client_cert) + ca_pem)
    _write(files.client_key, _pem_key(client_key, None), private=True)
    _write(
        files.client_p12,
        pkcs12.serialize_key_and_certificates(
            b"kplane-client", client_key, client_cert, [ca_cert], p12_encryption
        ),
        private=True,
    )
    _write(files.truststore_pem, ca_pem)
    _write(files.truststore_p12, _truststore_p12(ca_cert, password))
    return files


# -- loading -------------------------------------------------------------------------------


def _check_type(store_type: str, jks_message: str) -> str:
    kind = store_type.strip().upper()
    if kind == "JKS":
        raise ValueError(jks_message)
    if kind not in ("PEM", "PKCS12"):
        raise ValueError(f"unsupported store type {store_type!r}: expected PEM or PKCS12")
    return kind


def _unencrypted_pem(key: PrivateKeyTypes) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _public_der(cert_or_key: x509.Certificate | PrivateKeyTypes) -> bytes:
    public = cert_or_key.public_key()
    return public.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _load_p12(data: bytes, passwords: Sequence[str | None]) -> pkcs12.PKCS12KeyAndCertificates:
    error: Exception | None = None
    for password in dict.fromkeys(passwords):  # distinct, in order
        try:
            return pkcs12.load_pkcs12(data, password.encode() if password is not None else None)
        except ValueError as exc:
            error = exc
    raise ValueError(f"cannot open PKCS12 store (wrong password?): {error}") from error


def load_keystore(
    path: str | Path,
    type: str,
    password: str | None,
    key_password: str | None = None,
) -> tuple[bytes, bytes]:
    """Read a keystore; return ``(cert_chain_pem, key_pem)``.

    ``cert_chain_pem`` starts with the certificate matching the key, followed by the rest of
    the chain; ``key_pem`` is the private key as unencrypted PKCS8 PEM. For ``PEM``, the file
    holds the certificate chain and the private key (any order); an encrypted key is opened
    with ``key_password`` (``ssl.key.password``), falling back to ``password``. For
    ``PKCS12``, the store is opened with ``password`` (``ssl.keystore.password``), falling back
    to ``key_password``. ``JKS`` is refused with a ValueError explaining the conversion.
    """
    kind = _check_type(type, JKS_UNSUPPORTED)
    data = Path(path).read_bytes()
    if kind == "PKCS12":
        store = _load_p12(data, [password, key_password])
        if store.key is None or store.cert is None:
            raise ValueError(f"PKCS12 keystore {path} holds no private key and certificate")
        chain = [store.cert.certificate] + [c.certificate for c in store.additional_certs]
        return b"".join(_pem_cert(c) for c in chain), _unencrypted_pem(store.key)

    certs: list[x509.Certificate] = []
    key_blocks: list[bytes] = []
    for match in _PEM_BLOCK.finditer(data):
        label = match.group(1)
        if label == b"CERTIFICATE":
            certs.append(x509.load_pem_x509_certificate(match.group(0)))
        elif label.endswith(b"PRIVATE KEY"):
            key_blocks.append(match.group(0))
    if not certs:
        raise ValueError(f"PEM keystore {path} holds no certificate")
    if len(key_blocks) != 1:
        raise ValueError(
            f"PEM keystore {path} must hold exactly one private key, found {len(key_blocks)}"
        )
    key = _load_pem_key(key_blocks[0], [key_password, password])
    wanted = _public_der(key)
    leaf = next((c for c in certs if _public_der(c) == wanted), None)
    if leaf is None:
        raise ValueError(f"PEM keystore {path}: no certificate matches the private key")
    chain = [leaf] + [c for c in certs if c is not leaf]
    return b"".join(_pem_cert(c) for c in chain), _unencrypted_pem(key)


def _load_pem_key(block: bytes, passwords: Sequence[str | None]) -> PrivateKeyTypes:
    encrypted = b"ENCRYPTED" in block.split(b"\n", 1)[0] or b"Proc-Type: 4,ENCRYPTED" in block
    candidates = [p for p in passwords if p] if encrypted else [None]
    if not candidates:
        raise ValueError("the private key is encrypted: set ssl.key.password")
    error: Exception | None = None
    for password in dict.fromkeys(candidates):
        try:
            key = serialization.load_pem_private_key(
                block, password.encode() if password is not None else None
            )
        except (ValueError, TypeError) as exc:
            error = exc
            continue
        return key
    raise ValueError(f"cannot decrypt the private key (wrong password?): {error}") from error


def load_truststore(path: str | Path, type: str, password: str | None = None) -> bytes:
    """Read a truststore; return its certificates as concatenated PEM (``cadata``)."""
    kind = _check_type(type, JKS_TRUSTSTORE_UNSUPPORTED)
    data = Path(path).read_bytes()
    if kind == "PKCS12":
        store = _load_p12(data, [password, None] if password else [None])
        certs = [c.certificate for c in store.additional_certs]
        if store.cert is not None:
            certs.insert(0, store.cert.certificate)
    else:
        certs = x509.load_pem_x509_certificates(data) if b"-----BEGIN" in data else []
    if not certs:
        raise ValueError(f"truststore {path} holds no certificate")
    return b"".join(_pem_cert(c) for c in certs)


def load_cert_chain(context: ssl.SSLContext, chain_pem: bytes, key_pem: bytes) -> None:
    """Load a certificate chain and key held in memory into ``context``.

    ``load_cert_chain`` reads files only: it is handed a private temporary file that is
    removed at once.
    """
    fd, path = tempfile.mkstemp(prefix="kplane-keystore-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(chain_pem + b"\n" + key_pem)
        context.load_cert_chain(path)
    finally:
        os.unlink(path)
