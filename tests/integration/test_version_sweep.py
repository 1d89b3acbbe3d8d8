"""Every version of every served API is answered (a minimal request of each version)."""

from __future__ import annotations

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.testing.plugin import RunningBroker
from kplane.testing.wire import WireClient


def _served(broker: RunningBroker) -> list[tuple[int, int]]:
    with WireClient(*broker.address()) as client:
        response = client.request(
            ApiVersionsRequest(client_software_name="t", client_software_version="1")
        )
    return [
        (k.api_key, v) for k in response.api_keys for v in range(k.min_version, k.max_version + 1)
    ]


def test_every_served_version_answers(broker: RunningBroker) -> None:
    served = _served(broker)
    assert len(served) > 100
    failures = []
    with WireClient(*broker.address()) as client:
        for key, version in served:
            values = {"acks": 1} if key == ApiKey.PRODUCE else {}
            request = api.make(api.request_class(key, version), **values)
            try:
                client.request(request)
            except (ConnectionError, OSError, AssertionError) as exc:
                failures.append((api.API_NAMES[key], version, repr(exc)))
                client = WireClient(*broker.address())
    assert not failures, failures


@pytest.mark.parametrize("key", [3, 60])
def test_listener_aware_apis_answer_every_version(broker: RunningBroker, key: int) -> None:
    advertised = broker.advertised("PLAINTEXT")
    values = {"endpoint_type": 1} if key == 60 else {}
    with WireClient(*broker.address()) as client:
        for version in api.kio_versions(key):
            response = client.request(api.make(api.request_class(key, version), **values))
            brokers = [(b.host, b.port) for b in response.brokers]
            assert brokers == [advertised], version
