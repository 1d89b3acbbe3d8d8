"""LogDirAdmin: a broker's log directories (DescribeLogDirs, API 35), each request sent to
the broker it describes, as Kafka's AdminClient.describeLogDirs does."""

from __future__ import annotations

from dataclasses import dataclass

from kplane.client.admin import Admin
from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode, KafkaError


@dataclass(frozen=True)
class ReplicaInfo:
    """One replica in a log dir: its size, how far its end is behind, whether it is the
    future log of a move between log dirs."""

    topic: str
    partition: int
    size: int
    offset_lag: int
    is_future: bool


@dataclass(frozen=True)
class LogDirDescription:
    """One log dir of a broker (Kafka's LogDirDescription); ``error`` None when online."""

    path: str
    error: ErrorCode | None
    replicas: tuple[ReplicaInfo, ...]
    total_bytes: int | None
    usable_bytes: int | None


class LogDirAdmin:
    """Log directories of brokers, through an :class:`Admin`'s client."""

    def __init__(self, admin: Admin) -> None:
        self.client = admin.client

    async def describe_log_dirs(self, broker: int) -> list[LogDirDescription]:
        """Every log dir of ``broker`` with every replica it holds."""
        response = await self.client.request(
            broker,
            ApiKey.DESCRIBE_LOG_DIRS,
            lambda v: api.make(api.request_class(ApiKey.DESCRIBE_LOG_DIRS, v), topics=None),
        )
        error = getattr(response, "error_code", ErrorCode.none)
        if error != ErrorCode.none:
            raise KafkaError(error, f"DescribeLogDirs at broker {broker}: {error.name}")
        return [
            LogDirDescription(
                r.log_dir,
                None if r.error_code == ErrorCode.none else r.error_code,
                tuple(
                    ReplicaInfo(
                        str(t.name),
                        int(p.partition_index),
                        int(p.partition_size),
                        int(p.offset_lag),
                        bool(p.is_future_key),
                    )
                    for t in r.topics
                    for p in t.partitions
                ),
                _bytes(getattr(r, "total_bytes", -1)),
                _bytes(getattr(r, "usable_bytes", -1)),
            )
            for r in response.results
        ]


def _bytes(value: int) -> int | None:
    """A volume's size, None when the broker did not say (-1, before v4)."""
    return None if value < 0 else int(value)
