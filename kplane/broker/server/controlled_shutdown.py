"""Controlled shutdown, the broker's side: before it stops, a broker asks the controller
(ControlledShutdown, API 7) to move the leaderships it holds to the rest of their ISRs, so
producers and consumers move on without errors (Kafka's KafkaServer.controlledShutdown).

The controller and the live brokers are read from the metadata store (``/controller``,
``/brokers/ids``) as Kafka's ZooKeeper-mode broker did, not from the metadata cache: an
UpdateMetadata that named a controller which is not registered must not hold shutdown
through every retry."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import structlog

from kplane.broker.config.kafka_config import KafkaConfig
from kplane.broker.metadata.kafka_store import KafkaMetadataClient
from kplane.broker.network.broker_channels import client_config_for
from kplane.common.network.connection import BrokerConnection
from kplane.common.network.security import client_ssl_context
from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode

log = structlog.get_logger(__name__)


def controlled_shutdown(config: KafkaConfig, client: KafkaMetadataClient, broker_id: int) -> bool:
    """Ask the controller until no leadership is left here, at most
    ``controlled.shutdown.max.retries`` more times ``controlled.shutdown.retry.backoff.ms``
    apart; returns whether every leadership moved. Skipped (True) when this broker is the
    only live one: there is nobody to move leaderships to."""
    if not config.get_bool("controlled.shutdown.enable") or _alone(client):
        return True
    attempts = config.get_int("controlled.shutdown.max.retries") + 1
    backoff_s = config.get_int("controlled.shutdown.retry.backoff.ms") / 1000
    for attempt in range(1, attempts + 1):
        try:
            error, remaining = asyncio.run(_ask(config, client, broker_id))
        except Exception as exc:
            error, remaining = ErrorCode.unknown_server_error, [str(exc) or type(exc).__name__]
        if error is ErrorCode.none and not remaining:
            log.info("controlled shutdown succeeded", broker_id=broker_id, attempt=attempt)
            return True
        log.warning(
            "controlled shutdown incomplete",
            broker_id=broker_id,
            attempt=attempt,
            error=error.name,
            remaining=remaining[:10],
        )
        if attempt < attempts:
            time.sleep(backoff_s)
    return False


def _alone(client: KafkaMetadataClient) -> bool:
    """Whether no other broker is registered; False when the store cannot say (then the
    attempts below find out)."""
    try:
        return len(client.get_brokers()) < 2
    except Exception:
        return False


async def _ask(
    config: KafkaConfig, client: KafkaMetadataClient, broker_id: int
) -> tuple[ErrorCode, list[Any]]:
    listener = config.inter_broker_listener_name
    controller_id = client.get_controller_id()
    registration = client.get_broker(controller_id) if controller_id is not None else None
    endpoint = registration.endpoint(listener) if registration else None
    if endpoint is None:
        return ErrorCode.not_controller, [f"no controller endpoint on {listener}"]
    settings = client_config_for(config, listener, endpoint, f"controlled-shutdown-{broker_id}")
    connection = BrokerConnection(
        endpoint.host,
        endpoint.port,
        settings.client_id,
        settings.request_timeout_ms,
        ssl_context=client_ssl_context(settings) if settings.uses_ssl else None,
        sasl=settings.sasl_credentials() if settings.uses_sasl else None,
    )
    await connection.connect(settings.request_timeout_ms / 1000)
    try:
        response = await connection.request(
            ApiKey.CONTROLLED_SHUTDOWN,
            lambda version: api.make(
                api.request_class(ApiKey.CONTROLLED_SHUTDOWN, version), broker_id=broker_id
            ),
        )
    finally:
        connection.close(None)
    remaining = [f"{p.topic_name}-{p.partition_index}" for p in response.remaining_partitions]
    return ErrorCode(int(response.error_code)), remaining
