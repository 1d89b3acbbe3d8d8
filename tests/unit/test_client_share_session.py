"""The share consumer's session bookkeeping (kplane/client/share_session_handler.py): epochs,
incremental requests, forgotten partitions, acknowledgement batches and what a lost session
drops."""

from __future__ import annotations

from kplane.client.share_session_handler import (
    FINAL_EPOCH,
    AcknowledgementBatch,
    AcknowledgeType,
    ShareSessionHandler,
    acknowledgement_batches,
)

A = AcknowledgeType
T0, T1, U0 = ("t", 0), ("t", 1), ("u", 0)


def test_batches_are_runs_of_consecutive_offsets_one_type_when_all_alike() -> None:
    acks = {5: A.ACCEPT, 6: A.ACCEPT, 7: A.ACCEPT, 9: A.RELEASE, 10: A.REJECT, 12: A.GAP}
    assert acknowledgement_batches(acks) == [
        AcknowledgementBatch(5, 7, (1,)),
        AcknowledgementBatch(9, 10, (2, 3)),
        AcknowledgementBatch(12, 12, (0,)),
    ]
    assert acknowledgement_batches({}) == []


def test_the_first_fetch_opens_the_session_with_every_partition_and_no_acknowledgements() -> None:
    handler = ShareSessionHandler()
    assert handler.fetch_request([]) is None, "nothing wanted, no session: nothing to send"
    first = handler.fetch_request([T1, T0])
    assert first is not None
    assert first.epoch == 0
    assert first.partitions == {T0: [], T1: []}
    assert first.forgotten == ()
    handler.completed(first)
    assert (handler.epoch, handler.partitions) == (1, frozenset({T0, T1}))


def test_incremental_fetches_name_only_what_changed() -> None:
    handler = ShareSessionHandler()
    handler.completed(handler.fetch_request([T0, T1]))  # type: ignore[arg-type]
    quiet = handler.fetch_request([T0, T1])
    assert quiet is not None
    assert (quiet.epoch, quiet.partitions, quiet.forgotten) == (1, {}, ())
    handler.completed(quiet)
    generation = handler.generation
    assert handler.acknowledge(T0, 3, A.ACCEPT, generation)
    assert handler.acknowledge(T0, 4, A.RELEASE, generation)
    assert handler.acknowledge(T0, 4, A.REJECT, generation), "the last type queued counts"
    assert handler.pending() == 2
    changed = handler.fetch_request([T0, U0])
    assert changed is not None
    assert changed.epoch == 2
    assert changed.partitions == {U0: [], T0: [AcknowledgementBatch(3, 4, (1, 3))]}
    assert changed.forgotten == (T1,)
    assert changed.acknowledged == {T0: {3: A.ACCEPT, 4: A.REJECT}}
    assert handler.pending() == 0, "taken by the request"
    handler.completed(changed)
    assert (handler.epoch, handler.partitions) == (3, frozenset({T0, U0}))


def test_acknowledgements_of_a_partition_no_longer_wanted_go_with_its_forgetting() -> None:
    handler = ShareSessionHandler()
    handler.completed(handler.fetch_request([T0, T1]))  # type: ignore[arg-type]
    handler.acknowledge(T1, 8, A.ACCEPT, handler.generation)
    request = handler.fetch_request([T0])
    assert request is not None
    assert request.partitions == {T1: [AcknowledgementBatch(8, 8, (1,))]}
    assert request.forgotten == (T1,)
    handler.completed(request)
    assert handler.partitions == frozenset({T0})
    # a record of T1 delivered before it was forgotten is acknowledged after: named for
    # its acknowledgement and forgotten again, so the broker's session does not take it back
    handler.acknowledge(T1, 9, A.RELEASE, handler.generation)
    later = handler.fetch_request([T0])
    assert later is not None
    assert later.partitions == {T1: [AcknowledgementBatch(9, 9, (2,))]}
    assert later.forgotten == (T1,)


def test_share_acknowledge_moves_the_epoch_and_the_final_one_closes() -> None:
    handler = ShareSessionHandler()
    assert handler.acknowledge_request() is None, "no session: nothing to acknowledge in"
    handler.completed(handler.fetch_request([T0]))  # type: ignore[arg-type]
    assert handler.acknowledge_request() is None, "nothing waiting"
    handler.acknowledge(T0, 0, A.ACCEPT, handler.generation)
    ack = handler.acknowledge_request()
    assert ack is not None
    assert (ack.epoch, ack.partitions) == (1, {T0: [AcknowledgementBatch(0, 0, (1,))]})
    handler.completed(ack)
    assert (handler.epoch, handler.partitions) == (2, frozenset({T0}))
    final = handler.acknowledge_request(final=True)
    assert final is not None
    assert (final.epoch, final.partitions) == (FINAL_EPOCH, {})
    handler.completed(final)
    assert not handler.open
    assert handler.fetch_request([T0]).epoch == 0  # type: ignore[union-attr]


def test_a_lost_session_drops_its_acknowledgements_and_refuses_its_records() -> None:
    handler = ShareSessionHandler()
    handler.completed(handler.fetch_request([T0]))  # type: ignore[arg-type]
    old = handler.generation
    handler.acknowledge(T0, 1, A.ACCEPT, old)
    assert handler.failed() == {T0: {1: A.ACCEPT}}
    assert (handler.epoch, handler.partitions, handler.pending()) == (0, frozenset(), 0)
    assert not handler.acknowledge(T0, 2, A.ACCEPT, old), "its session is gone"
    reopened = handler.fetch_request([T0])
    assert reopened is not None
    assert (reopened.epoch, reopened.partitions) == (0, {T0: []})


def test_the_epoch_wraps_to_one() -> None:
    handler = ShareSessionHandler()
    handler.completed(handler.fetch_request([T0]))  # type: ignore[arg-type]
    handler.epoch = 2**31 - 1
    handler.completed(handler.fetch_request([T0]))  # type: ignore[arg-type]
    assert handler.epoch == 1
