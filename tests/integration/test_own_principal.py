"""The broker's own principal under an authorizer: a config under which the broker cannot talk
to itself is refused at start-up in one line; the shipped ACL config works as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kplane.common.certs import BROKER_CN, PkiFiles
from kplane.testing.plugin import free_port, wait_for_port
from tests.repo import REPO_ROOT

from .helpers import assert_one_error_line, run_cli

AUTHORIZER = "authorizer.class.name=kafka.security.authorizer.AclAuthorizer"


def test_a_broker_its_authorizer_would_deny_does_not_start(tmp_path: Path) -> None:
    done = run_cli(
        tmp_path,
        "listeners=PLAINTEXT://127.0.0.1:0",
        AUTHORIZER,
        "super.users=User:admin",
    )
    assert_one_error_line(done, "User:ANONYMOUS", "ClusterAction", "super.users")


def test_plaintext_inter_broker_listener_with_anonymous_super_user_starts(broker_factory) -> None:
    broker = broker_factory(
        {"authorizer.class.name": AUTHORIZER.split("=", 1)[1], "super.users": "User:ANONYMOUS"}
    )
    admin = AdminClient({"bootstrap.servers": broker.bootstrap()})
    assert list(admin.list_topics(timeout=10).brokers) == [0]


def test_ssl_inter_broker_principal_is_the_keystore_subject(broker_factory, pki: PkiFiles) -> None:
    broker = broker_factory(
        {
            "listeners": "SSL://127.0.0.1:0",
            "inter.broker.listener.name": "SSL",
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(pki.broker_p12),
            "ssl.keystore.password": pki.password,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(pki.truststore_pem),
            "ssl.client.auth": "required",
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]+).*$/$1/,DEFAULT",
            "authorizer.class.name": AUTHORIZER.split("=", 1)[1],
            "super.users": f"User:{BROKER_CN}",
        }
    )
    admin = AdminClient(
        {
            "bootstrap.servers": broker.bootstrap("SSL"),
            "security.protocol": "SSL",
            "ssl.ca.location": str(pki.ca_cert),
            "ssl.certificate.location": str(pki.client_cert),
            "ssl.key.location": str(pki.client_key),
        }
    )
    assert list(admin.list_topics(timeout=10).brokers) == [0]


def _sasl(bootstrap: str, user: str) -> dict[str, str]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": f"{user}-secret",
    }


def test_readme_shows_the_shipped_acl_config() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    section = readme.split("## Authorization (ACLs)", 1)[1]
    block = re.search(r"```properties\n(.*?)```", section, re.S)
    assert block is not None
    assert block.group(1) == (REPO_ROOT / "configs/acl.properties").read_text()


def test_the_shipped_acl_config_works_as_written(broker_process) -> None:
    client_port, internal_port = free_port(), free_port()
    broker_process(
        "configs/acl.properties",
        f"listeners=CLIENT://127.0.0.1:{client_port},INTERNAL://127.0.0.1:{internal_port}",
        plaintext_port=False,
    )
    wait_for_port("127.0.0.1", client_port)
    bootstrap = f"127.0.0.1:{client_port}"
    admin = AdminClient(_sasl(bootstrap, "admin"))
    assert list(admin.list_topics(timeout=15).brokers) == [0]
    admin.create_topics([NewTopic("orders", 1, 1)])["orders"].result(timeout=15)

    producer = Producer({**_sasl(bootstrap, "alice"), "message.timeout.ms": 5000})
    failures: list[KafkaError] = []
    producer.produce("orders", b"x", on_delivery=lambda err, _msg: failures.append(err))
    producer.flush(15)
    assert failures and failures[0] is not None
    assert failures[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException):
        AdminClient(_sasl(bootstrap, "alice")).create_topics(
            [NewTopic("denied", 1, 1)]
        )["denied"].result(timeout=15)
