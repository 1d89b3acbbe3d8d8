"""The transactional producer's state machine (client/transaction_manager.py) against a
scripted client: which requests go where, what is retried, what is fatal or abortable, and
the usage errors raised at once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace as NS
from typing import Any

import pytest

from kplane.client.errors import (
    AbortableTransactionError,
    FatalTransactionError,
    IllegalStateError,
    ProducerFencedError,
    TransactionAbortedError,
    TransactionalIdAuthorizationError,
)
from kplane.client.kafka_client import CoordinatorType
from kplane.client.producer_batch import ProducerBatch
from kplane.client.producer_retry import ExponentialBackoff
from kplane.client.settings import CONSUMER_SETTINGS, PRODUCER_SETTINGS, read_settings
from kplane.client.transaction_manager import (
    ConsumerGroupMetadata,
    OffsetAndMetadata,
    TransactionManager,
    TransactionState,
)
from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode, KafkaError

E = ErrorCode


def init_ok(producer_id: int = 7, epoch: int = 0) -> NS:
    return NS(error_code=E.none, producer_id=producer_id, producer_epoch=epoch)


def code(error: ErrorCode) -> NS:
    return NS(error_code=error, producer_id=-1, producer_epoch=-1)


def add_partitions(*codes: ErrorCode) -> NS:
    return NS(
        results_by_topic_v3_and_below=[
            NS(results_by_partition=[NS(partition_error_code=c) for c in codes])
        ]
    )


def offsets(*codes: ErrorCode) -> NS:
    return NS(topics=[NS(partitions=[NS(error_code=c) for c in codes])])


class ScriptedClient:
    """Answers each API key from a script, in order; records requests and lookups."""

    def __init__(self, **script: list[Any]) -> None:
        self.script = {getattr(ApiKey, k.upper()): list(v) for k, v in script.items()}
        self.lookup_script: list[Any] = []
        self.requests: list[tuple[int, int, int, Any]] = []  # node, key, version, request
        self.lookups: list[tuple[CoordinatorType, str]] = []

    async def find_coordinator(self, key_type: CoordinatorType, key: str) -> int:
        self.lookups.append((key_type, key))
        if self.lookup_script:
            answer = self.lookup_script.pop(0)
            if isinstance(answer, BaseException):
                raise answer
            return int(answer)
        return 1 if key_type is CoordinatorType.TRANSACTION else 2

    async def request(
        self,
        node_id: int,
        api_key: int,
        build: Callable[[int], Any],
        extra_timeout_ms: int = 0,
        max_version: int | None = None,
    ) -> Any:
        version = api.kio_versions(api_key).stop - 1
        if max_version is not None:
            version = min(version, max_version)
        request = build(version)
        self.requests.append((node_id, api_key, version, request))
        answer = self.script[api_key].pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def sent(self, api_key: int) -> list[tuple[int, int, Any]]:
        return [(n, v, r) for n, k, v, r in self.requests if k == api_key]


def manager(client: ScriptedClient, max_block_ms: int = 5_000) -> TransactionManager:
    return TransactionManager(
        client,  # type: ignore[arg-type]
        "tid",
        transaction_timeout_ms=30_000,
        max_block_ms=max_block_ms,
        backoff=ExponentialBackoff(0),
    )


async def ready(client: ScriptedClient) -> TransactionManager:
    client.script.setdefault(ApiKey.INIT_PRODUCER_ID, []).insert(0, init_ok())
    tm = manager(client)
    await tm.init_transactions()
    return tm


def batch(sequence: int | None) -> ProducerBatch:
    b = ProducerBatch("t", 0, 0.0, asyncio.get_running_loop().create_future())
    b.sequence = sequence
    return b


# init_transactions ---------------------------------------------------------------------------
async def test_init_retries_and_looks_the_coordinator_up_again() -> None:
    client = ScriptedClient(
        init_producer_id=[
            code(E.concurrent_transactions),
            code(E.not_coordinator),
            code(E.coordinator_load_in_progress),
            ConnectionError("lost"),
            init_ok(42, 3),
        ]
    )
    client.lookup_script = [KafkaError(E.coordinator_not_available), 1, 1, 1]
    tm = manager(client)
    await tm.init_transactions()
    assert tm.state is TransactionState.READY
    assert (tm.producer_id, tm.producer_epoch) == (42, 3)
    # the first lookup failed, NOT_COORDINATOR and the lost connection each looked again
    assert len(client.lookups) == 4
    assert set(client.lookups) == {(CoordinatorType.TRANSACTION, "tid")}
    for node, version, request in client.sent(ApiKey.INIT_PRODUCER_ID):
        assert node == 1
        assert request.transactional_id == "tid"
        assert request.transaction_timeout.total_seconds() == 30
        assert (request.producer_id, request.producer_epoch) == (-1, -1)
        assert version == api.kio_versions(ApiKey.INIT_PRODUCER_ID).stop - 1


@pytest.mark.parametrize(
    ("error", "raised"),
    [
        (E.producer_fenced, ProducerFencedError),
        (E.invalid_producer_epoch, ProducerFencedError),
        (E.transactional_id_authorization_failed, TransactionalIdAuthorizationError),
        (E.invalid_transaction_timeout, FatalTransactionError),
    ],
)
async def test_init_errors_are_fatal_and_raised_again(
    error: ErrorCode, raised: type[Exception]
) -> None:
    tm = manager(ScriptedClient(init_producer_id=[code(error)]))
    with pytest.raises(raised) as info:
        await tm.init_transactions()
    assert info.value.code == error
    assert tm.state is TransactionState.FATAL_ERROR
    with pytest.raises(raised) as again:
        tm.begin_transaction()
    assert again.value is info.value
    with pytest.raises(raised):
        await tm.init_transactions()
    with pytest.raises(raised):
        tm.begin_abort()


async def test_a_coordinator_that_never_answers_times_out_and_init_may_be_retried() -> None:
    client = ScriptedClient(init_producer_id=[code(E.concurrent_transactions)] * 1000)
    tm = manager(client, max_block_ms=50)
    client_sleep = ExponentialBackoff(5)  # 5 ms between tries
    tm._backoff = client_sleep
    with pytest.raises(TimeoutError, match=r"max\.block\.ms"):
        await tm.init_transactions()
    assert tm.state is TransactionState.INITIALIZING
    client.script[ApiKey.INIT_PRODUCER_ID] = [init_ok()]
    await tm.init_transactions()
    assert tm.state is TransactionState.READY


# usage errors ----------------------------------------------------------------------------------
async def test_usage_errors() -> None:
    tm = manager(ScriptedClient(init_producer_id=[init_ok()]))
    with pytest.raises(IllegalStateError, match="init_transactions"):
        tm.begin_transaction()
    with pytest.raises(IllegalStateError, match="init_transactions"):
        tm.check_send()
    await tm.init_transactions()
    with pytest.raises(IllegalStateError, match="called already"):
        await tm.init_transactions()
    with pytest.raises(IllegalStateError, match="begin_transaction"):
        tm.maybe_add_partition(("t", 0))
    with pytest.raises(IllegalStateError):
        tm.begin_commit()
    with pytest.raises(IllegalStateError):
        tm.begin_abort()
    with pytest.raises(IllegalStateError):
        await tm.send_offsets({("t", 0): 1}, "g")
    tm.begin_transaction()
    with pytest.raises(IllegalStateError, match="open already"):
        tm.begin_transaction()
    tm.begin_commit()
    with pytest.raises(IllegalStateError, match="being committed"):
        tm.check_send()
    with pytest.raises(ValueError, match="empty"):
        TransactionManager(ScriptedClient(), "", backoff=ExponentialBackoff(0))  # type: ignore[arg-type]


# a transaction ---------------------------------------------------------------------------------
async def test_partitions_are_added_once_then_commit_ends_the_transaction() -> None:
    client = ScriptedClient(
        add_partitions_to_txn=[
            add_partitions(E.concurrent_transactions, E.none),
            add_partitions(E.none, E.none),
        ],
        end_txn=[code(E.concurrent_transactions), code(E.not_coordinator), code(E.none)],
    )
    tm = await ready(client)
    tm.begin_transaction()
    tm.maybe_add_partition(("t", 0))
    tm.maybe_add_partition(("u", 1))
    assert tm.has_pending_partitions and not tm.may_send(("t", 0))
    await tm.add_partitions()
    assert tm.may_send(("t", 0)) and tm.may_send(("u", 1)) and not tm.has_pending_partitions
    tm.maybe_add_partition(("t", 0))  # already in: nothing to add
    assert not tm.has_pending_partitions
    (_, version, request), _ = client.sent(ApiKey.ADD_PARTITIONS_TO_TXN)
    assert version == 3  # v4+ is the brokers' form
    assert request.v3_and_below_transactional_id == "tid"
    assert {(t.name, tuple(t.partitions)) for t in request.v3_and_below_topics} == {
        ("t", (0,)),
        ("u", (1,)),
    }
    tm.begin_commit()
    await tm.end_transaction(commit=True)
    assert tm.state is TransactionState.READY and not tm.may_send(("t", 0))
    assert [r.committed for _, _, r in client.sent(ApiKey.END_TXN)] == [True] * 3
    assert len(client.lookups) == 2  # NOT_COORDINATOR on EndTxn looked again


async def test_a_transaction_without_partitions_or_offsets_ends_without_a_request() -> None:
    client = ScriptedClient()
    tm = await ready(client)
    tm.begin_transaction()
    tm.begin_commit()
    await tm.end_transaction(commit=True)
    tm.begin_transaction()
    tm.begin_abort()
    await tm.end_transaction(commit=False)
    assert not client.sent(ApiKey.END_TXN)
    assert tm.state is TransactionState.READY


async def test_an_unauthorized_topic_makes_the_transaction_abortable() -> None:
    client = ScriptedClient(
        add_partitions_to_txn=[
            add_partitions(E.topic_authorization_failed, E.operation_not_attempted)
        ],
    )
    tm = await ready(client)
    tm.begin_transaction()
    tm.maybe_add_partition(("secret", 0))
    tm.maybe_add_partition(("t", 0))
    await tm.add_partitions()
    assert tm.state is TransactionState.ABORTABLE_ERROR
    assert isinstance(tm.error, AbortableTransactionError)
    assert tm.error.code == E.topic_authorization_failed
    for call in (tm.check_send, tm.begin_commit, tm.begin_transaction):
        with pytest.raises(AbortableTransactionError):
            call()
    tm.begin_abort()  # nothing reached the coordinator: no EndTxn
    await tm.end_transaction(commit=False)
    assert tm.state is TransactionState.READY
    assert not client.sent(ApiKey.END_TXN)
    tm.begin_transaction()


async def test_fencing_answers_are_fatal_wherever_they_come() -> None:
    client = ScriptedClient(add_partitions_to_txn=[add_partitions(E.producer_fenced)])
    tm = await ready(client)
    tm.begin_transaction()
    tm.maybe_add_partition(("t", 0))
    await tm.add_partitions()  # the sender's step: the state says what happened
    assert isinstance(tm.error, ProducerFencedError)
    with pytest.raises(ProducerFencedError):
        tm.check_send()
    with pytest.raises(ProducerFencedError):
        tm.begin_abort()

    client = ScriptedClient(end_txn=[code(E.producer_fenced)], add_offsets_to_txn=[code(E.none)])
    client.script[ApiKey.TXN_OFFSET_COMMIT] = [offsets(E.none)]
    tm = await ready(client)
    tm.begin_transaction()
    await tm.send_offsets({("t", 0): 1}, "g")
    tm.begin_commit()
    with pytest.raises(ProducerFencedError) as info:
        await tm.end_transaction(commit=True)
    assert "fenced by a newer producer" in str(info.value)


async def test_a_failed_batch_makes_the_transaction_abortable_and_abort_bumps_the_epoch() -> None:
    client = ScriptedClient(
        add_partitions_to_txn=[add_partitions(E.none)],
        end_txn=[code(E.none)],
        init_producer_id=[init_ok(7, 0), init_ok(7, 1)],
    )
    tm = manager(client)
    await tm.init_transactions()
    tm.begin_transaction()
    tm.maybe_add_partition(("t", 0))
    await tm.add_partitions()
    assert tm.next_sequence(("t", 0), 3) == 0
    failed = batch(sequence=0)
    error = KafkaError(E.not_enough_replicas, "gone")
    assert tm.handle_failed_batch(failed, error) is error  # its records see the real error
    assert tm.state is TransactionState.ABORTABLE_ERROR
    with pytest.raises(AbortableTransactionError) as info:
        tm.begin_commit()
    assert info.value.__cause__ is error
    tm.begin_abort()
    # batches failing while the transaction aborts change nothing
    tm.handle_failed_batch(batch(sequence=3), TransactionAbortedError())
    assert tm.state is TransactionState.ABORTING_TRANSACTION
    await tm.end_transaction(commit=False)
    assert [r.committed for _, _, r in client.sent(ApiKey.END_TXN)] == [False]
    # the sequence gap: the same producer id with its epoch bumped (KIP-360)
    bump = client.sent(ApiKey.INIT_PRODUCER_ID)[-1][2]
    assert (bump.producer_id, bump.producer_epoch) == (7, 0)
    assert (tm.producer_id, tm.producer_epoch) == (7, 1)
    assert tm.next_sequence(("t", 0), 1) == 0
    assert tm.state is TransactionState.READY


async def test_a_fencing_produce_error_fails_the_records_with_producer_fenced() -> None:
    tm = await ready(ScriptedClient())
    tm.begin_transaction()
    raised = tm.handle_failed_batch(batch(0), KafkaError(E.invalid_producer_epoch))
    assert isinstance(raised, ProducerFencedError)
    assert tm.state is TransactionState.FATAL_ERROR


async def test_end_txn_timing_out_leaves_commit_to_be_called_again() -> None:
    client = ScriptedClient(
        add_partitions_to_txn=[add_partitions(E.none)],
        end_txn=[code(E.concurrent_transactions)] * 1000,
    )
    tm = await ready(client)
    tm.max_block = 0.05
    tm._backoff = ExponentialBackoff(5)
    tm.begin_transaction()
    tm.maybe_add_partition(("t", 0))
    await tm.add_partitions()
    tm.begin_commit()
    with pytest.raises(TimeoutError):
        await tm.end_transaction(commit=True)
    assert tm.state is TransactionState.COMMITTING_TRANSACTION
    client.script[ApiKey.END_TXN] = [code(E.none)]
    tm.begin_commit()
    await tm.end_transaction(commit=True)
    assert tm.state is TransactionState.READY


# send_offsets_to_transaction -------------------------------------------------------------------
async def test_offsets_go_to_the_transaction_then_to_the_group_coordinator() -> None:
    client = ScriptedClient(
        add_offsets_to_txn=[code(E.coordinator_load_in_progress), code(E.none)],
        txn_offset_commit=[offsets(E.none, E.unknown_topic_or_partition), offsets(E.none, E.none)],
        end_txn=[code(E.none)],
    )
    tm = await ready(client)
    tm.begin_transaction()
    member = ConsumerGroupMetadata("g", generation_id=4, member_id="m-1", group_instance_id="i")
    await tm.send_offsets({("in", 0): 10, ("in", 1): OffsetAndMetadata(20, "meta", 3)}, member)
    add = client.sent(ApiKey.ADD_OFFSETS_TO_TXN)[-1]
    assert add[0] == 1 and add[2].group_id == "g"
    node, version, commit = client.sent(ApiKey.TXN_OFFSET_COMMIT)[-1]
    assert node == 2  # the group's coordinator
    assert (CoordinatorType.GROUP, "g") in client.lookups
    assert version >= 3
    assert (commit.generation_id, commit.member_id, commit.group_instance_id) == (4, "m-1", "i")
    assert (commit.producer_id, commit.producer_epoch, commit.transactional_id) == (7, 0, "tid")
    (topic,) = commit.topics
    assert [
        (p.partition_index, p.committed_offset, p.committed_metadata, p.committed_leader_epoch)
        for p in topic.partitions
    ] == [(0, 10, "", -1), (1, 20, "meta", 3)]
    tm.begin_commit()
    await tm.end_transaction(commit=True)  # AddOffsetsToTxn started the transaction
    assert client.sent(ApiKey.END_TXN)


@pytest.mark.parametrize(
    "error", [E.unknown_member_id, E.illegal_generation, E.group_authorization_failed]
)
async def test_a_stale_member_makes_the_transaction_abortable(error: ErrorCode) -> None:
    client = ScriptedClient(add_offsets_to_txn=[code(E.none)], txn_offset_commit=[offsets(error)])
    tm = await ready(client)
    tm.begin_transaction()
    with pytest.raises(AbortableTransactionError) as info:
        await tm.send_offsets({("in", 0): 1}, ConsumerGroupMetadata("g", 1, "gone"))
    assert info.value.code == error
    assert tm.state is TransactionState.ABORTABLE_ERROR


# settings ----------------------------------------------------------------------------------------
def test_settings_by_kafka_keys() -> None:
    producer = read_settings(
        {
            "transactional.id": "app-1",
            "transaction.timeout.ms": "15000",
            "max.block.ms": "2000",
        },
        PRODUCER_SETTINGS,
    )
    assert producer == {
        "transactional_id": "app-1",
        "transaction_timeout_ms": 15000,
        "max_block_ms": 2000,
    }
    for text, level in (("read_committed", 1), ("READ_UNCOMMITTED", 0), ("1", 1)):
        assert read_settings({"isolation.level": text}, CONSUMER_SETTINGS) == {
            "isolation_level": level
        }
    with pytest.raises(ValueError, match=r"isolation\.level"):
        read_settings({"isolation.level": "serializable"}, CONSUMER_SETTINGS)
