"""ACLs are read after write on the broker that wrote them (Kafka's authorizer updates its
own cache as part of the write); the other brokers follow through the change notice. On a
ZooKeeper cluster DescribeAcls on the broker that had just answered CreateAcls returned
nothing for 20-27 ms, and DeleteAcls in that window deleted nothing."""

from __future__ import annotations

import time
from collections.abc import Callable

from kio.schema.create_acls.v3.request import AclCreation, CreateAclsRequest
from kio.schema.delete_acls.v3.request import DeleteAclsFilter, DeleteAclsRequest
from kio.schema.describe_acls.v3.request import DescribeAclsRequest

from kplane.common.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AclResourceType,
    PatternType,
)
from kplane.common.acl_requests import creation_fields, filter_fields
from kplane.protocol import api
from kplane.protocol.errors import ErrorCode
from kplane.testing.plugin import KafkaCluster

AUTHORIZER = {
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
}


def _binding(topic: str) -> AclBinding:
    return AclBinding(
        AclResourceType.TOPIC, topic, PatternType.LITERAL, "User:bob", "*",
        AclOperation.READ, AclPermissionType.ALLOW,
    )  # fmt: skip


def _create(topic: str) -> CreateAclsRequest:
    return CreateAclsRequest(creations=(api.make(AclCreation, **creation_fields(_binding(topic))),))


def _describe(topic: str | None) -> DescribeAclsRequest:
    pattern = PatternType.LITERAL if topic else PatternType.ANY
    acl_filter = AclBindingFilter(AclResourceType.ANY, topic, pattern)
    return api.make(DescribeAclsRequest, **filter_fields(acl_filter))


def _delete(topic: str) -> DeleteAclsRequest:
    acl_filter = AclBindingFilter(AclResourceType.TOPIC, topic, PatternType.LITERAL)
    return DeleteAclsRequest(filters=(api.make(DeleteAclsFilter, **filter_fields(acl_filter)),))


def test_describe_and_delete_right_after_create(
    kafka_cluster: Callable[..., KafkaCluster],
) -> None:
    cluster = kafka_cluster(brokers=2, overrides=AUTHORIZER)
    writer, other = cluster.brokers
    with writer.wire() as client:
        for i in range(20):
            topic = f"acl-{i}"
            created = client.request(_create(topic))
            assert [r.error_code for r in created.results] == [ErrorCode.none]
            described = client.request(_describe(topic))
            assert [r.resource_name for r in described.resources] == [topic], i
            deleted = client.request(_delete(topic))
            (result,) = deleted.filter_results
            assert [m.resource_name for m in result.matching_acls] == [topic], i
        client.request(_create("kept"))
    # the other broker follows the change notices
    deadline = time.monotonic() + 15
    with other.wire() as client:
        while True:
            found = client.request(_describe(None)).resources
            if [r.resource_name for r in found] == ["kept"]:
                break
            assert time.monotonic() < deadline, found
            time.sleep(0.05)
