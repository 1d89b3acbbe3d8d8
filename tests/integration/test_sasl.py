"""SASL/PLAIN on SASL_PLAINTEXT and SASL_SSL listeners, beside PLAINTEXT (KIP-2, KIP-103)."""

from __future__ import annotations

import struct

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from kplane.common.certs import PkiFiles
from kplane.protocol.errors import ErrorCode
from kplane.testing.plugin import RunningBroker
from tests.integration.helpers import (
    assert_one_error_line,
    kafka_python_round_trip,
    numbered_round_trip,
    run_cli,
)

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_alice="alice-secret";'
)


@pytest.fixture
def sasl_broker(broker_factory, pki) -> RunningBroker:
    return broker_factory(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,"
            "SASL_SSL://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
            "listener.name.sasl_ssl.ssl.keystore.type": "PKCS12",
            "listener.name.sasl_ssl.ssl.keystore.location": str(pki.broker_p12),
            "listener.name.sasl_ssl.ssl.keystore.password": pki.password,
        }
    )


def _confluent(broker: RunningBroker, listener: str, password: str, pki: PkiFiles) -> dict:
    config = {
        "bootstrap.servers": broker.bootstrap(listener),
        "security.protocol": listener,
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": password,
    }
    if listener == "SASL_SSL":
        config["ssl.ca.location"] = str(pki.ca_cert)
    return config


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_confluent_kafka_plain(sasl_broker, pki, listener) -> None:
    config = _confluent(sasl_broker, listener, "alice-secret", pki)
    assert numbered_round_trip(config, f"plain-{listener.lower()}", 1000) == [
        b"rt-%d" % i for i in range(1000)
    ]


def test_principal_is_the_authenticated_user(sasl_broker, pki) -> None:
    principals: list[str] = []
    sasl_broker.on_request("Metadata", lambda request: principals.append(request.principal))
    AdminClient(_confluent(sasl_broker, "SASL_PLAINTEXT", "alice-secret", pki)).list_topics(
        timeout=10
    )
    assert principals and set(principals) == {"User:alice"}


def test_kafka_python_plain(sasl_broker) -> None:
    common = {
        "bootstrap_servers": sasl_broker.bootstrap("SASL_PLAINTEXT"),
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "admin",
        "sasl_plain_password": "admin-secret",
    }
    values = kafka_python_round_trip(common, "plain-kp", 200)
    assert values == [b"kp-%d" % i for i in range(200)]


def test_wrong_password_fails_and_the_broker_keeps_serving(sasl_broker, pki) -> None:
    admin = AdminClient(
        {**_confluent(sasl_broker, "SASL_PLAINTEXT", "wrong", pki), "socket.timeout.ms": 3000}
    )
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=3)
    good = _confluent(sasl_broker, "SASL_PLAINTEXT", "alice-secret", pki)
    assert AdminClient(good).list_topics(timeout=10).brokers
    plain = AdminClient({"bootstrap.servers": sasl_broker.bootstrap("PLAINTEXT")})
    assert plain.list_topics(timeout=10).brokers


def test_wire_level_rules(sasl_broker) -> None:
    # A request other than ApiVersions/SaslHandshake/SaslAuthenticate before authenticating
    # closes the connection.
    with sasl_broker.wire("SASL_PLAINTEXT") as client:
        client.send(
            MetadataRequest(
                topics=None,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        )
        assert client.is_closed_by_peer()
    # An unknown mechanism is answered UNSUPPORTED_SASL_MECHANISM with the enabled list.
    with sasl_broker.wire("SASL_PLAINTEXT") as client:
        response = client.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
        assert response.error_code == ErrorCode.unsupported_sasl_mechanism
        assert list(response.mechanisms) == ["PLAIN"]
        assert client.is_closed_by_peer()
    # Garbage before SASL: closed, nothing else harmed.
    with sasl_broker.wire("SASL_PLAINTEXT") as client:
        client.send_raw(struct.pack(">i", 6) + b"\xff\xff\x00\x00\x00\x01")
        assert client.is_closed_by_peer()
    # A handshake on the PLAINTEXT listener is an illegal SASL state.
    with sasl_broker.wire("PLAINTEXT") as client:
        response = client.request(SaslHandshakeRequest(mechanism="PLAIN"))
        assert response.error_code == ErrorCode.illegal_sasl_state


@pytest.mark.parametrize(
    ("override", "mention"),
    [
        (
            'listener.name.sasl_plaintext.plain.sasl.jaas.config=PlainLoginModule required x="y"',
            "listener.name.sasl_plaintext.plain.sasl.jaas.config",
        ),
        ("sasl.enabled.mechanisms=GSSAPI", "sasl.enabled.mechanisms"),
    ],
)
def test_bad_sasl_config_stops_start_up(tmp_path, override: str, mention: str) -> None:
    done = run_cli(
        tmp_path,
        "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms=PLAIN",
        override,
    )
    assert_one_error_line(done, mention)
