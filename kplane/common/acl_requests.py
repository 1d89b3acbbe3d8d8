"""The ACL APIs' fields and the ACLs they carry, both ways, as Kafka's CreateAclsRequest,
DescribeAclsRequest/Response and DeleteAclsRequest/Response convert them: the broker's
handlers read what the admin client writes, and the other way round.

Fields are given as the keyword values of :func:`protocol.api.make`. Reading, a code this
end does not know is ``UNKNOWN`` and a version without a pattern type is ``LITERAL``.
"""

from __future__ import annotations

from typing import Any

from kplane.common.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AclResourceType,
    PatternType,
)
from kplane.protocol.codes import from_wire


def resource_fields(acl: AclBinding) -> dict[str, Any]:
    """The resource pattern of a DescribeAclsResource or a DeleteAclsMatchingAcl."""
    return {
        "resource_type": int(acl.resource_type),
        "resource_name": acl.resource_name,
        "pattern_type": int(acl.pattern_type),
    }


def entry_fields(acl: AclBinding) -> dict[str, Any]:
    """The principal, host, operation and permission of an AclDescription, an AclCreation
    or a DeleteAclsMatchingAcl."""
    return {
        "principal": acl.principal,
        "host": acl.host,
        "operation": int(acl.operation),
        "permission_type": int(acl.permission_type),
    }


def creation_fields(acl: AclBinding) -> dict[str, Any]:
    """An AclCreation of CreateAcls, whose pattern type is ``resource_pattern_type``."""
    fields = resource_fields(acl)
    fields["resource_pattern_type"] = fields.pop("pattern_type")
    return {**fields, **entry_fields(acl)}


def acl_binding(resource: Any, entry: Any, pattern_field: str = "pattern_type") -> AclBinding:
    """The ACL of a resource pattern (``resource``) and an entry (``entry``): a
    DescribeAclsResource and one of its AclDescriptions, or one entity holding both
    (a DeleteAclsMatchingAcl; an AclCreation, with ``resource_pattern_type``)."""
    return AclBinding(
        from_wire(AclResourceType, resource.resource_type),
        resource.resource_name,
        from_wire(PatternType, getattr(resource, pattern_field, PatternType.LITERAL)),
        entry.principal,
        entry.host,
        from_wire(AclOperation, entry.operation),
        from_wire(AclPermissionType, entry.permission_type),
    )


def filter_fields(acl_filter: AclBindingFilter) -> dict[str, Any]:
    """A DescribeAcls request's filter, or a DeleteAclsFilter."""
    return {
        "resource_type_filter": int(acl_filter.resource_type),
        "resource_name_filter": acl_filter.resource_name,
        "pattern_type_filter": int(acl_filter.pattern_type),
        "principal_filter": acl_filter.principal,
        "host_filter": acl_filter.host,
        "operation": int(acl_filter.operation),
        "permission_type": int(acl_filter.permission_type),
    }


def binding_filter(entity: Any) -> AclBindingFilter:
    """The filter of a DescribeAcls request or of a DeleteAclsFilter."""
    return AclBindingFilter(
        from_wire(AclResourceType, entity.resource_type_filter),
        entity.resource_name_filter,
        from_wire(PatternType, getattr(entity, "pattern_type_filter", PatternType.LITERAL)),
        entity.principal_filter,
        entity.host_filter,
        from_wire(AclOperation, entity.operation),
        from_wire(AclPermissionType, entity.permission_type),
    )
