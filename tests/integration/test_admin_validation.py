"""Admin requests with odd or excessive values get Kafka's error codes, never a traceback,
and the broker keeps answering (issue 12).

Kafka's answers come from ReplicationControlManager (the 10,000-partition bound, the
replication factor and partition count checks), ControllerApis.deleteTopics, LogConfig
(unknown topic configs), ConfigAdminManager.prepareIncrementalConfigs (APPEND/SUBTRACT from
the default) and ZkAdminManager.alterUserScramCredentials (no bound on the salt).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator, MutableMapping
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka.admin import KafkaAdminClient
from kafka.admin import NewTopic as KpNewTopic
from kafka.errors import InvalidConfigurationError
from structlog.testing import capture_logs

from kplane.protocol import api
from kplane.protocol.errors import ErrorCode
from kplane.testing.plugin import RunningBroker
from tests.integration.helpers import numbered_round_trip

TIMEOUT = datetime.timedelta(seconds=10)
EXCESSIVE = "Excessively large number of partitions per request."


@pytest.fixture
def quiet_logs() -> Iterator[list[MutableMapping[str, Any]]]:
    """Everything logged during the test; none of it may be an error, a traceback or a
    handler that raised ("request failed")."""
    with capture_logs() as logs:
        yield logs
    loud = [
        e
        for e in logs
        if e.get("log_level") in ("error", "critical")
        or "exc_info" in e
        or e.get("event") == "request failed"
    ]
    assert loud == []


def _request(key: int, version: int, **values: Any) -> Any:
    return api.make(api.request_class(key, version), **values)


def _nested(key: int, version: int, entity: str, **values: Any) -> Any:
    return api.make(getattr(api.request_module(key, version), entity), **values)


def _still_serves(broker: RunningBroker) -> None:
    with broker.wire() as client:
        response = client.request(_request(18, 3, client_software_name="t"))
    assert response.error_code == ErrorCode.none


def _create_topics(broker: RunningBroker, *topics: Any, validate_only: bool = False) -> Any:
    with broker.wire() as client:
        return client.request(
            _request(19, 7, topics=topics, timeout=TIMEOUT, validate_only=validate_only)
        ).topics


def _topic(name: str, partitions: int = 1, factor: int = 1, **values: Any) -> Any:
    return _nested(
        19,
        7,
        "CreatableTopic",
        name=name,
        num_partitions=partitions,
        replication_factor=factor,
        **values,
    )


def _assignment(index: int, *brokers: int) -> Any:
    return _nested(19, 7, "CreatableReplicaAssignment", partition_index=index, broker_ids=brokers)


def _create_partitions(broker: RunningBroker, *counts: tuple[str, int]) -> Any:
    topics = tuple(
        _nested(37, 3, "CreatePartitionsTopic", name=n, count=c, assignments=None)
        for n, c in counts
    )
    with broker.wire() as client:
        return client.request(
            _request(37, 3, topics=topics, timeout=TIMEOUT, validate_only=True)
        ).results


def _errors(results: Any) -> list[tuple[ErrorCode, str | None]]:
    return [(r.error_code, r.error_message) for r in results]


# The partition bound ---------------------------------------------------------------------------
def test_create_topics_over_ten_thousand_partitions_is_a_policy_violation(
    broker: RunningBroker, quiet_logs
) -> None:
    refused = (ErrorCode.policy_violation, EXCESSIVE)
    over = _create_topics(broker, _topic("big", 10_001), _topic("small"), validate_only=True)
    assert _errors(over) == [refused, refused]
    # 2^31-1 partitions, validate-only or not: refused before any assignment is computed.
    for validate_only in (True, False):
        huge = _create_topics(broker, _topic("huge", 2**31 - 1), validate_only=validate_only)
        assert _errors(huge) == [refused]
    # Summed over the request: partitions and explicit assignments alike.
    assigned = _topic("assigned", -1, -1, assignments=(_assignment(0, 0), _assignment(1, 0)))
    summed = _create_topics(broker, _topic("most", 9_999), assigned, validate_only=True)
    assert _errors(summed) == [refused, refused]
    at_bound = _create_topics(broker, _topic("most", 9_998), assigned, validate_only=True)
    assert _errors(at_bound) == [(ErrorCode.none, None)] * 2
    # confluent-kafka sees POLICY_VIOLATION too; nothing was created and the broker serves.
    admin = AdminClient({"bootstrap.servers": broker.bootstrap()})
    futures = admin.create_topics([NewTopic("a", 5_000, 1), NewTopic("b", 5_001, 1)])
    for future in futures.values():
        with pytest.raises(KafkaException) as caught:
            future.result(timeout=30)
        assert caught.value.args[0].code() == KafkaError.POLICY_VIOLATION
    assert not {"big", "small", "huge", "most", "assigned", "a", "b"} & set(
        admin.list_topics(timeout=10).topics
    )
    broker.create_topic("after", 3)


def test_create_partitions_adding_over_ten_thousand_is_a_policy_violation(
    broker: RunningBroker, quiet_logs
) -> None:
    broker.create_topic("grow", 2)
    refused = (ErrorCode.policy_violation, EXCESSIVE)
    assert _errors(_create_partitions(broker, ("grow", 10_003))) == [refused]
    assert _errors(_create_partitions(broker, ("grow", 2**31 - 1))) == [refused]
    assert _errors(_create_partitions(broker, ("grow", 10_002))) == [(ErrorCode.none, None)]
    # The request's topics share the bound.
    broker.create_topic("other", 1)
    both = _create_partitions(broker, ("grow", 5_002), ("other", 5_002))
    assert _errors(both) == [refused, refused]
    _still_serves(broker)


# Invalid values ------------------------------------------------------------------------------
def test_create_topics_invalid_counts_and_assignments(broker: RunningBroker, quiet_logs) -> None:
    results = _create_topics(
        broker,
        _topic("negative-factor", 1, -2),
        _topic("zero-factor", 1, 0),
        _topic("negative-partitions", -5, 1),
        _topic("too-many-replicas", 1, 3),
        _topic("empty-replicas", -1, -1, assignments=(_assignment(0),)),
        _topic("twice", -1, -1, assignments=(_assignment(0, 0), _assignment(0, 0))),
    )
    assert [(r.name, r.error_code) for r in results] == [
        ("negative-factor", ErrorCode.invalid_replication_factor),
        ("zero-factor", ErrorCode.invalid_replication_factor),
        ("negative-partitions", ErrorCode.invalid_partitions),
        ("too-many-replicas", ErrorCode.invalid_replication_factor),
        ("empty-replicas", ErrorCode.invalid_replica_assignment),
        ("twice", ErrorCode.invalid_replica_assignment),
    ]
    assert results[0].error_message == (
        "Replication factor must be larger than 0, or -1 to use the default value."
    )
    assert results[2].error_message == (
        "Number of partitions was set to an invalid non-positive value."
    )
    assert results[4].error_message == (
        "The manual partition assignment includes an empty replica list."
    )
    with broker.wire() as client:
        listed = client.request(_request(3, 12, topics=None, allow_auto_topic_creation=False))
    assert listed.topics == ()


def test_topic_names_that_cannot_exist(broker: RunningBroker, quiet_logs) -> None:
    results = _create_partitions(broker, ("", 3), ("bad name", 3), ("../x", 3))
    assert [r.error_code for r in results] == [ErrorCode.unknown_topic_or_partition] * 3
    created = _create_topics(broker, _topic(""), _topic("a/b"))
    assert [r.error_code for r in created] == [ErrorCode.invalid_topic_exception] * 2
    broker.create_topic("named", 1)
    topic_id = broker.topic_metadata("named").topic_id
    states = (
        _nested(20, 6, "DeleteTopicState", name=None, topic_id=None),
        _nested(20, 6, "DeleteTopicState", name="named", topic_id=topic_id),
        _nested(20, 6, "DeleteTopicState", name="", topic_id=None),
        _nested(20, 6, "DeleteTopicState", name="x", topic_id=None),
        _nested(20, 6, "DeleteTopicState", name="x", topic_id=None),
    )
    with broker.wire() as client:
        deleted = client.request(_request(20, 6, topics=states, timeout=TIMEOUT)).responses
    assert _errors(deleted) == [
        (ErrorCode.invalid_request, "Neither topic name nor id were specified."),
        (ErrorCode.invalid_request, "You may not specify both topic name and topic id."),
        (ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition."),
        (ErrorCode.invalid_request, "Duplicate topic name."),
        (ErrorCode.invalid_request, "Duplicate topic name."),
    ]
    assert broker.topic_metadata("named").error_code == ErrorCode.none


# Topic configs ------------------------------------------------------------------------------
def test_create_topics_refuses_unknown_and_invalid_configs(
    broker: RunningBroker, quiet_logs
) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap()})
    futures = admin.create_topics(
        [
            NewTopic("unknown-config", 1, 1, config={"dummy.doesntexist": "1"}),
            NewTopic("bad-value", 1, 1, config={"retention.ms": "soon"}),
            NewTopic("fine", 1, 1, config={"retention.ms": "1000"}),
        ]
    )
    for name in ("unknown-config", "bad-value"):
        with pytest.raises(KafkaException) as caught:
            futures[name].result(timeout=30)
        assert caught.value.args[0].code() == KafkaError.INVALID_CONFIG, name
    with pytest.raises(KafkaException, match=r"Unknown topic config name: dummy\.doesntexist"):
        futures["unknown-config"].result(timeout=1)
    assert futures["fine"].result(timeout=30) is None
    # A null value, which only the wire can send, is refused as in Kafka.
    null = _nested(19, 7, "CreatableTopicConfig", name="retention.ms", value=None)
    (result,) = _create_topics(broker, _topic("null-config", configs=(null,)))
    assert result.error_code == ErrorCode.invalid_config
    # kafka-python raises the same error.
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap())
    try:
        with pytest.raises(InvalidConfigurationError):
            kp.create_topics(
                [KpNewTopic("kp-unknown", 1, 1, topic_configs={"dummy.doesntexist": "1"})]
            )
    finally:
        kp.close()
    topics = set(admin.list_topics(timeout=10).topics)
    assert "fine" in topics
    assert not {"unknown-config", "bad-value", "null-config", "kp-unknown"} & topics


def test_incremental_append_and_subtract_start_from_the_default(
    broker: RunningBroker, quiet_logs
) -> None:
    broker.create_topic("policies", 1)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap()})
    resource = ConfigResource(ResourceType.TOPIC, "policies")

    def alter(*ops: ConfigEntry) -> None:
        target = ConfigResource(ResourceType.TOPIC, "policies", incremental_configs=list(ops))
        admin.incremental_alter_configs([target])[target].result(timeout=30)

    def policy() -> str:
        described = admin.describe_configs([resource])[resource].result(timeout=30)
        return str(described["cleanup.policy"].value)

    append = AlterConfigOpType.APPEND
    alter(ConfigEntry("cleanup.policy", "compact", incremental_operation=append))
    assert policy() == "delete,compact"
    subtract = AlterConfigOpType.SUBTRACT
    alter(ConfigEntry("cleanup.policy", "delete", incremental_operation=subtract))
    assert policy() == "compact"


def test_config_changes_with_odd_values(broker: RunningBroker, quiet_logs) -> None:
    broker.create_topic("configured", 1)

    def incremental(*resources: tuple[int, str, tuple[tuple[str, int, str | None], ...]]) -> Any:
        entities = tuple(
            _nested(
                44,
                1,
                "AlterConfigsResource",
                resource_type=rtype,
                resource_name=name,
                configs=tuple(
                    _nested(44, 1, "AlterableConfig", name=k, config_operation=op, value=v)
                    for k, op, v in configs
                ),
            )
            for rtype, name, configs in resources
        )
        with broker.wire() as client:
            request = _request(44, 1, resources=entities, validate_only=False)
            return client.request(request).responses

    results = [
        response
        for resource in (
            (2, "configured", (("retention.ms", 9, "1"),)),  # no such operation
            (2, "configured", (("dummy.doesntexist", 2, "x"),)),  # APPEND to an unknown config
            (2, "configured", (("dummy.doesntexist", 0, "x"),)),  # SET of an unknown config
            (2, "configured", (("retention.ms", 2, "1"),)),  # APPEND to a non-list config
            (4, "\u0663", ()),  # a digit, but not a broker id
            (99, "x", ()),
        )
        for response in incremental(resource)
    ]
    assert _errors(results) == [
        (ErrorCode.invalid_request, "Unknown operations type 9"),
        (ErrorCode.invalid_config, "Unknown topic config name: dummy.doesntexist"),
        (ErrorCode.invalid_config, "Unknown topic config name: dummy.doesntexist"),
        (
            ErrorCode.invalid_config,
            "Config value append is not allowed for config key: retention.ms",
        ),
        (ErrorCode.invalid_request, "Invalid broker id \u0663"),
        (ErrorCode.invalid_request, "Unsupported resource type 99"),
    ]
    twice = incremental((2, "configured", ()), (2, "configured", ()))
    assert (
        _errors(twice)
        == [(ErrorCode.invalid_request, "Each resource must appear at most once.")] * 2
    )
    # The legacy AlterConfigs checks topic config names the same way.
    legacy = _nested(
        33,
        2,
        "AlterConfigsResource",
        resource_type=2,
        resource_name="configured",
        configs=(_nested(33, 2, "AlterableConfig", name="dummy.doesntexist", value="1"),),
    )
    with broker.wire() as client:
        altered = client.request(_request(33, 2, resources=(legacy,), validate_only=False))
    assert _errors(altered.responses) == [
        (ErrorCode.invalid_config, "Unknown topic config name: dummy.doesntexist")
    ]
    _still_serves(broker)


# ACLs ------------------------------------------------------------------------------------
@pytest.fixture
def acl_broker(broker_factory) -> RunningBroker:
    return broker_factory(
        {
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "allow.everyone.if.no.acl.found": "true",
        }
    )


def test_acls_with_odd_values(acl_broker: RunningBroker, quiet_logs) -> None:
    def creation(name: str, resource_type: int = 2, **values: Any) -> Any:
        fields = dict(
            resource_type=resource_type,
            resource_name=name,
            resource_pattern_type=3,
            principal="User:x",
            host="*",
            operation=3,
            permission_type=3,
        )
        return _nested(30, 3, "AclCreation", **(fields | values))

    creations = (
        creation("a/b"),
        creation(".."),
        creation("t", resource_type=99),
        creation("t", resource_pattern_type=-3),
        creation("t", operation=77),
        creation("t", permission_type=-1),
        creation("t", principal=""),
        creation(""),
        creation("fine"),
    )
    with acl_broker.wire() as client:
        created = client.request(_request(30, 3, creations=creations)).results
        codes = [r.error_code for r in created]
        assert codes == [ErrorCode.invalid_request] * 8 + [ErrorCode.none]
        odd_filter = dict(
            resource_type_filter=99,
            resource_name_filter=None,
            pattern_type_filter=50,
            principal_filter=None,
            host_filter=None,
            operation=-9,
            permission_type=9,
        )
        described = client.request(_request(29, 3, **odd_filter))
        assert described.error_code == ErrorCode.invalid_request
        deleted = client.request(
            _request(31, 3, filters=(_nested(31, 3, "DeleteAclsFilter", **odd_filter),))
        )
        assert [r.error_code for r in deleted.filter_results] == [ErrorCode.invalid_request]
    # Only the valid ACL was stored, and clients still list it.
    admin = AdminClient({"bootstrap.servers": acl_broker.bootstrap()})
    bindings = admin.describe_acls(
        AclBindingFilter(
            ResourceType.ANY,
            None,
            ResourcePatternType.ANY,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        ),
        request_timeout=10,
    ).result(timeout=30)
    assert [b.name for b in bindings] == ["fine"]


# SCRAM ---------------------------------------------------------------------------------------
@pytest.fixture
def scram_broker(broker_factory) -> RunningBroker:
    return broker_factory(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        }
    )


def _upsertion(name: str, mechanism: int, iterations: int, salt: bytes) -> Any:
    return _nested(
        51,
        0,
        "ScramCredentialUpsertion",
        name=name,
        mechanism=mechanism,
        iterations=iterations,
        salt=salt,
        salted_password=b"p" * 32,
    )


def test_scram_credentials_as_kafka_accepts_them(scram_broker: RunningBroker, quiet_logs) -> None:
    admin = AdminClient({"bootstrap.servers": scram_broker.bootstrap("PLAINTEXT")})
    # A short salt, as client libraries' own tests send (Kafka has no bound on it).
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    upsertion = UserScramCredentialUpsertion("salty", info, b"salty-secret", b"salt")
    admin.alter_user_scram_credentials([upsertion])["salty"].result(timeout=30)
    config = {
        "bootstrap.servers": scram_broker.bootstrap("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "salty",
        "sasl.password": "salty-secret",
    }
    assert numbered_round_trip(config, "salted", 5) == [b"rt-%d" % i for i in range(5)]

    upsertions = (
        _upsertion("no-salt", 1, 4096, b""),
        _upsertion("a/b", 1, 4096, b"s"),
        _upsertion("..", 2, 8192, b"s"),
        _upsertion("few", 1, 4095, b"s"),
        _upsertion("many", 1, 16385, b"s"),
        _upsertion("mechanism", 9, 4096, b"s"),
        _upsertion("", 1, 4096, b"s"),
        _upsertion("twice", 1, 4096, b"s"),
        _upsertion("twice", 1, 4096, b"s"),
    )
    with scram_broker.wire("PLAINTEXT") as client:
        results = client.request(_request(51, 0, deletions=(), upsertions=upsertions)).results
    assert {r.user: r.error_code for r in results} == {
        "no-salt": ErrorCode.none,
        "a/b": ErrorCode.none,
        "..": ErrorCode.none,
        "few": ErrorCode.unacceptable_credential,
        "many": ErrorCode.unacceptable_credential,
        "mechanism": ErrorCode.unsupported_sasl_mechanism,
        "": ErrorCode.unacceptable_credential,
        "twice": ErrorCode.duplicate_resource,
    }
    described = admin.describe_user_scram_credentials().result(timeout=30)
    assert set(described) == {"salty", "no-salt", "a/b", ".."}
    # Stored under Kafka's sanitized names, one node each.
    assert set(scram_broker.znode_children("/config/users")) == {
        "salty",
        "no-salt",
        "a%2Fb",
        "%2E%2E",
    }


# UpdateMetadata ------------------------------------------------------------------------------
def _update_metadata(broker: RunningBroker, version: int, protocol: int) -> Any:
    host, port = broker.address()
    endpoints = (
        _nested(
            6,
            version,
            "UpdateMetadataEndpoint",
            port=port,
            host=host,
            listener="PLAINTEXT",
            security_protocol=0,
        ),
        _nested(
            6,
            version,
            "UpdateMetadataEndpoint",
            port=port + 1,
            host=host,
            listener="ODD",
            security_protocol=protocol,
        ),
    )
    live = _nested(6, version, "UpdateMetadataBroker", id=0, endpoints=endpoints, rack=None)
    return _request(
        6,
        version,
        controller_id=0,
        controller_epoch=1,
        broker_epoch=-1,
        ungrouped_partition_states=(),
        topic_states=(),
        live_brokers=(live,),
    )


def test_update_metadata_with_an_unknown_security_protocol(
    broker: RunningBroker, quiet_logs
) -> None:
    # Without listener names (v1-2) Kafka cannot parse such a request: the connection closes.
    with broker.wire() as client:
        client.send(_update_metadata(broker, 2, 99))
        assert client.is_closed_by_peer()
    # With listener names the endpoint's listener is known: accepted.
    with broker.wire() as client:
        assert client.request(_update_metadata(broker, 7, 99)).error_code == ErrorCode.none
    metadata = broker.topic_metadata("absent")
    assert metadata.error_code == ErrorCode.unknown_topic_or_partition
    with broker.wire() as client:
        listed = client.request(_request(3, 12, topics=None, allow_auto_topic_creation=False))
    assert [b.node_id for b in listed.brokers] == [0]
    _still_serves(broker)
