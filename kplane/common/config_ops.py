"""The config APIs' codes, shared by the broker's handlers and the admin client: which
resource a config belongs to (Kafka's ConfigResource.Type) and how IncrementalAlterConfigs
changes it (Kafka's AlterConfigOp.OpType)."""

from __future__ import annotations

from enum import IntEnum


class ConfigResourceType(IntEnum):
    """Kafka's ConfigResource.Type: the ``resource_type`` of the config APIs."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


class OpType(IntEnum):
    """Kafka's AlterConfigOp.OpType: an IncrementalAlterConfigs ``config_operation``."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3
