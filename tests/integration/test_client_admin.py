"""kplane's own Admin client: topics, partitions, cluster and offsets against an in-process
broker, configs included. The config, SCRAM and ACL requests are also checked against every
kio version through a stand-in client; tests/integration/test_authorization.py drives SCRAM
and ACLs for real."""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from confluent_kafka import Producer

from kplane.client.admin import (
    EARLIEST,
    LATEST,
    MAX_TIMESTAMP,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AclResourceType,
    Admin,
    AlterConfigOp,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
    NewTopic,
    OpType,
    PatternType,
    ScramDeletion,
    ScramMechanism,
    ScramUpsertion,
)
from kplane.client.kafka_client import BrokerNode, ClusterMetadata, KafkaClient
from kplane.common.network.config import ClientConfig
from kplane.protocol import api
from kplane.protocol.errors import ErrorCode, KafkaError
from kplane.testing.plugin import RunningBroker
from tests.integration.helpers import produce_all

DEADLINE_S = 30.0


@pytest.fixture
async def admin(broker: RunningBroker) -> AsyncIterator[Admin]:
    client = KafkaClient(
        ClientConfig.from_properties(
            {"bootstrap.servers": broker.bootstrap(), "request.timeout.ms": "10000"}
        )
    )
    await client.start()
    try:
        yield Admin(client)
    finally:
        await client.close()


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def code_of(error: KafkaError | None) -> ErrorCode | None:
    return None if error is None else error.code


# topics ------------------------------------------------------------------------------------
async def test_create_topics_goes_to_the_controller(
    broker: RunningBroker, admin: Admin, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[tuple[int | None, int]] = []
    request = admin.client.request

    async def recording(node: int | None, api_key: int, build: Any) -> Any:
        sent.append((node, api_key))
        return await request(node, api_key, build)

    monkeypatch.setattr(admin.client, "request", recording)
    results = await admin.create_topics(
        [
            NewTopic("three", num_partitions=3, replication_factor=1),
            NewTopic("defaults"),
            NewTopic("configured", 1, 1, configs={"retention.ms": "60000"}),
            NewTopic("assigned", assignments={0: [0], 1: [0]}),
        ]
    )
    assert results == {"three": None, "defaults": None, "configured": None, "assigned": None}
    assert sent == [(0, 19)]  # CreateTopics, to broker 0: the controller
    assert admin.client.cluster.controller_id == 0
    assert len(broker.wait_for_partitions("three", 3).partitions) == 3
    broker.wait_for_partitions("defaults", 1)  # num.partitions=1 in the test defaults
    broker.wait_for_partitions("configured", 1)
    assert [
        list(p.replica_nodes) for p in broker.wait_for_partitions("assigned", 2).partitions
    ] == [
        [0],
        [0],
    ]


async def test_create_topics_refusals_and_validate_only(
    broker: RunningBroker, admin: Admin
) -> None:
    broker.create_topic("taken")
    results = await admin.create_topics(
        [
            NewTopic("bad name!", 1, 1),
            NewTopic("three-replicas", 1, 3),
            NewTopic("taken", 1, 1),
            NewTopic("zero-partitions", 0, 1),
            NewTopic("fine", 2, 1),
        ]
    )
    assert {name: code_of(error) for name, error in results.items()} == {
        "bad name!": ErrorCode.invalid_topic_exception,
        "three-replicas": ErrorCode.invalid_replication_factor,
        "taken": ErrorCode.topic_already_exists,
        "zero-partitions": ErrorCode.invalid_partitions,
        "fine": None,
    }
    taken = results["taken"]
    assert taken is not None and "already exists" in str(taken)
    broker.wait_for_partitions("fine", 2)

    dry = await admin.create_topics(
        [NewTopic("dry-run", 4, 1), NewTopic("dry run", 1, 1)], validate_only=True
    )
    assert dry["dry-run"] is None
    assert code_of(dry["dry run"]) == ErrorCode.invalid_topic_exception
    assert broker.topic_metadata("dry-run").error_code == ErrorCode.unknown_topic_or_partition
    assert await admin.create_topics([NewTopic("dry-run", 4, 1)]) == {"dry-run": None}
    broker.wait_for_partitions("dry-run", 4)


async def test_delete_topics(broker: RunningBroker, admin: Admin) -> None:
    broker.create_topic("doomed", 2)
    results = await admin.delete_topics(["doomed", "never-existed"])
    assert results["doomed"] is None
    assert code_of(results["never-existed"]) == ErrorCode.unknown_topic_or_partition
    wait_until(
        lambda: broker.topic_metadata("doomed").error_code == ErrorCode.unknown_topic_or_partition,
        "doomed is still in metadata",
    )
    # The name is free again.
    assert await admin.create_topics([NewTopic("doomed", 1, 1)]) == {"doomed": None}
    broker.wait_for_partitions("doomed", 1)


async def test_create_partitions(broker: RunningBroker, admin: Admin) -> None:
    broker.create_topic("growing", 1)
    assert await admin.create_partitions({"growing": 3}) == {"growing": None}
    broker.wait_for_partitions("growing", 3)
    assert await admin.create_partitions({"growing": 5}, validate_only=True) == {"growing": None}
    results = await admin.create_partitions({"growing": 2, "no-such": 4})
    assert code_of(results["growing"]) == ErrorCode.invalid_partitions
    assert code_of(results["no-such"]) == ErrorCode.unknown_topic_or_partition
    assert await admin.create_partitions({"growing": 4}, assignments={"growing": [[0]]}) == {
        "growing": None
    }
    assert len(broker.wait_for_partitions("growing", 4).partitions) == 4


# cluster and offsets -----------------------------------------------------------------------
async def test_describe_cluster(broker: RunningBroker, admin: Admin) -> None:
    description = await admin.describe_cluster()
    host, port = broker.address()
    assert description.cluster_id == broker.cluster_id
    assert description.controller_id == 0
    assert description.brokers == (BrokerNode(0, host, port, None),)


async def test_list_offsets(broker: RunningBroker, admin: Admin) -> None:
    broker.create_topic("offsets", 2)
    base = 1_700_000_000_000
    stamps = [base + 10 * i for i in range(10)]
    stamps[6] = base + 1_000  # the largest timestamp, at offset 6
    producer = Producer({"bootstrap.servers": broker.bootstrap(), "linger.ms": 5})
    produce_all(
        producer,
        "offsets",
        ({"value": b"v%d" % i, "partition": 0, "timestamp": ts} for i, ts in enumerate(stamps)),
        2,
    )
    found = await admin.list_offsets(
        {
            ("offsets", 0): EARLIEST,
            ("offsets", 1): LATEST,
        }
    )
    assert found == {("offsets", 0): (0, -1), ("offsets", 1): (0, -1)}
    assert await admin.list_offsets({("offsets", 0): LATEST}) == {("offsets", 0): (10, -1)}
    assert await admin.list_offsets({("offsets", 0): MAX_TIMESTAMP}) == {
        ("offsets", 0): (6, base + 1_000)
    }
    by_time = await admin.list_offsets({("offsets", 0): base + 25})
    assert by_time == {("offsets", 0): (3, base + 30)}
    assert await admin.list_offsets({("offsets", 0): base + 5_000}) == {("offsets", 0): (-1, -1)}
    with pytest.raises(KafkaError) as info:
        await admin.list_offsets({("no-such-topic", 0): LATEST})
    assert info.value.code == ErrorCode.unknown_topic_or_partition


# configs against the broker -------------------------------------------------------------
TOPIC = ConfigResource(ConfigResourceType.TOPIC, "t")
BROKER0 = ConfigResource(ConfigResourceType.BROKER, "0")
BINDING = AclBinding(
    AclResourceType.TOPIC,
    "t",
    PatternType.LITERAL,
    "User:alice",
    "*",
    AclOperation.READ,
    AclPermissionType.ALLOW,
)

async def test_config_calls_against_the_broker(broker: RunningBroker, admin: Admin) -> None:
    broker.create_topic("t", 1)
    assert await admin.alter_configs({TOPIC: {"retention.ms": "1000"}}) == {TOPIC: None}
    change = {BROKER0: [AlterConfigOp("log.retention.ms", "60000")]}
    assert await admin.incremental_alter_configs(change) == {BROKER0: None}
    described = await admin.describe_configs([TOPIC, BROKER0], include_synonyms=True)
    topic = described[TOPIC].entries["retention.ms"]
    assert (topic.value, topic.source) == ("1000", 1)  # TOPIC_CONFIG
    retention = described[BROKER0].entries["log.retention.ms"]
    assert (retention.value, retention.source) == ("60000", 2)  # DYNAMIC_BROKER_CONFIG
    assert [(s.name, s.source) for s in retention.synonyms][:2] == [
        ("log.retention.ms", 2),
        ("log.retention.hours", 5),
    ]


# the requests of those calls, through a stand-in client -----------------------------------
class StandInClient:
    """Builds each request at every version kio knows, checks that it survives the wire
    codec, and answers with a canned response (at the newest version)."""

    def __init__(self, responses: dict[int, Callable[[Any], Any]]) -> None:
        self.config = ClientConfig(bootstrap_servers=[("127.0.0.1", 9)])
        self.cluster = ClusterMetadata(
            controller_id=1,
            brokers={n: BrokerNode(n, "127.0.0.1", 9000 + n) for n in (0, 1, 2)},
        )
        self.responses = responses
        self.sent: list[tuple[int | None, int, Any]] = []

    async def request(self, node: int | None, api_key: int, build: Callable[[int], Any]) -> Any:
        request = None
        for version in api.kio_versions(api_key):
            request = build(version)
            assert int(request.__version__) == version
            decoded = api.decode_request(api_key, version, api.encode(request))
            assert decoded == request, f"api {api_key} v{version} does not round-trip"
        self.sent.append((node, api_key, request))
        return self.responses[api_key](request)

    async def refresh_metadata(self, *args: Any, **kwargs: Any) -> ClusterMetadata:
        return self.cluster


def response(api_key: int, **values: Any) -> Any:
    return api.make(api.response_class(api_key, api.kio_versions(api_key)[-1]), **values)


def nested(api_key: int, entity: str, /, **values: Any) -> Any:
    module = api.response_module(api_key, api.kio_versions(api_key)[-1])
    return api.make(getattr(module, entity), **values)


async def test_config_requests_and_routing() -> None:
    def describe(request: Any) -> Any:
        return response(
            32,
            results=tuple(
                nested(
                    32,
                    "DescribeConfigsResult",
                    error_code=ErrorCode.none,
                    error_message=None,
                    resource_type=r.resource_type,
                    resource_name=r.resource_name,
                    configs=(
                        nested(
                            32,
                            "DescribeConfigsResourceResult",
                            name="retention.ms",
                            value="1000",
                            read_only=False,
                            config_source=int(ConfigSource.DYNAMIC_TOPIC_CONFIG),
                            is_sensitive=False,
                            synonyms=(
                                nested(
                                    32,
                                    "DescribeConfigsSynonym",
                                    name="log.retention.ms",
                                    value="5",
                                    source=4,
                                ),
                            ),
                        ),
                    ),
                )
                for r in request.resources
            ),
        )

    def altered(api_key: int) -> Callable[[Any], Any]:
        def answer(request: Any) -> Any:
            return response(
                api_key,
                responses=tuple(
                    nested(
                        api_key,
                        "AlterConfigsResourceResponse",
                        error_code=ErrorCode.invalid_config if i else ErrorCode.none,
                        error_message="no" if i else None,
                        resource_type=r.resource_type,
                        resource_name=r.resource_name,
                    )
                    for i, r in enumerate(request.resources)
                ),
            )

        return answer

    client = StandInClient({32: describe, 33: altered(33), 44: altered(44)})
    admin = Admin(client)  # type: ignore[arg-type]
    default = ConfigResource(ConfigResourceType.BROKER, "")
    described = await admin.describe_configs([TOPIC, BROKER0, default], include_synonyms=True)
    assert set(described) == {TOPIC, BROKER0, default}
    entry = described[TOPIC].entries["retention.ms"]
    assert described[TOPIC].error is None
    assert (entry.value, entry.source, entry.synonyms[0].name) == (
        "1000",
        ConfigSource.DYNAMIC_TOPIC_CONFIG,
        "log.retention.ms",
    )
    # Broker 0's resource went to broker 0; the topic and the cluster default to any broker.
    routes = {node: [r.resource_name for r in req.resources] for node, _, req in client.sent}
    assert routes == {None: ["t", ""], 0: ["0"]}
    assert all(req.include_synonyms for _, _, req in client.sent)

    client.sent.clear()
    results = await admin.alter_configs({TOPIC: {"retention.ms": "1", "cleanup.policy": None}})
    assert results == {TOPIC: None}
    (_, _, req) = client.sent[0]
    assert [(c.name, c.value) for c in req.resources[0].configs] == [
        ("retention.ms", "1"),
        ("cleanup.policy", None),
    ]

    client.sent.clear()
    results = await admin.incremental_alter_configs(
        {
            TOPIC: [
                AlterConfigOp("retention.ms", "1"),
                AlterConfigOp("cleanup.policy", "x", OpType.DELETE),
                AlterConfigOp("follower.replication.throttled.replicas", "0:0", OpType.APPEND),
                AlterConfigOp("leader.replication.throttled.replicas", "1:0", OpType.SUBTRACT),
            ],
            ConfigResource(ConfigResourceType.TOPIC, "u"): [AlterConfigOp("x", "1")],
        },
        validate_only=True,
    )
    assert results[TOPIC] is None
    u = results[ConfigResource(ConfigResourceType.TOPIC, "u")]
    assert u is not None and u.code == ErrorCode.invalid_config
    (_, _, req) = client.sent[0]
    assert req.validate_only
    assert [(c.name, int(c.config_operation), c.value) for c in req.resources[0].configs] == [
        ("retention.ms", 0, "1"),
        ("cleanup.policy", 1, None),
        ("follower.replication.throttled.replicas", 2, "0:0"),
        ("leader.replication.throttled.replicas", 3, "1:0"),
    ]


async def test_scram_requests() -> None:
    def describe(request: Any) -> Any:
        return response(
            50,
            error_code=ErrorCode.none,
            error_message=None,
            results=(
                nested(
                    50,
                    "DescribeUserScramCredentialsResult",
                    user="alice",
                    error_code=ErrorCode.none,
                    error_message=None,
                    credential_infos=(nested(50, "CredentialInfo", mechanism=2, iterations=8192),),
                ),
                nested(
                    50,
                    "DescribeUserScramCredentialsResult",
                    user="bob",
                    error_code=ErrorCode.resource_not_found,
                    error_message="no credentials",
                    credential_infos=(),
                ),
            ),
        )

    def alter(request: Any) -> Any:
        users = [u.name for u in request.upsertions] + [d.name for d in request.deletions]
        return response(
            51,
            results=tuple(
                nested(
                    51,
                    "AlterUserScramCredentialsResult",
                    user=u,
                    error_code=ErrorCode.none,
                    error_message=None,
                )
                for u in users
            ),
        )

    client = StandInClient({50: describe, 51: alter})
    admin = Admin(client)  # type: ignore[arg-type]
    described = await admin.describe_user_scram_credentials(["alice", "bob"])
    assert described["alice"].error is None
    assert [(c.mechanism, c.iterations) for c in described["alice"].credentials] == [
        (ScramMechanism.SCRAM_SHA_512, 8192)
    ]
    bob = described["bob"].error
    assert bob is not None and bob.code == ErrorCode.resource_not_found
    assert [u.name for u in client.sent[0][2].users] == ["alice", "bob"]
    await admin.describe_user_scram_credentials()
    assert client.sent[1][2].users is None

    results = await admin.alter_user_scram_credentials(
        [
            ScramUpsertion("alice", ScramMechanism.SCRAM_SHA_256, "pencil", 4096, salt=b"salt"),
            ScramDeletion("bob", ScramMechanism.SCRAM_SHA_512),
        ]
    )
    assert results == {"alice": None, "bob": None}
    req = client.sent[2][2]
    (upsert,) = req.upsertions
    # SCRAM's Hi() is PBKDF2-HMAC; only the salted password travels.
    assert upsert.salted_password == hashlib.pbkdf2_hmac("sha256", b"pencil", b"salt", 4096)
    assert (upsert.salt, int(upsert.iterations), int(upsert.mechanism)) == (b"salt", 4096, 1)
    assert [(d.name, int(d.mechanism)) for d in req.deletions] == [("bob", 2)]


async def test_acl_requests() -> None:
    def create(request: Any) -> Any:
        return response(
            30,
            results=tuple(
                nested(
                    30,
                    "AclCreationResult",
                    error_code=ErrorCode.none if i == 0 else ErrorCode.invalid_request,
                    error_message=None if i == 0 else "bad",
                )
                for i, _ in enumerate(request.creations)
            ),
        )

    def describe(request: Any) -> Any:
        return response(
            29,
            error_code=ErrorCode.none,
            error_message=None,
            resources=(
                nested(
                    29,
                    "DescribeAclsResource",
                    resource_type=2,
                    resource_name="t",
                    pattern_type=3,
                    acls=(
                        nested(
                            29,
                            "AclDescription",
                            principal="User:alice",
                            host="*",
                            operation=3,
                            permission_type=3,
                        ),
                    ),
                ),
            ),
        )

    def delete(request: Any) -> Any:
        return response(
            31,
            filter_results=(
                nested(
                    31,
                    "DeleteAclsFilterResult",
                    error_code=ErrorCode.none,
                    error_message=None,
                    matching_acls=(
                        nested(
                            31,
                            "DeleteAclsMatchingAcl",
                            error_code=ErrorCode.none,
                            error_message=None,
                            resource_type=2,
                            resource_name="t",
                            pattern_type=3,
                            principal="User:alice",
                            host="*",
                            operation=3,
                            permission_type=3,
                        ),
                    ),
                ),
            ),
        )

    client = StandInClient({29: describe, 30: create, 31: delete})
    admin = Admin(client)  # type: ignore[arg-type]
    prefixed = AclBinding(
        AclResourceType.GROUP,
        "app-",
        PatternType.PREFIXED,
        "User:bob",
        "10.0.0.1",
        AclOperation.DESCRIBE,
        AclPermissionType.DENY,
    )
    results = await admin.create_acls([BINDING, prefixed])
    assert results[0] is None
    assert results[1] is not None and results[1].code == ErrorCode.invalid_request
    creation = client.sent[0][2].creations[1]
    assert (
        int(creation.resource_type),
        creation.resource_name,
        int(creation.resource_pattern_type),
        creation.principal,
        creation.host,
        int(creation.operation),
        int(creation.permission_type),
    ) == (3, "app-", 4, "User:bob", "10.0.0.1", 8, 2)

    assert await admin.describe_acls(AclBindingFilter(principal="User:alice")) == [BINDING]
    described = client.sent[1][2]
    assert (int(described.resource_type_filter), described.principal_filter) == (1, "User:alice")
    assert described.resource_name_filter is None

    (deleted,) = await admin.delete_acls([AclBindingFilter(AclResourceType.TOPIC, "t")])
    assert deleted.error is None
    assert deleted.matches == ((BINDING, None),)
