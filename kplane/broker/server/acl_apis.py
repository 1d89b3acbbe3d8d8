"""CreateAcls, DescribeAcls and DeleteAcls over the ACL authorizer.

Without an authorizer each answers SECURITY_DISABLED, as Kafka does.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import groupby

import structlog

from kplane.broker.security.authorizer import AclAuthorizer
from kplane.broker.server.context import Handler, RequestContext
from kplane.common.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AclResourceType,
    PatternType,
)
from kplane.common.acl_requests import acl_binding, binding_filter, entry_fields, resource_fields
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode

log = structlog.get_logger(__name__)

NO_AUTHORIZER = "No Authorizer is configured on the broker"


def _filter_error(f: AclBindingFilter) -> str | None:
    if AclResourceType.UNKNOWN in (f.resource_type,) or f.pattern_type is PatternType.UNKNOWN:
        return "Filter contains UNKNOWN elements"
    if f.operation is AclOperation.UNKNOWN or f.permission_type is AclPermissionType.UNKNOWN:
        return "Filter contains UNKNOWN elements"
    return None


class AclApis:
    """The three ACL administration APIs."""

    def __init__(self, authorizer: AclAuthorizer | None) -> None:
        self.authorizer = authorizer

    def handlers(self) -> Mapping[int, Handler]:
        return {
            ApiKey.DESCRIBE_ACLS: self.handle_describe,
            ApiKey.CREATE_ACLS: self.handle_create,
            ApiKey.DELETE_ACLS: self.handle_delete,
        }

    def _refusal(self, ctx: RequestContext) -> tuple[ErrorCode, str | None] | None:
        """Why an ACL change is refused: no authorizer, or no Cluster:Alter."""
        if self.authorizer is None:
            return ErrorCode.security_disabled, NO_AUTHORIZER
        if not ctx.authorized(AclOperation.ALTER, AclResourceType.CLUSTER):
            return ErrorCode.cluster_authorization_failed, None
        return None

    def handle_create(self, ctx: RequestContext) -> None:
        creations = ctx.body.creations
        error = self._refusal(ctx)
        if error is not None or self.authorizer is None:
            error = error or (ErrorCode.security_disabled, NO_AUTHORIZER)
            results = [ctx.make("AclCreationResult", error_code=error[0], error_message=error[1])]
            ctx.respond(ctx.make_response(results=tuple(results * len(creations))))
            return
        outcomes: list[tuple[ErrorCode, str | None]] = []
        valid: list[AclBinding] = []
        for c in creations:
            acl = acl_binding(c, c, "resource_pattern_type")
            reason = acl.invalid_reason()
            if reason is None:
                valid.append(acl)
                outcomes.append((ErrorCode.none, None))
            else:
                log.info("ACL refused", acl=str(acl), reason=reason)
                outcomes.append((ErrorCode.invalid_request, reason))
        self.authorizer.create_acls(valid)
        log.info("ACLs created", count=len(valid), principal=ctx.principal)
        ctx.respond(
            ctx.make_response(
                results=tuple(
                    ctx.make("AclCreationResult", error_code=code, error_message=message)
                    for code, message in outcomes
                )
            )
        )

    def handle_describe(self, ctx: RequestContext) -> None:
        if self.authorizer is None:
            ctx.respond(
                ctx.make_response(
                    error_code=ErrorCode.security_disabled,
                    error_message=NO_AUTHORIZER,
                    resources=(),
                )
            )
            return
        if not ctx.authorized(AclOperation.DESCRIBE, AclResourceType.CLUSTER):
            ctx.respond(
                ctx.make_response(error_code=ErrorCode.cluster_authorization_failed, resources=())
            )
            return
        f = binding_filter(ctx.body)
        reason = _filter_error(f)
        if reason is not None:
            ctx.respond(
                ctx.make_response(
                    error_code=ErrorCode.invalid_request, error_message=reason, resources=()
                )
            )
            return

        def resource_key(acl: AclBinding) -> tuple[AclResourceType, str, PatternType]:
            return (acl.resource_type, acl.resource_name, acl.pattern_type)

        acls = sorted(self.authorizer.acls(f), key=resource_key)
        resources = []
        for _, group in groupby(acls, key=resource_key):
            entries = list(group)
            resources.append(
                ctx.make(
                    "DescribeAclsResource",
                    **resource_fields(entries[0]),
                    acls=tuple(ctx.make("AclDescription", **entry_fields(a)) for a in entries),
                )
            )
        ctx.respond(
            ctx.make_response(
                error_code=ErrorCode.none, error_message=None, resources=tuple(resources)
            )
        )

    def handle_delete(self, ctx: RequestContext) -> None:
        filters = [binding_filter(f) for f in ctx.body.filters]
        error = self._refusal(ctx)
        if error is not None or self.authorizer is None:
            code, message = error or (ErrorCode.security_disabled, NO_AUTHORIZER)
            result = ctx.make(
                "DeleteAclsFilterResult", error_code=code, error_message=message, matching_acls=()
            )
            ctx.respond(ctx.make_response(filter_results=(result,) * len(filters)))
            return
        usable = [f for f in filters if _filter_error(f) is None]
        deleted = iter(self.authorizer.delete_acls(usable))
        results = []
        for f in filters:
            reason = _filter_error(f)
            matches = () if reason is not None else next(deleted)
            results.append(
                ctx.make(
                    "DeleteAclsFilterResult",
                    error_code=ErrorCode.invalid_request if reason else ErrorCode.none,
                    error_message=reason,
                    matching_acls=tuple(
                        ctx.make(
                            "DeleteAclsMatchingAcl",
                            error_code=ErrorCode.none,
                            error_message=None,
                            **resource_fields(a),
                            **entry_fields(a),
                        )
                        for a in matches
                    ),
                )
            )
        log.info("ACLs deleted", filters=len(filters), principal=ctx.principal)
        ctx.respond(ctx.make_response(filter_results=tuple(results)))
