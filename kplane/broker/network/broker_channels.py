"""BrokerChannelManager: one broker's connections, as a client, to other brokers.

As Kafka's ControllerChannelManager and TransactionMarkerChannelManager: one connection
and one queue per broker, one request in flight per broker, each to one listener of the
brokers. The connections run on one asyncio loop in their own thread; a broker that cannot
be reached is retried with backoff until it is removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any

import structlog

from kplane.broker.config.endpoint import EndPoint, SecurityProtocol
from kplane.broker.config.kafka_config import KafkaConfig
from kplane.broker.metadata.kafka_store import BrokerRegistration
from kplane.common.network.config import ClientConfig
from kplane.common.network.connection import BrokerConnection
from kplane.common.network.security import client_ssl_context
from kplane.protocol import api

log = structlog.get_logger(__name__)

Build = Callable[[int], Any]
"""Builds a request body for the version the connection negotiated."""
Callback = Callable[[Any | None, Exception | None], None]
RETRY_BACKOFF_S = 0.2
CLOSE_GRACE_S = 0.01
"""How long the loop runs on after closing the connections, so their closes go out."""
REQUEST_TIMEOUT_MS = 30_000


def client_config_for(
    config: KafkaConfig, listener: str, endpoint: EndPoint, client_id: str
) -> ClientConfig:
    """How this broker, as a client, reaches ``listener`` of another broker: the listener's
    security protocol, its truststore (and keystore for mutual TLS), and for SASL the
    ``username``/``password`` of the listener's login context for
    ``sasl.mechanism.inter.broker.protocol``."""
    protocol = endpoint.security_protocol
    props = {
        "bootstrap.servers": f"{endpoint.host}:{endpoint.port}",
        "security.protocol": protocol.value,
        "client.id": client_id,
    }
    if protocol in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL):
        for key in (
            "ssl.truststore.location",
            "ssl.truststore.type",
            "ssl.truststore.password",
            "ssl.keystore.location",
            "ssl.keystore.type",
            "ssl.keystore.password",
            "ssl.key.password",
            "ssl.endpoint.identification.algorithm",
        ):
            value = config.listener_get(listener, key)
            if value is not None:
                text = getattr(value, "value", value)
                props[key] = str(text)
    if protocol in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL):
        mechanism = config.get_str("sasl.mechanism.inter.broker.protocol")
        jaas = config.sasl_jaas_config(listener, mechanism)
        props["sasl.mechanism"] = mechanism
        if jaas is not None:
            props["sasl.jaas.config"] = getattr(jaas, "value", jaas)
    return ClientConfig.from_properties(props)


class _BrokerChannel:
    """One broker's queue and connection; a task sends its requests one at a time."""

    def __init__(self, registration: BrokerRegistration, endpoint: EndPoint, config: ClientConfig):
        self.registration = registration
        self.endpoint = endpoint
        self.config = config
        # Loaded once per channel, not on every reconnect.
        self.ssl_context = client_ssl_context(config) if config.uses_ssl else None
        self.sasl = config.sasl_credentials() if config.uses_sasl else None
        self.queue: asyncio.Queue[tuple[int, Build, Callback | None]] = asyncio.Queue()
        self.connection: BrokerConnection | None = None
        self.task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        while True:
            api_key, build, callback = await self.queue.get()
            response, error = await self._send(api_key, build)
            if callback is not None:
                callback(response, error)

    async def _send(self, api_key: int, build: Build) -> tuple[Any | None, Exception | None]:
        while True:
            try:
                connection = await self._connect()
                return await connection.request(api_key, build), None
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning(
                    "inter-broker request failed, retrying",
                    broker=self.registration.broker_id,
                    endpoint=f"{self.endpoint.host}:{self.endpoint.port}",
                    api=api.API_NAMES.get(api_key),
                    error=str(exc) or type(exc).__name__,
                )
                self.close()
                await asyncio.sleep(RETRY_BACKOFF_S)

    async def _connect(self) -> BrokerConnection:
        if self.connection is not None and not self.connection.closed:
            return self.connection
        config = self.config
        connection = BrokerConnection(
            self.endpoint.host,
            self.endpoint.port,
            config.client_id,
            REQUEST_TIMEOUT_MS,
            ssl_context=self.ssl_context,
            sasl=self.sasl,
        )
        await connection.connect(config.request_timeout_ms / 1000.0)
        self.connection = connection
        return connection

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close(None)
            self.connection = None


class BrokerChannelManager:
    """Queues requests to each broker on ``listener`` and sends them in order."""

    def __init__(self, config: KafkaConfig, listener: str, name: str) -> None:
        self.config = config
        self.listener = listener
        self.name = name
        self._channels: dict[int, _BrokerChannel] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        """The loop until ``shutdown`` stops it; then what is still pending is cancelled and
        finished, and the loop closed (no task or socket is left for the collector)."""
        try:
            self._loop.run_forever()
        finally:
            pending = asyncio.all_tasks(self._loop)
            for task in pending:
                task.cancel()
            if pending:
                self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._loop.close()

    def _call(self, fn: Callable[[], Any]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed at shutdown: nothing runs
            self._loop.call_soon_threadsafe(fn)

    def add_broker(self, registration: BrokerRegistration) -> None:
        """Open a channel to a live broker (its registration names the endpoint)."""
        endpoint = registration.endpoint(self.listener)
        if endpoint is None:
            log.warning(
                "broker has no endpoint for the channel's listener",
                broker=registration.broker_id,
                listener=self.listener,
            )
            return
        config = client_config_for(
            self.config, self.listener, endpoint, f"{self.name}-{self.config.broker_id}"
        )

        self._call(lambda: self._open(registration, endpoint, config))

    def _open(
        self, registration: BrokerRegistration, endpoint: EndPoint, config: ClientConfig
    ) -> _BrokerChannel:
        """On the loop: a new channel to the broker, replacing its old one."""
        old = self._channels.pop(registration.broker_id, None)
        if old is not None:
            self._stop(old)
        channel = _BrokerChannel(registration, endpoint, config)
        channel.task = self._loop.create_task(channel.run())
        self._channels[registration.broker_id] = channel
        return channel

    def remove_broker(self, broker_id: int) -> None:
        """Drop a dead broker's channel and the requests queued for it."""

        def remove() -> None:
            channel = self._channels.pop(broker_id, None)
            if channel is not None:
                self._stop(channel)

        self._call(remove)

    @staticmethod
    def _stop(channel: _BrokerChannel) -> None:
        if channel.task is not None:
            channel.task.cancel()
        channel.close()

    def send_to(
        self, registration: BrokerRegistration, api_key: int, build: Build, callback: Callback
    ) -> None:
        """Queue a request for a live broker, opening its channel first when there is none
        (or its endpoint moved); ``callback(None, error)`` when it has no endpoint on the
        listener."""
        endpoint = registration.endpoint(self.listener)
        if endpoint is None:
            callback(None, ValueError(f"broker {registration.broker_id} has no {self.listener}"))
            return
        config = client_config_for(
            self.config, self.listener, endpoint, f"{self.name}-{self.config.broker_id}"
        )

        def enqueue() -> None:
            channel = self._channels.get(registration.broker_id)
            if channel is None or channel.endpoint != endpoint:
                channel = self._open(registration, endpoint, config)
            channel.queue.put_nowait((api_key, build, callback))

        self._call(enqueue)

    def send(
        self, broker_id: int, api_key: int, build: Build, callback: Callback | None = None
    ) -> None:
        """Queue a request for ``broker_id`` (dropped if the broker has no channel)."""

        def enqueue() -> None:
            channel = self._channels.get(broker_id)
            if channel is not None:
                channel.queue.put_nowait((api_key, build, callback))

        self._call(enqueue)

    def shutdown(self) -> None:
        """Close every connection and stop the loop."""

        def stop() -> None:
            for channel in self._channels.values():
                self._stop(channel)
            self._channels.clear()
            self._loop.call_later(CLOSE_GRACE_S, self._loop.stop)

        if not self._loop.is_closed():
            self._call(stop)
            self._thread.join(timeout=5)
