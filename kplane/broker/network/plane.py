"""The request planes (KIP-291): what differs between the data plane and the control plane,
decided once from the config.

Each plane has its own RequestChannel (``queued.max.requests`` slots for data, 20 for
control), its own handler pool (``num.io.threads`` threads, one for control), its
Processors (``num.network.threads`` per data-plane listener, one on the control-plane
listener), its thread names and its gauges; SocketServer and KafkaServer build one of each
per Plane and ask it, never the listener name.
"""

from __future__ import annotations

from dataclasses import dataclass

from kplane.broker.config.kafka_config import KafkaConfig
from kplane.broker.metrics import registry as m

CONTROL_PLANE_QUEUE_SIZE = 20
"""KIP-291's control-plane request queue."""


@dataclass(frozen=True, slots=True)
class Plane:
    """One plane's name (the ``plane`` label of metrics), sizes and metric names."""

    name: str
    queue_size: int
    handler_threads: int
    request_queue_size_metric: str
    response_queue_size_metric: str
    expired_connections_killed_metric: str
    handler_idle_metric: str
    processor_idle_metric: str

    @property
    def is_control(self) -> bool:
        """The control plane: its Processor announces requests, the data plane yields."""
        return self.name == m.CONTROL_PLANE

    def thread_name(self, role: str, suffix: object) -> str:
        """Kafka's thread names, e.g. ``data-plane-kafka-request-handler-0``,
        ``control-plane-kafka-network-thread-CONTROLLER-0``."""
        return f"{self.name}-plane-kafka-{role}-{suffix}"


def data_plane(queue_size: int, handler_threads: int) -> Plane:
    """The data plane: every listener but the control-plane one."""
    return Plane(
        m.DATA_PLANE,
        queue_size,
        handler_threads,
        m.REQUEST_QUEUE_SIZE,
        m.RESPONSE_QUEUE_SIZE,
        m.EXPIRED_CONNECTIONS_KILLED_COUNT,
        m.REQUEST_HANDLER_AVG_IDLE_PERCENT,
        m.NETWORK_PROCESSOR_AVG_IDLE_PERCENT,
    )


CONTROL = Plane(
    m.CONTROL_PLANE,
    CONTROL_PLANE_QUEUE_SIZE,
    1,
    m.CONTROL_PLANE_REQUEST_QUEUE_SIZE,
    m.CONTROL_PLANE_RESPONSE_QUEUE_SIZE,
    m.CONTROL_PLANE_EXPIRED_CONNECTIONS_KILLED_COUNT,
    m.CONTROL_PLANE_REQUEST_HANDLER_AVG_IDLE_PERCENT,
    m.CONTROL_PLANE_NETWORK_PROCESSOR_AVG_IDLE_PERCENT,
)
"""The control plane: the ``control.plane.listener.name`` listener alone."""


def planes(config: KafkaConfig) -> tuple[Plane, Plane | None]:
    """The data plane, and the control plane when ``control.plane.listener.name`` is set."""
    data = data_plane(config.get_int("queued.max.requests"), config.get_int("num.io.threads"))
    return data, CONTROL if config.control_plane_listener_name else None
