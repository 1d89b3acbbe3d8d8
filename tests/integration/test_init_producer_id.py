"""InitProducerId with an expected producer id and epoch (KIP-360) on the wire, as clients
such as @platformatic/kafka send it for a transactional id the coordinator has never seen:
Kafka accepts it (the metadata was just created), so must kplane; a stale producer is
still fenced."""

from __future__ import annotations

import datetime

from kio.schema.init_producer_id.v5.request import InitProducerIdRequest
from kio.schema.types import ProducerId, TransactionalId
from kio.static.primitive import i16

from kplane.protocol.errors import ErrorCode
from kplane.testing.plugin import RunningBroker


def _init(broker: RunningBroker, tid: str, producer_id: int, epoch: int) -> tuple[int, int, int]:
    with broker.wire() as client:
        answer = client.request(
            InitProducerIdRequest(
                transactional_id=TransactionalId(tid),
                transaction_timeout=datetime.timedelta(seconds=60),
                producer_id=ProducerId(producer_id),
                producer_epoch=i16(epoch),
            )
        )
    return answer.error_code, int(answer.producer_id), int(answer.producer_epoch)


def test_a_new_transactional_id_with_a_supplied_producer(broker: RunningBroker) -> None:
    error, producer_id, epoch = _init(broker, "platformatic-style", 0, 0)
    assert (error, epoch) == (ErrorCode.none, 0)
    # the producer goes on after an error with what it was given: the epoch is bumped
    assert _init(broker, "platformatic-style", producer_id, 0) == (ErrorCode.none, producer_id, 1)
    # the same call again (its answer lost): the same epoch, not bumped twice
    assert _init(broker, "platformatic-style", producer_id, 0) == (ErrorCode.none, producer_id, 1)
    assert _init(broker, "platformatic-style", producer_id, 1) == (ErrorCode.none, producer_id, 2)
    # an epoch older than the current and the last, or another producer id: fenced
    assert _init(broker, "platformatic-style", producer_id, 0)[0] == ErrorCode.producer_fenced
    assert _init(broker, "platformatic-style", producer_id + 1, 2)[0] == ErrorCode.producer_fenced
