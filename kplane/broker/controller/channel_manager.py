"""ControllerChannelManager: the controller's connections to every live broker.

Sent to each broker's ``control.plane.listener.name`` endpoint when the controller has one,
else to its inter-broker listener (KIP-291, "How can a controller learn about the dedicated
endpoints").
"""

from __future__ import annotations

from kplane.broker.config.kafka_config import KafkaConfig
from kplane.broker.network.broker_channels import BrokerChannelManager


class ControllerChannelManager(BrokerChannelManager):
    """Queues the controller's requests to each broker and sends them in order."""

    def __init__(self, config: KafkaConfig) -> None:
        super().__init__(
            config,
            config.control_plane_listener_name or config.inter_broker_listener_name,
            "controller",
        )
