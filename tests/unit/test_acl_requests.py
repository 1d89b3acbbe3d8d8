"""kplane.common.acl_requests: the ACL APIs' fields read back as the ACLs written, on every
version kio has, and Kafka's names of the ACL enums."""

from __future__ import annotations

import pytest

from kplane.common.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AclResourceType,
    PatternType,
)
from kplane.common.acl_requests import (
    acl_binding,
    binding_filter,
    creation_fields,
    entry_fields,
    filter_fields,
    resource_fields,
)
from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey

ACL = AclBinding(
    AclResourceType.TRANSACTIONAL_ID,
    "app-",
    PatternType.PREFIXED,
    "User:alice",
    "10.0.0.1",
    AclOperation.DESCRIBE_CONFIGS,
    AclPermissionType.DENY,
)
FILTER = AclBindingFilter(
    AclResourceType.TOPIC, "t", PatternType.MATCH, "User:bob", None, AclOperation.READ
)


@pytest.mark.parametrize("version", api.kio_versions(ApiKey.CREATE_ACLS))
def test_an_acl_creation_reads_back_as_the_acl(version: int) -> None:
    module = api.request_module(ApiKey.CREATE_ACLS, version)
    creation = api.make(module.AclCreation, **creation_fields(ACL))
    assert acl_binding(creation, creation, "resource_pattern_type") == ACL


@pytest.mark.parametrize("version", api.kio_versions(ApiKey.DESCRIBE_ACLS))
def test_a_described_resource_reads_back_as_its_acls(version: int) -> None:
    module = api.response_module(ApiKey.DESCRIBE_ACLS, version)
    entry = api.make(module.AclDescription, **entry_fields(ACL))
    resource = api.make(module.DescribeAclsResource, **resource_fields(ACL), acls=(entry,))
    assert [acl_binding(resource, a) for a in resource.acls] == [ACL]


@pytest.mark.parametrize("version", api.kio_versions(ApiKey.DELETE_ACLS))
def test_a_matching_acl_and_a_filter_read_back(version: int) -> None:
    response = api.response_module(ApiKey.DELETE_ACLS, version)
    matching = api.make(response.DeleteAclsMatchingAcl, **resource_fields(ACL), **entry_fields(ACL))
    assert acl_binding(matching, matching) == ACL
    request = api.request_module(ApiKey.DELETE_ACLS, version)
    read = binding_filter(api.make(request.DeleteAclsFilter, **filter_fields(FILTER)))
    assert read == FILTER


def test_a_code_this_end_does_not_know_reads_as_unknown() -> None:
    module = api.response_module(ApiKey.DESCRIBE_ACLS, 1)
    entry = api.make(module.AclDescription, **{**entry_fields(ACL), "operation": 99})
    resource = api.make(module.DescribeAclsResource, **{**resource_fields(ACL), "pattern_type": 9})
    acl = acl_binding(resource, entry)
    assert (acl.operation, acl.pattern_type) == (AclOperation.UNKNOWN, PatternType.UNKNOWN)


@pytest.mark.parametrize("cls", [AclResourceType, AclOperation, AclPermissionType])
def test_kafka_names_read_back(cls: type[AclOperation]) -> None:
    for member in cls:
        assert cls.from_name(member.store_name) is member


def test_kafka_names() -> None:
    assert AclResourceType.TRANSACTIONAL_ID.store_name == "TransactionalId"
    assert AclPermissionType.ALLOW.store_name == "Allow"
    assert AclOperation.from_name("DescribeConfigs") is AclOperation.DESCRIBE_CONFIGS
    assert AclOperation.from_name("read") is AclOperation.READ
    with pytest.raises(KeyError):
        AclOperation.from_name("Fly")
