"""The idempotent producer's state: the idempotence half of Kafka's TransactionManager
(the transactional half is :mod:`client.transaction_manager`).

With ``enable.idempotence`` the sender gets a producer id (InitProducerId) before the first
Produce and numbers each partition's batches (``base_sequence``, wrapping at 2**31 - 1). A
retried batch keeps its sequence, so the broker drops it if it was appended already. When a
batch that had a sequence fails for good, the producer takes a new producer id before sending
more, as Java's does (KIP-360), so the partition's sequence gap cannot block it.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Callable, Iterable
from typing import Any

import structlog

from kplane.client.kafka_client import KafkaClient, NoBrokersAvailable
from kplane.client.producer_batch import ProducerBatch, TopicPartition
from kplane.client.producer_retry import RETRIABLE_ERRORS, ExponentialBackoff
from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode, KafkaError

log = structlog.get_logger(__name__)

INT32_MAX = 2**31 - 1
_SEQUENCE_MODULUS = INT32_MAX + 1

# Errors of InitProducerId worth another try.
_INIT_RETRIABLE = RETRIABLE_ERRORS | {
    ErrorCode.coordinator_not_available,
    ErrorCode.not_coordinator,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.concurrent_transactions,
}


def init_producer_id_request(
    transactional_id: str | None,
    transaction_timeout_ms: int,
    producer_id: int = -1,
    producer_epoch: int = -1,
) -> Callable[[int], Any]:
    """InitProducerId's builder: an idempotent producer's (no transactional id), or a
    transactional one's, which may name its current id and epoch to have the epoch bumped
    (KIP-360)."""

    def build(version: int) -> Any:
        return api.make(
            api.request_class(ApiKey.INIT_PRODUCER_ID, version),
            transactional_id=transactional_id,
            transaction_timeout=datetime.timedelta(milliseconds=transaction_timeout_ms),
            producer_id=producer_id,
            producer_epoch=producer_epoch,
        )

    return build


def seq_before(a: int, b: int) -> bool:
    """Sequence ``a`` comes before ``b`` (sequences wrap at 2**31 - 1)."""
    return 0 < (b - a) % _SEQUENCE_MODULUS < _SEQUENCE_MODULUS // 2


class IdempotenceManager:
    """The producer id and epoch, and the next sequence of each partition."""

    def __init__(self) -> None:
        self.producer_id = -1
        self.producer_epoch = -1
        self.needs_new_producer_id = False
        self._next_sequence: dict[TopicPartition, int] = {}

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    def next_sequence(self, tp: TopicPartition, records: int) -> int:
        """The base sequence of the next batch of ``tp``, of ``records`` records."""
        sequence = self._next_sequence.get(tp, 0)
        self._next_sequence[tp] = (sequence + records) % _SEQUENCE_MODULUS
        return sequence

    def handle_failed_batch(self, batch: ProducerBatch, error: BaseException) -> BaseException:
        """A batch failed for good (with ``error``): if it had a sequence, its partition's
        sequences now have a gap, so continue under a new producer id. Returns what the
        batch's records fail with."""
        if batch.sequence is not None:
            self.needs_new_producer_id = True
        return error

    def set_producer_id(self, response: Any) -> None:
        """Take the producer id and epoch of an InitProducerId answer; sequences start over."""
        self.producer_id = int(response.producer_id)
        self.producer_epoch = int(response.producer_epoch)
        self._next_sequence.clear()
        self.needs_new_producer_id = False
        log.debug(
            "producer id assigned", producer_id=self.producer_id, producer_epoch=self.producer_epoch
        )

    def reset_producer_id(self, queued: Iterable[Iterable[ProducerBatch]]) -> None:
        """Forget the producer id and sequences; ``queued`` batches (retries) get new ones
        when resent."""
        log.info(
            "idempotent producer resets its producer id after a failed batch",
            producer_id=self.producer_id,
        )
        self.producer_id = -1
        self.producer_epoch = -1
        self._next_sequence.clear()
        self.needs_new_producer_id = False
        for queue in queued:
            for batch in queue:
                if batch.sequence is not None:
                    batch.sequence = None
                    batch.data = None

    async def init_producer_id(
        self, client: KafkaClient, retries: int, backoff: ExponentialBackoff
    ) -> None:
        """InitProducerId, retried up to ``retries`` times; raises the error that stopped
        it."""

        build = init_producer_id_request(None, 60_000)
        attempt = 0
        while True:
            error: BaseException
            try:
                response = await client.request(None, ApiKey.INIT_PRODUCER_ID, build)
            except NoBrokersAvailable:
                raise
            except (ConnectionError, TimeoutError) as exc:
                error = exc
            else:
                code = response.error_code
                if code is ErrorCode.none:
                    self.set_producer_id(response)
                    return
                error = KafkaError(code, f"InitProducerId: {code.name}")
                if code not in _INIT_RETRIABLE:
                    raise error
            attempt += 1
            if attempt > retries:
                raise error
            await asyncio.sleep(backoff.backoff(attempt))
