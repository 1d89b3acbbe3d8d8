"""The load test's client telemetry (KIP-714): its Producers are subscribed to push their
own metrics (``org.apache.kafka.producer.*``: request latency, queue time, throttle time)
every second, so the scraped broker metrics hold what the clients measured beside what the
broker measured (``--load-client confluent``; the wire load's connections do not push). The
subscription is a CLIENT_METRICS config resource matching the load's client ids; it is
removed when the scenario ends."""

from __future__ import annotations

from kplane.client.admin import Admin, AlterConfigOp, ConfigResource, ConfigResourceType, OpType
from kplane.client.kafka_client import KafkaClient
from kplane.common.network.config import ClientConfig
from kplane.protocol.errors import KafkaError

SUBSCRIPTION = "kplane-loadtest"
METRICS = "org.apache.kafka.producer."
INTERVAL_MS = 1000
MATCH = "client_id=kplane-loadtest-.*"
_RESOURCE = ConfigResource(ConfigResourceType.CLIENT_METRICS, SUBSCRIPTION)


def pushes(load_client: str) -> bool:
    """Whether the load's clients push metrics: librdkafka's do, the wire load's do not."""
    return load_client == "confluent"


async def _alter(bootstrap: str, ops: list[AlterConfigOp]) -> str | None:
    config = ClientConfig.from_properties({"bootstrap.servers": bootstrap})
    try:
        async with KafkaClient(config) as client:
            error = (await Admin(client).incremental_alter_configs({_RESOURCE: ops}))[_RESOURCE]
    except (KafkaError, OSError, TimeoutError) as exc:
        return str(exc) or type(exc).__name__
    return None if error is None else str(error)


async def subscribe(bootstrap: str) -> str:
    """Subscribe the load's Producers; "subscribed", or why not (a broker without KIP-714's
    CLIENT_METRICS resources refuses it, and the load runs without client metrics)."""
    problem = await _alter(
        bootstrap,
        [
            AlterConfigOp("metrics", METRICS),
            AlterConfigOp("interval.ms", str(INTERVAL_MS)),
            AlterConfigOp("match", MATCH),
        ],
    )
    return "subscribed" if problem is None else f"not subscribed: {problem}"


async def unsubscribe(bootstrap: str) -> None:
    """Remove the subscription (every config of it deleted, as kafka-client-metrics.sh does)."""
    await _alter(
        bootstrap,
        [AlterConfigOp(name, None, OpType.DELETE) for name in ("metrics", "interval.ms", "match")],
    )
