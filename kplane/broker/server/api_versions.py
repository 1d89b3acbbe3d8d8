"""ApiVersions: what this broker serves, per api key and version."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from kplane.broker.server.context import Handler, RequestContext
from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode


def api_versions_response(
    version: int, supported: Mapping[int, range], error: ErrorCode = ErrorCode.none
) -> object:
    """The ApiVersions response of ``version`` listing ``supported``."""
    module = api.response_module(ApiKey.API_VERSIONS, version)
    keys = tuple(
        api.make(module.ApiVersion, api_key=key, min_version=r.start, max_version=r.stop - 1)
        for key, r in supported.items()
    )
    return api.make(
        api.response_class(ApiKey.API_VERSIONS, version),
        error_code=error,
        api_keys=keys,
        throttle_time_ms=0,
        supported_features=(),
        finalized_features_epoch=-1,
        finalized_features=(),
        zk_migration_ready=False,
    )


class ApiVersionsApi:
    """Serves ApiVersions from the live handler table."""

    def __init__(self, supported: Callable[[], Mapping[int, range]]) -> None:
        self._supported = supported

    def handlers(self) -> Mapping[int, Handler]:
        return {ApiKey.API_VERSIONS: self.handle}

    def handle(self, ctx: RequestContext) -> None:
        ctx.respond(api_versions_response(ctx.api_version, self._supported()))
