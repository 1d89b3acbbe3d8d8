"""BrokerRegistrar: this broker's ephemeral ``/brokers/ids/<id>``, naming its endpoints."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from kplane.broker.metadata.kafka_store import BrokerRegistration, KafkaMetadataClient
from kplane.broker.metadata.store import NodeExistsError


class BrokerRegistrar:
    """Registers the broker at start-up, again after a new metadata-store session (the old
    session's ephemeral node is gone), and publishes listener changes."""

    def __init__(
        self, client: KafkaMetadataClient, registration: Callable[[], BrokerRegistration]
    ) -> None:
        self._client = client
        self._registration = registration

    def register(self) -> None:
        """Create ``/brokers/ids/<id>``; RuntimeError when another broker holds the id."""
        registration = self._registration()
        try:
            self._client.register_broker(registration)
        except NodeExistsError:
            broker_id = registration.broker_id
            raise RuntimeError(
                f"broker.id {broker_id} is already registered at /brokers/ids/{broker_id}"
            ) from None

    def register_again(self) -> None:
        """After a new session: create the node again (it may already be back)."""
        with contextlib.suppress(NodeExistsError):
            self._client.register_broker(self._registration())

    def update(self) -> None:
        """Publish the broker's current endpoints (listeners changed at runtime)."""
        self._client.update_broker(self._registration())
