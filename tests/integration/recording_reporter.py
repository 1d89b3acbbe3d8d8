"""A metrics reporter for the dynamic-config tests: records what the broker did to it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

LABEL = "recording.reporter.label"


class RecordingReporter:
    """Implements kplane's MetricsReporter and Reconfigurable protocols."""

    instances: ClassVar[list[RecordingReporter]] = []

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []
        RecordingReporter.instances.append(self)

    def configure(self, configs: Mapping[str, Any]) -> None:
        self.events.append(("configure", configs.get(LABEL)))

    def init(self, metrics: Any) -> None:
        self.events.append(("init", type(metrics).__name__))

    def close(self) -> None:
        self.events.append(("close", None))

    def reconfigurable_configs(self) -> set[str]:
        return {LABEL}

    def validate_reconfiguration(self, configs: Mapping[str, Any]) -> None:
        if configs.get(LABEL) == "refuse":
            raise ValueError("label 'refuse' is refused")

    def reconfigure(self, configs: Mapping[str, Any]) -> None:
        self.events.append(("reconfigure", configs.get(LABEL)))
