"""DynamicThreadPool (KIP-226): thread counts changed at runtime, within Kafka's bounds."""

from __future__ import annotations

from collections.abc import Callable

from kplane.broker.config.errors import ConfigException
from kplane.broker.config.kafka_config import KafkaConfig
from kplane.broker.network.socket_server import SocketServer
from kplane.broker.server.request_handler import RequestHandlerPool

THREAD_CONFIGS = frozenset(
    {
        "num.io.threads",
        "num.network.threads",
        "num.replica.fetchers",
        "num.recovery.threads.per.data.dir",
        "background.threads",
    }
)


class DynamicThreadPool:
    """Resizes the data plane's request handlers and network Processors.

    A new value must be at least 1, at least half and at most double the current one
    (Kafka's rule, so a change never starves or floods the broker at once).
    ``num.replica.fetchers`` goes to ``on_replica_fetchers``; ``num.recovery.threads.per.data.dir``
    and ``background.threads`` are validated and kept; kplane has no such pools.
    """

    reconfigurable_configs = THREAD_CONFIGS

    def __init__(
        self,
        config: KafkaConfig,
        handlers: RequestHandlerPool,
        socket_server: SocketServer,
        on_handlers_resized: Callable[[int], None],
        on_replica_fetchers: Callable[[int], None] = lambda _n: None,
    ) -> None:
        self._current = config
        self.handlers = handlers
        self.socket_server = socket_server
        self._on_handlers_resized = on_handlers_resized
        self._on_replica_fetchers = on_replica_fetchers

    def validate_reconfiguration(self, new: KafkaConfig) -> None:
        for name in sorted(THREAD_CONFIGS):
            value = int(new.get(name))
            old = int(self._current.get(name))
            if value == old:
                continue
            if value < 1:
                raise ConfigException(
                    f"Invalid value {value} for {name}: value should be at least 1", name=name
                )
            if value * 2 < old:
                raise ConfigException(
                    f"Invalid value {value} for {name}: value should be at least half the "
                    f"current value {old}",
                    name=name,
                )
            if value > old * 2:
                raise ConfigException(
                    f"Invalid value {value} for {name}: value should not be greater than "
                    f"double the current value {old}",
                    name=name,
                )

    def reconfigure(self, old: KafkaConfig, new: KafkaConfig) -> None:
        self._current = new
        io_threads = int(new.get("num.io.threads"))
        if io_threads != self.handlers.size:
            self.handlers.resize(io_threads)
            self._on_handlers_resized(io_threads)
        if int(new.get("num.replica.fetchers")) != int(old.get("num.replica.fetchers")):
            self._on_replica_fetchers(int(new.get("num.replica.fetchers")))
        network_threads = int(new.get("num.network.threads"))
        if network_threads != self.socket_server.config.num_network_threads:
            self.socket_server.resize_processors(network_threads)
