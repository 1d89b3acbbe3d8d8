"""The client's own exceptions, beside :class:`protocol.errors.KafkaError` (an error a broker
answered): a call that does not fit the state it is made in, and the transactional
producer's errors, named as Kafka's Java client names them."""

from __future__ import annotations

from kplane.protocol.errors import ErrorCode, KafkaError


class IllegalStateError(RuntimeError):
    """The call does not fit the state of the consumer or producer (nothing assigned,
    closed, a send outside a transaction, a transaction begun twice)."""


class FatalTransactionError(KafkaError):
    """The transactional producer cannot go on: every later transactional call and send
    raises this error again; close the producer (and make a new one)."""


class ProducerFencedError(FatalTransactionError):
    """Another producer with the same ``transactional.id`` was initialised after this one
    (PRODUCER_FENCED, or INVALID_PRODUCER_EPOCH from an older broker)."""


class TransactionalIdAuthorizationError(FatalTransactionError):
    """The principal may not use this ``transactional.id`` (Write on the TransactionalId
    resource)."""


class AbortableTransactionError(KafkaError):
    """The current transaction hit an error (its ``__cause__``): sends, commit and
    ``send_offsets_to_transaction`` raise this until ``abort_transaction()`` is called,
    after which the producer can begin a new transaction."""

    def __init__(self, cause: BaseException) -> None:
        code = cause.code if isinstance(cause, KafkaError) else ErrorCode.unknown_server_error
        super().__init__(code, f"the transaction must be aborted: {type(cause).__name__}: {cause}")
        self.__cause__ = cause


class TransactionAbortedError(KafkaError):
    """A record's future fails with this when its transaction was aborted before the record
    was sent."""

    def __init__(self, message: str = "the transaction was aborted") -> None:
        super().__init__(ErrorCode.unknown_server_error, message)
