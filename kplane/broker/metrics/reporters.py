"""metric.reporters: Python classes (import paths) given the broker's metrics (KIP-226).

A reporter has ``configure(configs)``, ``init(metrics)`` and ``close()``; one that also has
``reconfigurable_configs()``, ``validate_reconfiguration(configs)`` and
``reconfigure(configs)`` (the Reconfigurable protocol) follows changes of those configs
without a restart. ``metric.reporters`` itself is dynamic: added reporters start, removed
ones close.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import structlog

from kplane.broker.config.dynamic_config import changed_keys
from kplane.broker.config.errors import ConfigException
from kplane.broker.config.kafka_config import KafkaConfig
from kplane.broker.metrics.registry import BrokerMetrics

log = structlog.get_logger(__name__)

METRIC_REPORTERS = "metric.reporters"


class MetricsReporter(Protocol):
    def configure(self, configs: Mapping[str, Any]) -> None: ...
    def init(self, metrics: BrokerMetrics) -> None: ...
    def close(self) -> None: ...


@runtime_checkable
class Reconfigurable(Protocol):
    """A component whose configs may change at runtime (Kafka's Reconfigurable)."""

    def reconfigurable_configs(self) -> set[str]: ...
    def validate_reconfiguration(self, configs: Mapping[str, Any]) -> None: ...
    def reconfigure(self, configs: Mapping[str, Any]) -> None: ...


def _load(path: str) -> type[Any]:
    module_name, _, class_name = path.rpartition(".")
    try:
        cls: type[Any] = getattr(importlib.import_module(module_name), class_name)
        return cls
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigException(
            f"{METRIC_REPORTERS}: cannot import {path}: {exc}", name=METRIC_REPORTERS
        ) from exc


def _configs(config: KafkaConfig) -> dict[str, str]:
    return dict(config.props)


class DynamicMetricsReporters:
    """The broker's metric reporters, kept in step with ``metric.reporters``."""

    def __init__(self, config: KafkaConfig, metrics: BrokerMetrics) -> None:
        self.metrics = metrics
        self.reporters: dict[str, MetricsReporter] = {}
        for path in config.get(METRIC_REPORTERS):
            self._start(path, config)

    @property
    def reconfigurable_configs(self) -> frozenset[str]:
        names = {METRIC_REPORTERS}
        for reporter in self.reporters.values():
            if isinstance(reporter, Reconfigurable):
                names |= set(reporter.reconfigurable_configs())
        return frozenset(names)

    def custom_configs(self) -> frozenset[str]:
        """Config names reporters declare that are not broker configs."""
        return self.reconfigurable_configs - {METRIC_REPORTERS}

    def _start(self, path: str, config: KafkaConfig) -> None:
        reporter = _load(path)()
        reporter.configure(_configs(config))
        reporter.init(self.metrics)
        self.reporters[path] = reporter
        log.info("metrics reporter started", reporter=path)

    def validate_reconfiguration(self, new: KafkaConfig) -> None:
        for path in new.get(METRIC_REPORTERS):
            if path not in self.reporters:
                _load(path)
        configs = _configs(new)
        for reporter in self.reporters.values():
            if isinstance(reporter, Reconfigurable):
                try:
                    reporter.validate_reconfiguration(configs)
                except ConfigException:
                    raise
                except Exception as exc:
                    raise ConfigException(f"{type(reporter).__name__}: {exc}") from exc

    def reconfigure(self, old: KafkaConfig, new: KafkaConfig) -> None:
        wanted = list(new.get(METRIC_REPORTERS))
        for path in [p for p in self.reporters if p not in wanted]:
            self.reporters.pop(path).close()
            log.info("metrics reporter closed", reporter=path)
        changed = changed_keys(old, new)
        for reporter in self.reporters.values():
            if (
                isinstance(reporter, Reconfigurable)
                and set(reporter.reconfigurable_configs()) & changed
            ):
                reporter.reconfigure(_configs(new))
        for path in wanted:
            if path not in self.reporters:
                self._start(path, new)

    def close(self) -> None:
        for reporter in self.reporters.values():
            reporter.close()
        self.reporters.clear()
