"""What the producer retries, and how long it waits between tries.

Retriable errors (leadership moved, partition unknown, timeouts, too few replicas, a lost
connection) refresh the metadata and retry after an exponential backoff (KIP-580), up to
``retries`` times.
"""

from __future__ import annotations

import random

from kplane.protocol.errors import ErrorCode

RETRY_BACKOFF_MAX_MS = 1_000  # Kafka's retry.backoff.max.ms default (KIP-580)

# Errors after which a batch is retried (with a metadata refresh first).
RETRIABLE_ERRORS = frozenset(
    {
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.leader_not_available,
        ErrorCode.not_leader_or_follower,
        ErrorCode.request_timed_out,
        ErrorCode.replica_not_available,
        ErrorCode.network_exception,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.kafka_storage_error,
        ErrorCode.listener_not_found,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.unknown_topic_id,
        ErrorCode.inconsistent_topic_id,
        ErrorCode.throttling_quota_exceeded,
    }
)


class ExponentialBackoff:
    """``retry.backoff.ms`` doubled per attempt up to ``retry.backoff.max.ms``, with 20%
    jitter (KIP-580)."""

    __slots__ = ("_initial", "_max")

    def __init__(self, retry_backoff_ms: int) -> None:
        self._initial = max(retry_backoff_ms, 0) / 1000.0
        self._max = max(RETRY_BACKOFF_MAX_MS, retry_backoff_ms) / 1000.0

    def backoff(self, attempt: int) -> float:
        """Seconds to wait before try ``attempt`` (1: the first retry)."""
        base = min(self._initial * 2 ** max(attempt - 1, 0), self._max)
        return base * random.uniform(0.8, 1.2)
