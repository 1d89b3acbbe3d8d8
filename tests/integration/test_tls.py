"""SSL listeners (KIP-2): TLS beside PLAINTEXT on one broker, real clients on both."""

from __future__ import annotations

import socket

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from kplane.common.certs import PkiFiles
from kplane.testing.plugin import RunningBroker
from kplane.testing.wire import WireClient
from tests.integration.helpers import (
    assert_one_error_line,
    kafka_python_round_trip,
    numbered_round_trip,
    run_cli,
    with_inter_broker_sasl,
)


def _tls_broker(broker_factory, pki: PkiFiles, client_auth: str = "none", **extra: str):
    props = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "listener.name.ssl.ssl.keystore.type": "PKCS12",
        "listener.name.ssl.ssl.keystore.location": str(pki.broker_p12),
        "listener.name.ssl.ssl.keystore.password": pki.password,
        "listener.name.ssl.ssl.truststore.type": "PEM",
        "listener.name.ssl.ssl.truststore.location": str(pki.truststore_pem),
        "listener.name.ssl.ssl.client.auth": client_auth,
    }
    props.update(extra)
    return broker_factory(props)


def _confluent_ssl(broker: RunningBroker, pki: PkiFiles, with_cert: bool = True) -> dict:
    config = {
        "bootstrap.servers": broker.bootstrap("SSL"),
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki.ca_cert),
    }
    if with_cert:
        config["ssl.certificate.location"] = str(pki.client_cert)
        config["ssl.key.location"] = str(pki.client_key)
    return config


def test_confluent_kafka_over_tls_with_a_pkcs12_keystore(broker_factory, pki) -> None:
    broker = _tls_broker(broker_factory, pki)
    got = numbered_round_trip(_confluent_ssl(broker, pki, with_cert=False), "tls-topic", 2000)
    assert got == [b"rt-%d" % i for i in range(2000)]
    # The SSL listener advertises itself only.
    metadata = AdminClient(_confluent_ssl(broker, pki, False)).list_topics(timeout=10)
    assert [(b.host, b.port) for b in metadata.brokers.values()] == [broker.address("SSL")]


def test_kafka_python_over_tls_with_a_pem_keystore(broker_factory, pki, tmp_path) -> None:
    keystore = tmp_path / "broker-keystore.pem"
    keystore.write_bytes(pki.broker_cert.read_bytes() + pki.broker_key.read_bytes())
    broker = _tls_broker(
        broker_factory,
        pki,
        **{
            "listener.name.ssl.ssl.keystore.type": "PEM",
            "listener.name.ssl.ssl.keystore.location": str(keystore),
            "listener.name.ssl.ssl.key.password": pki.password,
        },
    )
    common = {
        "bootstrap_servers": broker.bootstrap("SSL"),
        "security_protocol": "SSL",
        "ssl_cafile": str(pki.ca_cert),
    }
    values = kafka_python_round_trip(common, "tls-kp", 500)
    assert values == [b"kp-%d" % i for i in range(500)]


def test_required_client_auth_gives_the_certificate_principal(broker_factory, pki) -> None:
    broker = _tls_broker(broker_factory, pki, client_auth="required")
    principals: list[str] = []
    broker.on_request("Metadata", lambda request: principals.append(request.principal))
    got = numbered_round_trip(_confluent_ssl(broker, pki, with_cert=True), "mtls", 10)
    assert len(got) == 10
    assert "User:CN=kplane-client,OU=test,O=kplane" in principals

    # Without a client certificate the handshake is refused; the broker keeps serving.
    admin = AdminClient({**_confluent_ssl(broker, pki, with_cert=False), "socket.timeout.ms": 3000})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    assert len(numbered_round_trip(_confluent_ssl(broker, pki), "mtls-after", 3)) == 3


def test_plaintext_client_on_the_tls_port_is_dropped(broker_factory, pki) -> None:
    broker = _tls_broker(broker_factory, pki)
    for junk in (b"\x00\x00\x00\x10\x00\x12\x00\x03" + b"\x00" * 12, b"GET / HTTP/1.0\r\n\r\n"):
        with WireClient(*broker.address("SSL")) as client:
            client.send_raw(junk)
            assert _closed_after_any_alert(client.sock)
    # Both listeners still serve.
    assert len(numbered_round_trip(_confluent_ssl(broker, pki), "after-junk", 3)) == 3
    plain = AdminClient({"bootstrap.servers": broker.bootstrap("PLAINTEXT")})
    assert plain.list_topics(timeout=10).brokers


def _closed_after_any_alert(sock: socket.socket, timeout: float = 10.0) -> bool:
    """True when the broker closes the connection (it may send a TLS alert first)."""
    sock.settimeout(timeout)
    try:
        while sock.recv(4096):
            pass
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return True


def test_bad_keystore_stops_start_up_with_one_line(tmp_path, pki) -> None:
    done = run_cli(
        tmp_path,
        "listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "listener.name.ssl.ssl.keystore.type=JKS",
        f"listener.name.ssl.ssl.keystore.location={pki.broker_p12}",
    )
    assert_one_error_line(done, "JKS", "keytool")


def test_principal_mapping_rules_name_the_authorized_principal(broker_factory, pki) -> None:
    extra = with_inter_broker_sasl(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]+),OU=test,.*$/$1/U,DEFAULT",
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:KPLANE-CLIENT",
        }
    )
    broker = _tls_broker(broker_factory, pki, client_auth="required", **extra)
    principals: list[str] = []
    broker.on_request("Metadata", lambda request: principals.append(request.principal))
    assert len(numbered_round_trip(_confluent_ssl(broker, pki), "mapped", 5)) == 5
    assert set(principals) == {"User:KPLANE-CLIENT"}
    # ANONYMOUS on PLAINTEXT is no super user: the topic is hidden from it.
    plain = AdminClient({"bootstrap.servers": broker.bootstrap("PLAINTEXT")})
    assert "mapped" not in plain.list_topics(timeout=10).topics


def test_a_certificate_no_rule_maps_is_refused(broker_factory, pki) -> None:
    broker = _tls_broker(
        broker_factory,
        pki,
        client_auth="required",
        **{"ssl.principal.mapping.rules": "RULE:^CN=somebody-else$/$0/"},
    )
    admin = AdminClient({**_confluent_ssl(broker, pki), "socket.timeout.ms": 3000})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    plain = AdminClient({"bootstrap.servers": broker.bootstrap("PLAINTEXT")})
    assert plain.list_topics(timeout=10).brokers
