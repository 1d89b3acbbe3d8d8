"""ClientConfig's security settings: Kafka's keys, validation naming the key, and the
SSLContext built from them."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import pytest

from kplane.common.certs import PkiFiles, create_test_pki
from kplane.common.network.config import ClientConfig
from kplane.common.network.sasl import SaslCredentials
from kplane.common.network.security import client_ssl_context

BOOTSTRAP = {"bootstrap.servers": "127.0.0.1:9092"}
SCRAM_JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="alice" password="alice-secret";'
)


def config(**props: Any) -> ClientConfig:
    return ClientConfig.from_properties(
        {**BOOTSTRAP, **{k.replace("_", "."): v for k, v in props.items()}}
    )


def sasl(**props: Any) -> ClientConfig:
    return config(**{"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", **props})


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PkiFiles:
    return create_test_pki(tmp_path_factory.mktemp("pki"), ["localhost", "127.0.0.1"])


# security.protocol --------------------------------------------------------------------------
def test_plaintext_by_default_and_security_keys_are_fields_not_extra() -> None:
    cfg = config(ssl_ca_location="/ca.pem", sasl_username="u", linger_ms="5")
    assert cfg.security_protocol == "PLAINTEXT"
    assert not cfg.uses_ssl and not cfg.uses_sasl
    assert cfg.ssl_ca_location == "/ca.pem" and cfg.sasl_username == "u"
    assert cfg.extra == {"linger.ms": "5"}


@pytest.mark.parametrize(
    ("value", "ssl_on", "sasl_on"),
    [
        ("PLAINTEXT", False, False),
        ("ssl", True, False),
        ("sasl_plaintext", False, True),
        ("SASL_SSL", True, True),
    ],
)
def test_security_protocols(value: str, ssl_on: bool, sasl_on: bool) -> None:
    props: dict[str, str] = {"security_protocol": value}
    if sasl_on:
        props |= {"sasl_mechanism": "PLAIN", "sasl_username": "u", "sasl_password": "p"}
    cfg = config(**props)
    assert cfg.security_protocol == value.upper()
    assert (cfg.uses_ssl, cfg.uses_sasl) == (ssl_on, sasl_on)


def test_unknown_security_protocol() -> None:
    with pytest.raises(ValueError, match=r"security\.protocol: 'TLS' is not one of PLAINTEXT"):
        config(security_protocol="TLS")


# ssl.* --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"ssl_truststore_type": "JKS"}, r"ssl\.truststore\.type=JKS is not supported: convert"),
        ({"ssl_keystore_type": "jks"}, r"ssl\.keystore\.type=JKS is not supported: convert"),
        ({"ssl_truststore_type": "P12"}, r"ssl\.truststore\.type: 'P12' is not one of PEM"),
        (
            {"ssl_endpoint_identification_algorithm": "ldap"},
            r"ssl\.endpoint\.identification\.algorithm: 'ldap' is not supported",
        ),
        ({"ssl_certificate_location": "/c.pem"}, r"ssl\.certificate\.location and ssl\.key"),
        ({"ssl_key_location": "/k.pem"}, r"ssl\.certificate\.location and ssl\.key"),
        (
            {
                "ssl_certificate_location": "/c.pem",
                "ssl_key_location": "/k.pem",
                "ssl_keystore_location": "/ks.p12",
            },
            r"ssl\.keystore\.location: set either it or ssl\.certificate\.location",
        ),
    ],
)
def test_invalid_ssl_settings_name_the_key(props: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        config(security_protocol="SSL", **props)
    config(**props)  # ignored without TLS, as Kafka's clients do


def test_ssl_settings_are_normalised() -> None:
    cfg = config(
        security_protocol="SSL",
        ssl_truststore_type="pem",
        ssl_endpoint_identification_algorithm="NONE",
    )
    assert (cfg.ssl_truststore_type, cfg.ssl_keystore_type) == ("PEM", "PKCS12")
    assert cfg.ssl_endpoint_identification_algorithm == "none"


# sasl.* -------------------------------------------------------------------------------------
def test_sasl_username_and_password() -> None:
    cfg = sasl(sasl_mechanism="scram-sha-256", sasl_username="alice", sasl_password="pw")
    assert cfg.sasl_credentials() == SaslCredentials("SCRAM-SHA-256", "alice", "pw")


@pytest.mark.parametrize("module", ["scram.ScramLoginModule", "plain.PlainLoginModule"])
def test_sasl_jaas_config(module: str) -> None:
    """Java's clients take the user from either login module, whatever the mechanism."""
    jaas = SCRAM_JAAS.replace("scram.ScramLoginModule", module)
    cfg = sasl(sasl_mechanism="SCRAM-SHA-512", sasl_jaas_config=jaas)
    assert cfg.sasl_credentials() == SaslCredentials("SCRAM-SHA-512", "alice", "alice-secret")


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"sasl_mechanism": "GSSAPI"}, r"sasl\.mechanism: 'GSSAPI' is not supported"),
        ({"sasl_mechanism": "OAUTHBEARER"}, r"sasl\.mechanism: 'OAUTHBEARER' is not supported"),
        ({}, r"sasl\.username and sasl\.password \(or sasl\.jaas\.config\): required"),
        ({"sasl_username": "alice"}, r"sasl\.username and sasl\.password"),
        ({"sasl_password": "pw"}, r"sasl\.username and sasl\.password"),
        (
            {"sasl_username": "alice", "sasl_jaas_config": SCRAM_JAAS},
            r"sasl\.jaas\.config: set either it or sasl\.username",
        ),
        ({"sasl_jaas_config": "PlainLoginModule required"}, r"sasl\.jaas\.config: .*';'"),
        (
            {"sasl_jaas_config": "com.sun.security.auth.module.Krb5LoginModule required;"},
            r"sasl\.jaas\.config: com\.sun\.security\.auth\.module\.Krb5LoginModule is not",
        ),
        (
            {"sasl_jaas_config": 'x.PlainLoginModule required username="alice";'},
            r'sasl\.jaas\.config: needs username="\.\.\." and password',
        ),
    ],
)
def test_invalid_sasl_settings_name_the_key(props: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        sasl(**props)


def test_the_gssapi_default_is_refused_only_with_sasl() -> None:
    assert config(security_protocol="SSL").sasl_mechanism == "GSSAPI"
    with pytest.raises(ValueError, match=r"sasl\.mechanism: 'GSSAPI'"):
        config(security_protocol="SASL_SSL", sasl_username="u", sasl_password="p")


def test_passwords_stay_out_of_repr() -> None:
    cfg = config(
        security_protocol="SASL_SSL",
        sasl_mechanism="PLAIN",
        sasl_jaas_config=SCRAM_JAAS,
        ssl_key_password="key-secret",
        ssl_keystore_password="keystore-secret",
        ssl_truststore_password="truststore-secret",
    )
    text = repr(cfg) + repr(cfg.sasl_credentials())
    assert "secret" not in text


# the SSLContext -----------------------------------------------------------------------------
def test_context_from_a_ca_file_verifies_the_hostname(pki: PkiFiles) -> None:
    context = client_ssl_context(config(security_protocol="SSL", ssl_ca_location=str(pki.ca_cert)))
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert [c["subject"] for c in context.get_ca_certs()] == [
        ((("organizationName", "kplane"),), (("commonName", "kplane-test-ca"),))
    ]


@pytest.mark.parametrize("algorithm", ["", "none"])
def test_hostname_verification_can_be_disabled(pki: PkiFiles, algorithm: str) -> None:
    cfg = config(
        security_protocol="SSL",
        ssl_ca_location=str(pki.ca_cert),
        ssl_endpoint_identification_algorithm=algorithm,
    )
    context = client_ssl_context(cfg)
    assert not context.check_hostname
    assert context.verify_mode == ssl.CERT_REQUIRED  # the chain is still verified


def test_context_from_java_stores(pki: PkiFiles) -> None:
    cfg = config(
        security_protocol="SSL",
        ssl_truststore_location=str(pki.truststore_p12),
        ssl_truststore_password=pki.password,
        ssl_keystore_location=str(pki.client_p12),
        ssl_keystore_password=pki.password,
    )
    assert len(client_ssl_context(cfg).get_ca_certs()) == 1


def test_encrypted_pem_key(pki: PkiFiles) -> None:
    """The broker's key is encrypted: ssl.key.password opens it, and without it the client
    says so instead of OpenSSL prompting on the terminal."""
    props = {
        "security_protocol": "SSL",
        "ssl_ca_location": str(pki.ca_cert),
        "ssl_certificate_location": str(pki.broker_cert),
        "ssl_key_location": str(pki.broker_key),
    }
    client_ssl_context(config(**props, ssl_key_password=pki.password))
    with pytest.raises(ValueError, match=r"ssl\.key\.location: .*set ssl\.key\.password"):
        client_ssl_context(config(**props))


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"ssl_ca_location": "/nonexistent/ca.pem"}, r"ssl\.ca\.location: /nonexistent/ca\.pem"),
        (
            {"ssl_truststore_location": "TRUSTSTORE_P12", "ssl_truststore_password": "wrong"},
            r"ssl\.truststore\.location: .*wrong password",
        ),
        (
            {"ssl_keystore_location": "CLIENT_P12", "ssl_keystore_password": "wrong"},
            r"ssl\.keystore\.location: .*wrong password",
        ),
        (
            {"ssl_truststore_location": "NOT_PEM", "ssl_truststore_type": "PEM"},
            r"ssl\.truststore\.location: .*not\.pem: truststore .* holds no certificate",
        ),
    ],
)
def test_unusable_files_name_the_key(
    pki: PkiFiles, props: dict[str, str], message: str, tmp_path: Path
) -> None:
    (tmp_path / "not.pem").write_text("no certificate here\n")
    files = {
        "TRUSTSTORE_P12": str(pki.truststore_p12),
        "CLIENT_P12": str(pki.client_p12),
        "NOT_PEM": str(tmp_path / "not.pem"),
    }
    props = {k: files.get(v, v) for k, v in props.items()}
    with pytest.raises(ValueError, match=message):
        client_ssl_context(config(security_protocol="SSL", **props))
