"""DescribeTopicPartitions (API 75, KIP-966) as kafka-python's admin pages through it, and
the topics' authorized operations (KIP-430) that it and Metadata answer, seen by kafka-python
and confluent-kafka under ACLs."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import TopicCollection
from confluent_kafka.admin import AclBinding as CkAclBinding
from confluent_kafka.admin import (
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka.admin import KafkaAdminClient

from kplane.protocol.errors import ErrorCode
from kplane.testing.plugin import RunningBroker
from tests.integration.helpers import with_inter_broker_sasl

TOPICS = {"a": 3, "b": 5, "c": 1}
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_admin="admin-secret" user_alice="alice-secret";'
)
READ_AND_DESCRIBE = (1 << 3) | (1 << 8)


def _pages(admin: KafkaAdminClient, topics: list[str], limit: int) -> list[dict[str, Any]]:
    """Every response of a walk from no cursor to none."""
    pages = [admin.describe_topic_partitions(topics, response_partition_limit=limit)]
    while pages[-1]["next_cursor"] is not None:
        assert len(pages) < 20, "the cursor does not advance"
        cursor = pages[-1]["next_cursor"]
        pages.append(
            admin.describe_topic_partitions(topics, response_partition_limit=limit, cursor=cursor)
        )
    return pages


def _walked(pages: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [
        (t["name"], p["partition_index"])
        for page in pages
        for t in page["topics"]
        for p in t["partitions"]
    ]


def _everything() -> list[tuple[str, int]]:
    return [(name, p) for name, count in sorted(TOPICS.items()) for p in range(count)]


@pytest.mark.parametrize(("broker_limit", "client_limit"), [(2000, 4), (2, 2000)])
def test_kafka_python_pages_every_partition_once(
    broker_factory: Any, broker_limit: int, client_limit: int
) -> None:
    broker: RunningBroker = broker_factory(max_request_partition_size_limit=str(broker_limit))
    for name, count in TOPICS.items():
        broker.create_topic(name, count)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap())
    try:
        asked = ["c", "missing", "a", "bad name!", "b", "a"]
        pages = _pages(admin, asked, client_limit)
        every = _pages(admin, [], client_limit)
    finally:
        admin.close()
    page_size = min(broker_limit, client_limit)
    assert _walked(pages) == _everything()
    assert all(sum(len(t["partitions"]) for t in page["topics"]) <= page_size for page in pages)
    assert len(pages) > 1
    errors = {t["name"]: t["error_code"] for page in pages for t in page["topics"]}
    # Kafka gives every topic not refused DESCRIBE its operations, unknown ones too.
    assert {t["topic_authorized_operations"] for page in pages for t in page["topics"]} == {
        sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
    }
    assert errors == {
        "a": 0,
        "b": 0,
        "c": 0,
        "missing": ErrorCode.unknown_topic_or_partition,
        "bad name!": ErrorCode.invalid_topic_exception,
    }
    first = pages[0]["topics"][0]
    assert first["topic_id"] == broker.topics()["a"]
    assert first["partitions"][0]["leader_id"] == broker.broker_id
    assert first["partitions"][0]["replica_nodes"] == [broker.broker_id]
    assert first["partitions"][0]["eligible_leader_replicas"] is None
    # No topics named: every topic, and no errors for topics that do not exist.
    assert _walked(every) == _everything()


def test_a_cursor_outside_the_request_is_invalid(broker: RunningBroker) -> None:
    broker.create_topic("a", 2)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap())
    try:
        outside = admin.describe_topic_partitions(
            ["a"], cursor={"topic_name": "b", "partition_index": 0}
        )
        negative = admin.describe_topic_partitions(
            ["a"], cursor={"topic_name": "a", "partition_index": -1}
        )
        past_the_end = admin.describe_topic_partitions(
            ["a"], cursor={"topic_name": "a", "partition_index": 7}
        )
    finally:
        admin.close()
    for answer in (outside, negative):
        assert [(t["name"], t["error_code"]) for t in answer["topics"]] == [
            ("a", ErrorCode.invalid_request)
        ]
        assert answer["next_cursor"] is None
    assert [(t["name"], t["error_code"], t["partitions"]) for t in past_the_end["topics"]] == [
        ("a", 0, [])
    ]


@pytest.fixture
def secured(broker_factory: Any) -> RunningBroker:
    broker: RunningBroker = broker_factory(
        with_inter_broker_sasl(
            {
                "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                "sasl.enabled.mechanisms": "PLAIN",
                "sasl.jaas.config": JAAS,
                "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                "super.users": "User:admin",
            }
        )
    )
    admin = AdminClient(_confluent(broker, "admin"))
    for future in admin.create_topics(
        [NewTopic("orders", 2, 1), NewTopic("secret", 1, 1)]
    ).values():
        future.result(timeout=15)
    bindings = [
        CkAclBinding(
            ResourceType.TOPIC,
            "orders",
            ResourcePatternType.LITERAL,
            "User:alice",
            "*",
            operation,
            AclPermissionType.ALLOW,
        )
        for operation in (AclOperation.READ, AclOperation.DESCRIBE)
    ]
    for future in admin.create_acls(bindings).values():
        future.result(timeout=15)
    return broker


def _confluent(broker: RunningBroker, user: str) -> dict[str, str]:
    return {
        "bootstrap.servers": broker.bootstrap("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": f"{user}-secret",
    }


def _kafka_python(broker: RunningBroker, user: str) -> KafkaAdminClient:
    return KafkaAdminClient(
        bootstrap_servers=broker.bootstrap("SASL_PLAINTEXT"),
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username=user,
        sasl_plain_password=f"{user}-secret",
    )


def test_authorized_operations_and_refused_topics(secured: RunningBroker) -> None:
    alice = _kafka_python(secured, "alice")
    try:
        named = alice.describe_topic_partitions(["secret", "orders"])
        listed = alice.describe_topic_partitions([])
    finally:
        alice.close()
    # The refused topic comes last, without its id; the allowed one with alice's operations.
    assert [(t["name"], t["error_code"]) for t in named["topics"]] == [
        ("orders", 0),
        ("secret", ErrorCode.topic_authorization_failed),
    ]
    orders, secret = named["topics"]
    assert orders["topic_authorized_operations"] == READ_AND_DESCRIBE
    assert len(orders["partitions"]) == 2
    assert secret["partitions"] == []
    assert secret["topic_id"] is None  # the zero UUID, as kafka-python reads it
    # Listing every topic leaves the refused one out.
    assert [t["name"] for t in listed["topics"]] == ["orders"]

    # Metadata answers the same operations when asked (confluent-kafka's describe_topics).
    for user, expected in (
        ("alice", {AclOperation.READ, AclOperation.DESCRIBE}),
        (
            "admin",
            {
                AclOperation.READ,
                AclOperation.WRITE,
                AclOperation.CREATE,
                AclOperation.DELETE,
                AclOperation.ALTER,
                AclOperation.DESCRIBE,
                AclOperation.DESCRIBE_CONFIGS,
                AclOperation.ALTER_CONFIGS,
            },
        ),
    ):
        admin = AdminClient(_confluent(secured, user))
        (future,) = admin.describe_topics(
            TopicCollection(["orders"]), include_authorized_operations=True
        ).values()
        assert set(future.result(timeout=15).authorized_operations) == expected
        cluster = admin.describe_cluster(include_authorized_operations=True).result(timeout=15)
        assert (AclOperation.ALTER in (cluster.authorized_operations or [])) == (user == "admin")
