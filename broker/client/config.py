"""ClientConfig: the Kafka client settings kplane's client honours, by their Kafka names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

RECOVERY_STRATEGIES = ("none", "rebootstrap")


def parse_bootstrap(value: str | list[str]) -> list[tuple[str, int]]:
    """``host:port,host:port`` (or a list) -> [(host, port)]."""
    items = value.split(",") if isinstance(value, str) else list(value)
    out = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"bootstrap.servers: {item!r} is not host:port")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("bootstrap.servers: no servers given")
    return out


@dataclass
class ClientConfig:
    """Settings of KafkaClient; build it from Kafka-style keys with ``from_properties``."""

    bootstrap_servers: list[tuple[str, int]]
    client_id: str = "kplane"
    security_protocol: str = "PLAINTEXT"
    request_timeout_ms: int = 30_000
    reconnect_backoff_ms: int = 50
    reconnect_backoff_max_ms: int = 1_000
    connections_max_idle_ms: int = 540_000
    metadata_max_age_ms: int = 300_000
    metadata_recovery_strategy: str = "none"
    metadata_recovery_rebootstrap_trigger_ms: int = 300_000
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.metadata_recovery_strategy not in RECOVERY_STRATEGIES:
            raise ValueError(
                f"metadata.recovery.strategy: {self.metadata_recovery_strategy!r} is not one "
                f"of {', '.join(RECOVERY_STRATEGIES)}"
            )
        if self.security_protocol != "PLAINTEXT":
            raise ValueError(
                f"security.protocol: {self.security_protocol} is not supported yet "
                "(SSL and SASL come with the security issue)"
            )

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> ClientConfig:
        """Build from ``{"bootstrap.servers": ..., "metadata.recovery.strategy": ...}``.

        Keys this client does not know are kept in ``extra`` (producer and consumer
        settings read them from there).
        """
        known = {f.name.replace("_", "."): f for f in fields(cls) if f.name != "extra"}
        values: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in props.items():
            f = known.get(key)
            if f is None:
                extra[key] = value
            elif f.name == "bootstrap_servers":
                values[f.name] = parse_bootstrap(value)
            elif f.type in ("int", int):
                values[f.name] = int(value)
            else:
                values[f.name] = str(value)
        if "bootstrap_servers" not in values:
            raise ValueError("bootstrap.servers is required")
        return cls(**values, extra=extra)
