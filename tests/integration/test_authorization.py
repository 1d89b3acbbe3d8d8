"""The ACL authorizer: grants and denials seen by confluent-kafka, kafka-python and kplane's
Admin, ACLs managed through the ACL APIs, and every listener serving after each denial."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka import KafkaConsumer
from kafka.errors import GroupAuthorizationFailedError

from kplane.client import admin as kadmin
from kplane.client.kafka_client import KafkaClient
from kplane.common.network.config import ClientConfig
from kplane.protocol.errors import ErrorCode
from kplane.protocol.errors import KafkaError as PKafkaError
from kplane.testing.plugin import RunningBroker
from tests.integration.helpers import with_inter_broker_sasl

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    + " ".join(f'user_{u}="{p}"' for u, p in USERS.items())
    + ";"
)


@pytest.fixture
def secured(broker_factory) -> RunningBroker:
    return broker_factory(
        with_inter_broker_sasl(
            {
                "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                "sasl.enabled.mechanisms": "PLAIN",
                "sasl.jaas.config": JAAS,
                "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                "super.users": "User:admin",
                "num.partitions": "1",
            }
        )
    )


def _config(broker: RunningBroker, user: str) -> dict:
    return {
        "bootstrap.servers": broker.bootstrap("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": USERS[user],
    }


def _acl(
    name: str,
    principal: str,
    operation: AclOperation,
    resource: ResourceType = ResourceType.TOPIC,
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
    permission: AclPermissionType = AclPermissionType.ALLOW,
) -> AclBinding:
    return AclBinding(resource, name, pattern, principal, "*", operation, permission)


def _create(admin: AdminClient, *bindings: AclBinding) -> None:
    for future in admin.create_acls(list(bindings)).values():
        future.result(timeout=10)


def _produce_error(config: dict, topic: str) -> KafkaError | None:
    errors: list[KafkaError | None] = []
    producer = Producer({**config, "message.timeout.ms": 5000})
    producer.produce(topic, b"v", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(10)
    return errors[0] if errors else None


def _consume(config: dict, topic: str, group: str, count: int) -> list[bytes]:
    consumer = Consumer({**config, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            got.append(msg.value())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


def test_grants_and_denials(secured) -> None:
    admin = AdminClient(_config(secured, "admin"))
    for future in admin.create_topics(
        [NewTopic("orders", 1, 1), NewTopic("secret", 1, 1)]
    ).values():
        future.result(timeout=10)
    alice, bob = _config(secured, "alice"), _config(secured, "bob")

    # No ACL, no access: denied, and hidden from the topic listing.
    error = _produce_error(alice, "orders")
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert "orders" not in AdminClient(alice).list_topics(timeout=10).topics

    _create(
        admin,
        _acl("orders", "User:alice", AclOperation.WRITE),
        _acl("orders", "User:alice", AclOperation.READ),
        _acl(
            "app-",
            "User:alice",
            AclOperation.READ,
            ResourceType.GROUP,
            ResourcePatternType.PREFIXED,
        ),
    )
    assert _produce_error(alice, "orders") is None
    assert set(AdminClient(alice).list_topics(timeout=10).topics) == {
        "orders"
    }  # READ implies DESCRIBE
    assert _consume(alice, "orders", "app-1", 1) == [b"v"]
    with pytest.raises(KafkaException) as info:
        _consume(alice, "orders", "other-group", 1)
    assert info.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    # bob has no ACLs; a DENY beats an ALLOW on the wildcard.
    error = _produce_error(bob, "orders")
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    _create(
        admin,
        _acl("*", "User:alice", AclOperation.ALL),
        _acl("secret", "User:alice", AclOperation.WRITE, permission=AclPermissionType.DENY),
    )
    error = _produce_error(alice, "secret")
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    described = admin.describe_acls(
        AclBindingFilter(
            ResourceType.ANY,
            None,
            ResourcePatternType.ANY,
            "User:alice",
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
    ).result(timeout=10)
    assert len(described) == 5
    deleted = admin.delete_acls(
        [
            AclBindingFilter(
                ResourceType.TOPIC,
                None,
                ResourcePatternType.ANY,
                "User:alice",
                None,
                AclOperation.ANY,
                AclPermissionType.ANY,
            )
        ]
    )
    (future,) = deleted.values()
    assert len(future.result(timeout=10)) == 4
    error = _produce_error(alice, "orders")
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # Every listener keeps serving.
    assert AdminClient(_config(secured, "admin")).list_topics(timeout=10).brokers
    assert (
        AdminClient({"bootstrap.servers": secured.bootstrap("PLAINTEXT")})
        .list_topics(timeout=10)
        .brokers
    )


def test_acl_changes_need_cluster_alter_and_topic_creation_needs_create(secured) -> None:
    alice = AdminClient(_config(secured, "alice"))
    with pytest.raises(KafkaException) as info:
        _create(alice, _acl("orders", "User:alice", AclOperation.READ))
    assert info.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    (future,) = alice.create_topics([NewTopic("mine", 1, 1)]).values()
    with pytest.raises(KafkaException) as info:
        future.result(timeout=10)
    assert info.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    admin = AdminClient(_config(secured, "admin"))
    _create(admin, _acl("kafka-cluster", "User:alice", AclOperation.CREATE, ResourceType.BROKER))
    (future,) = alice.create_topics([NewTopic("mine", 1, 1)]).values()
    future.result(timeout=10)


def test_kafka_python_group_denial(secured) -> None:
    admin = AdminClient(_config(secured, "admin"))
    _create(admin, _acl("orders", "User:bob", AclOperation.READ))
    consumer = KafkaConsumer(
        "orders",
        bootstrap_servers=secured.bootstrap("SASL_PLAINTEXT"),
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="bob",
        sasl_plain_password=USERS["bob"],
        group_id="bobs",
        consumer_timeout_ms=3000,
    )
    with pytest.raises(GroupAuthorizationFailedError):
        list(consumer)
    consumer.close()


@contextlib.asynccontextmanager
async def _kplane_admin(bootstrap: str) -> AsyncIterator[kadmin.Admin]:
    client = KafkaClient(ClientConfig.from_properties({"bootstrap.servers": bootstrap}))
    await client.start()
    try:
        yield kadmin.Admin(client)
    finally:
        await client.close()


async def test_kplane_admin_is_refused_without_cluster_permissions(secured) -> None:
    # ANONYMOUS on the PLAINTEXT listener is no super user.
    async with _kplane_admin(secured.bootstrap("PLAINTEXT")) as admin:
        (result,) = await admin.create_acls([_kplane_binding()])
        assert result is not None and result.code == ErrorCode.cluster_authorization_failed
        with pytest.raises(PKafkaError) as info:
            await admin.describe_acls()
        assert info.value.code == ErrorCode.cluster_authorization_failed
        alice = kadmin.ScramUpsertion("alice", kadmin.ScramMechanism.SCRAM_SHA_256, "pw")
        result = (await admin.alter_user_scram_credentials([alice]))["alice"]
        assert result is not None and result.code == ErrorCode.cluster_authorization_failed


def _kplane_binding() -> kadmin.AclBinding:
    return kadmin.AclBinding(
        kadmin.AclResourceType.TOPIC,
        "t",
        kadmin.PatternType.LITERAL,
        "User:alice",
        "*",
        kadmin.AclOperation.READ,
        kadmin.AclPermissionType.ALLOW,
    )


async def test_kplane_admin_acls_and_scram_round_trip(broker) -> None:
    async with _kplane_admin(broker.bootstrap()) as admin:
        # Without an authorizer the ACL APIs answer SECURITY_DISABLED, as Kafka's do.
        (result,) = await admin.create_acls([_kplane_binding()])
        assert result is not None and result.code == ErrorCode.security_disabled
        (deleted,) = await admin.delete_acls([kadmin.AclBindingFilter()])
        assert deleted.error is not None and deleted.error.code == ErrorCode.security_disabled
        sha512 = kadmin.ScramMechanism.SCRAM_SHA_512
        upsert = kadmin.ScramUpsertion("dana", sha512, "pw", iterations=5000)
        assert await admin.alter_user_scram_credentials([upsert]) == {"dana": None}
        described = await admin.describe_user_scram_credentials()
        assert described["dana"].error is None
        assert described["dana"].credentials == (kadmin.ScramCredentialInfo(sha512, 5000),)
        gone = await admin.alter_user_scram_credentials([kadmin.ScramDeletion("dana", sha512)])
        assert gone == {"dana": None}
        missing = (await admin.describe_user_scram_credentials(["dana"]))["dana"]
        assert missing.error is not None and missing.error.code == ErrorCode.resource_not_found


def test_transactional_id_acls(secured: RunningBroker) -> None:
    """Write on the TransactionalId is needed to init, produce and commit; Describe to find
    the coordinator (KIP-98's TransactionalId resource)."""
    admin = AdminClient(_config(secured, "admin"))
    admin.create_topics([NewTopic("txn-acl", 1, 1)])["txn-acl"].result(timeout=15)
    _create(admin, _acl("txn-acl", "User:alice", AclOperation.WRITE))
    denied = Producer({**_config(secured, "alice"), "transactional.id": "alice-app"})
    with pytest.raises(KafkaException) as raised:
        denied.init_transactions(10)
    assert raised.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

    _create(
        admin,
        _acl("alice-app", "User:alice", AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID),
    )
    allowed = Producer({**_config(secured, "alice"), "transactional.id": "alice-app"})
    allowed.init_transactions(15)
    allowed.begin_transaction()
    allowed.produce("txn-acl", b"granted")
    allowed.commit_transaction(15)
