"""SCRAM-SHA-256/512: users created through the admin API, then used by real clients."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from kplane.common.certs import PkiFiles
from kplane.testing.plugin import RunningBroker
from tests.integration.helpers import kafka_python_round_trip, numbered_round_trip

MECHANISMS = "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN"
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret";'
)


@pytest.fixture
def scram_broker(broker_factory, pki) -> RunningBroker:
    return broker_factory(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,"
            "SASL_SSL://127.0.0.1:0",
            "sasl.enabled.mechanisms": MECHANISMS,
            "sasl.jaas.config": JAAS,
            "listener.name.sasl_ssl.ssl.keystore.type": "PKCS12",
            "listener.name.sasl_ssl.ssl.keystore.location": str(pki.broker_p12),
            "listener.name.sasl_ssl.ssl.keystore.password": pki.password,
        }
    )


def _admin(broker: RunningBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap("PLAINTEXT")})


def _upsert(broker: RunningBroker, user: str, mechanism: ScramMechanism, password: str) -> None:
    upsertion = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(mechanism, 8192), password.encode()
    )
    admin = _admin(broker)
    for future in admin.alter_user_scram_credentials([upsertion]).values():
        future.result(timeout=10)


def _client(
    broker: RunningBroker, listener: str, mechanism: str, user: str, password: str, pki: PkiFiles
) -> dict:
    config = {
        "bootstrap.servers": broker.bootstrap(listener),
        "security.protocol": listener,
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
        "socket.timeout.ms": 5000,
    }
    if listener == "SASL_SSL":
        config["ssl.ca.location"] = str(pki.ca_cert)
    return config


@pytest.mark.parametrize(
    ("listener", "mechanism"),
    [("SASL_SSL", ScramMechanism.SCRAM_SHA_512), ("SASL_PLAINTEXT", ScramMechanism.SCRAM_SHA_256)],
)
def test_user_created_through_the_admin_api_then_used(scram_broker, pki, listener, mechanism):
    name = "SCRAM-SHA-512" if mechanism == ScramMechanism.SCRAM_SHA_512 else "SCRAM-SHA-256"
    _upsert(scram_broker, "alice", mechanism, "alice-secret")
    config = _client(scram_broker, listener, name, "alice", "alice-secret", pki)
    topic = f"scram-{listener.lower()}"
    assert numbered_round_trip(config, topic, 500) == [b"rt-%d" % i for i in range(500)]
    # Only the salted keys are stored, in Kafka's format.
    stored = json.loads(scram_broker.znode("/config/users/alice"))
    assert "alice-secret" not in json.dumps(stored)
    assert stored["config"][name].endswith(",iterations=8192")


def test_kafka_python_scram(scram_broker) -> None:
    _upsert(scram_broker, "bob", ScramMechanism.SCRAM_SHA_256, "bob-secret")
    common = {
        "bootstrap_servers": scram_broker.bootstrap("SASL_PLAINTEXT"),
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "bob",
        "sasl_plain_password": "bob-secret",
    }
    assert kafka_python_round_trip(common, "scram-kp", 100) == [b"kp-%d" % i for i in range(100)]


def test_describe_wrong_password_and_deletion(scram_broker, pki) -> None:
    _upsert(scram_broker, "carol", ScramMechanism.SCRAM_SHA_512, "carol-secret")
    admin = _admin(scram_broker)
    described = admin.describe_user_scram_credentials(["carol"])["carol"].result(timeout=10)
    (info,) = described.scram_credential_infos
    assert (info.mechanism, info.iterations) == (ScramMechanism.SCRAM_SHA_512, 8192)
    with pytest.raises(KafkaException, match=r"RESOURCE_NOT_FOUND|does not exist"):
        admin.describe_user_scram_credentials(["nobody"])["nobody"].result(timeout=10)

    wrong = _client(scram_broker, "SASL_SSL", "SCRAM-SHA-512", "carol", "wrong", pki)
    with pytest.raises(KafkaException):
        AdminClient(wrong).list_topics(timeout=3)
    good = _client(scram_broker, "SASL_SSL", "SCRAM-SHA-512", "carol", "carol-secret", pki)
    assert AdminClient(good).list_topics(timeout=10).brokers

    deletion = UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_512)
    for future in admin.alter_user_scram_credentials([deletion]).values():
        future.result(timeout=10)
    with pytest.raises(KafkaException):
        AdminClient(good).list_topics(timeout=3)
    # Every listener keeps serving.
    assert admin.list_topics(timeout=10).brokers
    plain = _client(scram_broker, "SASL_PLAINTEXT", "PLAIN", "admin", "admin-secret", pki)
    assert AdminClient(plain).list_topics(timeout=10).brokers


def test_invalid_alterations_are_refused_with_kafkas_errors(scram_broker) -> None:
    admin = _admin(scram_broker)
    too_few = UserScramCredentialUpsertion(
        "dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 1000), b"pw"
    )
    with pytest.raises(KafkaException, match="iterations"):
        admin.alter_user_scram_credentials([too_few])["dave"].result(timeout=10)
    missing = UserScramCredentialDeletion("erin", ScramMechanism.SCRAM_SHA_256)
    with pytest.raises(KafkaException, match="does not exist"):
        admin.alter_user_scram_credentials([missing])["erin"].result(timeout=10)
