"""Test PKI generation (``kplane certs create``) and keystore/truststore loading."""

from __future__ import annotations

import ipaddress
import socket
import ssl
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kplane.common.certs import PkiFiles, create_test_pki, load_keystore, load_truststore
from kplane.tools import cli

PASSWORD = "s3cret-pw"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PkiFiles:
    directory = tmp_path_factory.mktemp("pki")
    return create_test_pki(directory, ["localhost", "127.0.0.1"], password=PASSWORD, days=30)


def server_context(tmp_path: Path, chain: bytes, key: bytes, cadata: bytes | None = None):
    """A server SSLContext from in-memory PEM (ssl needs files for the key: write them)."""
    cert_file, key_file = tmp_path / "chain.pem", tmp_path / "key.pem"
    cert_file.write_bytes(chain)
    key_file.write_bytes(key)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert_file, key_file)
    if cadata is not None:
        ctx.load_verify_locations(cadata=cadata.decode())
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def handshake(
    server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext, server_hostname: str
) -> tuple[dict, dict | None]:
    """A real TLS handshake over loopback TCP; returns (server cert seen by the client,
    client cert seen by the server). Raises the client's error if it fails."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    seen: dict[str, object] = {}

    def serve() -> None:
        conn, _ = listener.accept()
        try:
            with server_ctx.wrap_socket(conn, server_side=True) as tls:
                seen["peer"] = tls.getpeercert()
                tls.sendall(b"ok")
        except (ssl.SSLError, OSError) as exc:
            seen["error"] = exc

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            client_ctx.wrap_socket(raw, server_hostname=server_hostname) as tls,
        ):
            assert tls.recv(2) == b"ok"
            server_cert = tls.getpeercert()
    finally:
        thread.join(5)
        listener.close()
    assert "error" not in seen, seen.get("error")
    return server_cert, seen.get("peer")  # type: ignore[return-value]


def client_context(pki: PkiFiles, with_cert: bool = False) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
    if with_cert:
        ctx.load_cert_chain(pki.client_cert, pki.client_key)  # unencrypted key: no password
    return ctx


def test_all_files_written(pki: PkiFiles) -> None:
    names = sorted(p.name for p in pki.paths())
    assert names == sorted(
        [
            "ca.pem",
            "ca-key.pem",
            "broker.pem",
            "broker-key.pem",
            "broker.p12",
            "client.pem",
            "client-key.pem",
            "client.p12",
            "truststore.pem",
            "truststore.p12",
        ]
    )
    assert all(p.is_file() and p.stat().st_size > 0 for p in pki.paths())
    assert pki.password == PASSWORD
    assert pki.truststore_pem.read_bytes() == pki.ca_cert.read_bytes()


def test_certificate_contents(pki: PkiFiles) -> None:
    ca = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert ca.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    ca.verify_directly_issued_by(ca)

    broker = x509.load_pem_x509_certificate(pki.broker_cert.read_bytes())
    broker.verify_directly_issued_by(ca)
    assert broker.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "kplane-broker"
    san = broker.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    eku = broker.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in eku and ExtendedKeyUsageOID.CLIENT_AUTH in eku

    client = x509.load_pem_x509_certificate(pki.client_cert.read_bytes())
    client.verify_directly_issued_by(ca)
    assert client.subject.rfc4514_string() == "CN=kplane-client,OU=test,O=kplane"


def test_key_encryption(pki: PkiFiles) -> None:
    broker_key = pki.broker_key.read_bytes()
    assert b"BEGIN ENCRYPTED PRIVATE KEY" in broker_key
    with pytest.raises(TypeError):
        serialization.load_pem_private_key(broker_key, None)
    serialization.load_pem_private_key(broker_key, PASSWORD.encode())
    client_key = pki.client_key.read_bytes()
    assert b"BEGIN PRIVATE KEY" in client_key  # unencrypted PKCS8, for librdkafka
    serialization.load_pem_private_key(client_key, None)


@pytest.mark.parametrize("hostname", ["localhost", "127.0.0.1"])
@pytest.mark.parametrize("store", ["PEM", "PKCS12"])
def test_tls_handshake(pki: PkiFiles, tmp_path: Path, store: str, hostname: str) -> None:
    if store == "PEM":
        combined = tmp_path / "broker-keystore.pem"
        # Kafka's PEM keystore form: key and chain in one file, here the key first.
        combined.write_bytes(pki.broker_key.read_bytes() + pki.broker_cert.read_bytes())
        chain, key = load_keystore(combined, "PEM", None, key_password=PASSWORD)
    else:
        chain, key = load_keystore(pki.broker_p12, "PKCS12", PASSWORD, None)
    server_cert, _ = handshake(server_context(tmp_path, chain, key), client_context(pki), hostname)
    assert dict(x[0] for x in server_cert["subject"])["commonName"] == "kplane-broker"


def test_wrong_hostname_refused(pki: PkiFiles, tmp_path: Path) -> None:
    chain, key = load_keystore(pki.broker_p12, "PKCS12", PASSWORD, None)
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(server_context(tmp_path, chain, key), client_context(pki), "example.com")


def test_mutual_tls_client_cert_chains_to_ca(pki: PkiFiles, tmp_path: Path) -> None:
    chain, key = load_keystore(pki.broker_p12, "PKCS12", PASSWORD, None)
    cadata = load_truststore(pki.truststore_p12, "PKCS12", PASSWORD)
    assert cadata == load_truststore(pki.truststore_pem, "PEM", None)
    _, client_cert = handshake(
        server_context(tmp_path, chain, key, cadata=cadata),
        client_context(pki, with_cert=True),
        "localhost",
    )
    assert client_cert is not None
    assert dict(x[0] for x in client_cert["subject"])["commonName"] == "kplane-client"


def test_pkcs12_needs_password(pki: PkiFiles) -> None:
    for path in (pki.broker_p12, pki.client_p12, pki.truststore_p12):
        data = path.read_bytes()
        with pytest.raises(ValueError):
            pkcs12.load_pkcs12(data, None)
        with pytest.raises(ValueError):
            pkcs12.load_pkcs12(data, b"wrong")
        store = pkcs12.load_pkcs12(data, PASSWORD.encode())
        if path == pki.truststore_p12:
            assert store.key is None and store.cert is None
            assert len(store.additional_certs) == 1
        else:
            assert store.key is not None and store.cert is not None
    with pytest.raises(ValueError, match="wrong password"):
        load_keystore(pki.broker_p12, "PKCS12", "wrong", None)
    with pytest.raises(ValueError):
        load_keystore(pki.broker_p12, "PKCS12", None, None)


def test_pem_keystore_key_password(pki: PkiFiles, tmp_path: Path) -> None:
    combined = tmp_path / "ks.pem"
    combined.write_bytes(pki.broker_cert.read_bytes() + pki.broker_key.read_bytes())
    with pytest.raises(ValueError, match=r"ssl\.key\.password"):
        load_keystore(combined, "PEM", None, None)
    with pytest.raises(ValueError, match="wrong password"):
        load_keystore(combined, "PEM", None, "nope")
    chain, key = load_keystore(combined, "pem", None, PASSWORD)
    certs = x509.load_pem_x509_certificates(chain)
    assert len(certs) == 2  # leaf first, then the CA
    assert certs[0].subject.rfc4514_string() == "CN=kplane-broker"
    assert b"BEGIN PRIVATE KEY" in key
    only_cert = tmp_path / "cert-only.pem"
    only_cert.write_bytes(pki.broker_cert.read_bytes())
    with pytest.raises(ValueError, match="private key"):
        load_keystore(only_cert, "PEM", None, PASSWORD)


def test_jks_refused(pki: PkiFiles) -> None:
    with pytest.raises(ValueError, match=r"ssl\.keystore\.type=JKS is not supported") as info:
        load_keystore(pki.broker_p12, "JKS", PASSWORD, None)
    assert "keytool -importkeystore -srcstoretype JKS -deststoretype PKCS12" in str(info.value)
    with pytest.raises(ValueError, match="JKS is not supported"):
        load_truststore(pki.truststore_p12, "JKS", PASSWORD)
    with pytest.raises(ValueError, match="unsupported store type"):
        load_keystore(pki.broker_p12, "BKS", PASSWORD, None)


def test_cli_create(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "out"
    rc = cli.main(
        [
            "certs",
            "create",
            "--dir",
            str(out_dir),
            "--hosts",
            "localhost,127.0.0.1,::1",
            "--days",
            "2",
            "--password",
            "pw",
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert "security.protocol=SSL" in out
    assert f"ssl.ca.location={(out_dir / 'ca.pem').resolve()}" in out
    assert "ssl.certificate.location=" in out and "ssl.key.location=" in out
    assert str((out_dir / "broker.p12").resolve()) in out
    broker = x509.load_pem_x509_certificate((out_dir / "broker.pem").read_bytes())
    san = broker.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("::1") in san.get_values_for_type(x509.IPAddress)
    pkcs12.load_pkcs12((out_dir / "broker.p12").read_bytes(), b"pw")
