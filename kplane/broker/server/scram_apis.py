"""DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554) over the store."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import structlog

from kplane.broker.security.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramCredential,
    ScramCredentialStore,
    ScramMechanismType,
)
from kplane.broker.server.context import Handler, RequestContext
from kplane.common.acl import AclOperation, AclResourceType
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.codes import from_wire
from kplane.protocol.errors import ErrorCode

log = structlog.get_logger(__name__)


_Outcome = tuple[ErrorCode, str | None]


class ScramApis:
    """SCRAM credential administration; needs Cluster:Describe / Cluster:Alter."""

    def __init__(self, credentials: ScramCredentialStore) -> None:
        self.credentials = credentials

    def handlers(self) -> Mapping[int, Handler]:
        return {
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: self.handle_describe,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self.handle_alter,
        }

    def handle_describe(self, ctx: RequestContext) -> None:
        if not ctx.authorized(AclOperation.DESCRIBE, AclResourceType.CLUSTER):
            ctx.respond(
                ctx.make_response(error_code=ErrorCode.cluster_authorization_failed, results=())
            )
            return
        asked = [u.name for u in ctx.body.users] if ctx.body.users else None
        names = asked if asked is not None else self.credentials.users()
        counts = Counter(names)
        results = []
        for user in dict.fromkeys(names):
            infos = self.credentials.describe(user)
            outcome: _Outcome = (ErrorCode.none, None)
            if counts[user] > 1:
                outcome = (
                    ErrorCode.duplicate_resource,
                    "Cannot describe SCRAM credentials for the same user twice in a single request",
                )
            elif not infos:
                outcome = (
                    ErrorCode.resource_not_found,
                    "Attempt to describe a user credential that does not exist",
                )
            results.append(
                ctx.make(
                    "DescribeUserScramCredentialsResult",
                    user=user,
                    error_code=outcome[0],
                    error_message=outcome[1],
                    credential_infos=tuple(
                        ctx.make("CredentialInfo", mechanism=int(m), iterations=i)
                        for m, i in sorted(infos.items())
                    )
                    if outcome[0] is ErrorCode.none
                    else (),
                )
            )
        ctx.respond(
            ctx.make_response(error_code=ErrorCode.none, error_message=None, results=tuple(results))
        )

    def handle_alter(self, ctx: RequestContext) -> None:
        body = ctx.body
        users = list(
            dict.fromkeys([d.name for d in body.deletions] + [u.name for u in body.upsertions])
        )
        if not ctx.authorized(AclOperation.ALTER, AclResourceType.CLUSTER):
            self._answer(ctx, {u: (ErrorCode.cluster_authorization_failed, None) for u in users})
            return
        outcomes: dict[str, _Outcome] = {}
        pairs = Counter((c.name, int(c.mechanism)) for c in (*body.deletions, *body.upsertions))
        for user, _m in (p for p, n in pairs.items() if n > 1):
            outcomes.setdefault(
                user,
                (
                    ErrorCode.duplicate_resource,
                    "A user credential cannot be altered twice in the same request",
                ),
            )
        for change in (*body.deletions, *body.upsertions):
            reason = self._invalid(change)
            if reason is not None:
                outcomes.setdefault(change.name, reason)
        for deletion in body.deletions:
            if deletion.name in outcomes:
                continue
            if not self.credentials.describe(deletion.name).get(
                from_wire(ScramMechanismType, deletion.mechanism)
            ):
                outcomes[deletion.name] = (
                    ErrorCode.resource_not_found,
                    "Attempt to delete a user credential that does not exist",
                )
        # Apply the changes of the users whose every change is valid (Kafka's rule).
        for deletion in body.deletions:
            if deletion.name not in outcomes:
                self.credentials.delete(
                    deletion.name, from_wire(ScramMechanismType, deletion.mechanism)
                )
        for upsertion in body.upsertions:
            if upsertion.name not in outcomes:
                mechanism = from_wire(ScramMechanismType, upsertion.mechanism)
                self.credentials.upsert(
                    upsertion.name,
                    mechanism,
                    ScramCredential.from_salted_password(
                        mechanism,
                        bytes(upsertion.salt),
                        bytes(upsertion.salted_password),
                        int(upsertion.iterations),
                    ),
                )
        for user in users:
            if user in outcomes:
                log.info("SCRAM credential change refused", user=user, reason=outcomes[user][1])
            else:
                log.info("SCRAM credentials altered", user=user, principal=ctx.principal)
        self._answer(ctx, {u: outcomes.get(u, (ErrorCode.none, None)) for u in users})

    @staticmethod
    def _invalid(change: object) -> _Outcome | None:
        name = getattr(change, "name", "")
        if not name:
            return ErrorCode.unacceptable_credential, "Username must not be empty"
        if (
            from_wire(ScramMechanismType, getattr(change, "mechanism", 0))
            is ScramMechanismType.UNKNOWN
        ):
            return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
        iterations = getattr(change, "iterations", None)
        if iterations is None:
            return None  # a deletion
        if iterations < MIN_ITERATIONS:
            return ErrorCode.unacceptable_credential, (
                f"Too few iterations: at least {MIN_ITERATIONS}"
            )
        if iterations > MAX_ITERATIONS:
            return ErrorCode.unacceptable_credential, (
                f"Too many iterations: at most {MAX_ITERATIONS}"
            )
        if not getattr(change, "salted_password", b""):
            return ErrorCode.unacceptable_credential, "Salted password must not be empty"
        return None

    @staticmethod
    def _answer(ctx: RequestContext, outcomes: dict[str, _Outcome]) -> None:
        ctx.respond(
            ctx.make_response(
                results=tuple(
                    ctx.make(
                        "AlterUserScramCredentialsResult",
                        user=user,
                        error_code=code,
                        error_message=message,
                    )
                    for user, (code, message) in outcomes.items()
                )
            )
        )
