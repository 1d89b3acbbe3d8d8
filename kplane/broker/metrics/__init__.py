"""Broker metrics: Kafka's metric names on a per-broker Prometheus registry.

See ``broker.metrics.registry`` for the naming rule and ``broker.metrics.http`` for exposition.
"""

from kplane.broker.metrics.http import MetricsHttpServer
from kplane.broker.metrics.idle import IdleMeter
from kplane.broker.metrics.registry import (
    CONTROL_PLANE,
    CONTROL_PLANE_EXPIRED_CONNECTIONS_KILLED_COUNT,
    CONTROL_PLANE_NETWORK_PROCESSOR_AVG_IDLE_PERCENT,
    CONTROL_PLANE_REQUEST_HANDLER_AVG_IDLE_PERCENT,
    CONTROL_PLANE_REQUEST_QUEUE_SIZE,
    CONTROL_PLANE_RESPONSE_QUEUE_SIZE,
    DATA_PLANE,
    ERRORS_PER_SEC,
    EXPIRED_CONNECTIONS_KILLED_COUNT,
    MS_BUCKETS,
    NETWORK_PROCESSOR_AVG_IDLE_PERCENT,
    REQUEST_HANDLER_AVG_IDLE_PERCENT,
    REQUEST_QUEUE_SIZE,
    REQUEST_TIME_METRICS,
    REQUESTS_PER_SEC,
    RESPONSE_QUEUE_SIZE,
    BrokerMetrics,
    metric_name,
)

__all__ = [
    "CONTROL_PLANE",
    "CONTROL_PLANE_EXPIRED_CONNECTIONS_KILLED_COUNT",
    "CONTROL_PLANE_NETWORK_PROCESSOR_AVG_IDLE_PERCENT",
    "CONTROL_PLANE_REQUEST_HANDLER_AVG_IDLE_PERCENT",
    "CONTROL_PLANE_REQUEST_QUEUE_SIZE",
    "CONTROL_PLANE_RESPONSE_QUEUE_SIZE",
    "DATA_PLANE",
    "ERRORS_PER_SEC",
    "EXPIRED_CONNECTIONS_KILLED_COUNT",
    "MS_BUCKETS",
    "NETWORK_PROCESSOR_AVG_IDLE_PERCENT",
    "REQUESTS_PER_SEC",
    "REQUEST_HANDLER_AVG_IDLE_PERCENT",
    "REQUEST_QUEUE_SIZE",
    "REQUEST_TIME_METRICS",
    "RESPONSE_QUEUE_SIZE",
    "BrokerMetrics",
    "IdleMeter",
    "MetricsHttpServer",
    "metric_name",
]
