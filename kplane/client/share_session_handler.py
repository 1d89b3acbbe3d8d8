"""ShareSessionHandler: a share consumer's share session with one broker (KIP-932), and the
acknowledgements waiting to go there, as Kafka's client keeps them.

A session is opened by a ShareFetch at epoch 0 naming every partition wanted from that
broker; it carries no acknowledgements (the broker refuses them there). Each later request
names the next epoch and only what changed: the partitions added, those with
acknowledgements, and (``forgotten``) those no longer wanted. A ShareAcknowledge moves the
epoch on as a ShareFetch does; epoch -1 closes the session, the records it still holds going
back to the group. After a session error (SHARE_SESSION_NOT_FOUND,
INVALID_SHARE_SESSION_EPOCH) or a failed request the session is opened again at epoch 0; the
acknowledgements it had not sent are dropped, failed, since the broker released their
records with the old session.

Acknowledgements are kept per partition by offset and sent as batches of consecutive
offsets: one type for a batch of one kind, else one type per offset (Kafka's wire form).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kplane.protocol.errors import ErrorCode

TopicPartition = tuple[str, int]

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_MAX_EPOCH = 2**31 - 1


class AcknowledgeType(enum.IntEnum):
    """How a delivered record is settled (ShareFetch/ShareAcknowledge ``AcknowledgeTypes``)."""

    GAP = 0
    """An offset in an acquired range that holds no record (a transaction marker)."""
    ACCEPT = 1
    """Processed: never delivered again."""
    RELEASE = 2
    """Not processed: delivered again (to any member), its delivery count one higher."""
    REJECT = 3
    """Unprocessable: never delivered again."""


@dataclass(frozen=True, slots=True)
class AcknowledgementBatch:
    """Consecutive offsets ``first_offset``..``last_offset`` with one type for all, or one
    per offset."""

    first_offset: int
    last_offset: int
    types: tuple[int, ...]


def acknowledgement_batches(acks: Mapping[int, AcknowledgeType]) -> list[AcknowledgementBatch]:
    """``{offset: type}`` as batches of consecutive offsets."""
    batches: list[AcknowledgementBatch] = []
    run: list[tuple[int, AcknowledgeType]] = []

    def flush() -> None:
        kinds = tuple(int(k) for _, k in run)
        types = kinds[:1] if len(set(kinds)) == 1 else kinds
        batches.append(AcknowledgementBatch(run[0][0], run[-1][0], types))

    for offset, kind in sorted(acks.items()):
        if run and offset != run[-1][0] + 1:
            flush()
            run = []
        run.append((offset, kind))
    if run:
        flush()
    return batches


@dataclass(frozen=True, slots=True)
class ShareRequestData:
    """What one ShareFetch or ShareAcknowledge to the session's broker names."""

    epoch: int
    partitions: dict[TopicPartition, list[AcknowledgementBatch]]
    """Partitions to name, each with its acknowledgements (maybe none)."""
    forgotten: tuple[TopicPartition, ...] = ()
    acknowledged: dict[TopicPartition, dict[int, AcknowledgeType]] = field(default_factory=dict)
    """The acknowledgements sent, by offset, for their results."""
    wanted: frozenset[TopicPartition] = frozenset()
    """The session's partitions once the request succeeds (a ShareFetch's)."""


class ShareSessionHandler:
    """One broker's share session and the acknowledgements waiting to go there."""

    def __init__(self) -> None:
        self.epoch = INITIAL_EPOCH
        self.partitions: frozenset[TopicPartition] = frozenset()
        """The partitions the broker's session holds."""
        self.generation = 0
        """Counts the sessions opened; a record is acknowledged in the one it came from."""
        self._pending: dict[TopicPartition, dict[int, AcknowledgeType]] = {}

    @property
    def open(self) -> bool:
        """A session is open on the broker (a request at epoch 0 succeeded)."""
        return self.epoch != INITIAL_EPOCH

    def acknowledge(
        self, tp: TopicPartition, offset: int, kind: AcknowledgeType, generation: int
    ) -> bool:
        """Queue ``kind`` for the record at ``offset`` acquired in session ``generation``
        (the last one queued for it counts); False when that session is gone (the broker
        gave the record back with it)."""
        if generation != self.generation:
            return False
        self._pending.setdefault(tp, {})[offset] = kind
        return True

    def pending(self) -> int:
        """How many acknowledgements wait."""
        return sum(map(len, self._pending.values()))

    def fetch_request(self, wanted: Iterable[TopicPartition]) -> ShareRequestData | None:
        """The next ShareFetch for ``wanted``, taking the waiting acknowledgements; None when
        there is nothing to ask (no session, nothing wanted)."""
        want = frozenset(wanted)
        if not self.open:
            if not want:
                return None
            return ShareRequestData(self.epoch, {tp: [] for tp in sorted(want)}, wanted=want)
        acked, self._pending = self._pending, {}
        named: dict[TopicPartition, list[AcknowledgementBatch]] = {
            tp: [] for tp in sorted(want - self.partitions)
        }
        for tp, acks in acked.items():
            named[tp] = acknowledgement_batches(acks)
        # A partition acknowledged but not wanted is named for its acknowledgements and
        # forgotten in the same request (the broker settles, then forgets).
        forgotten = tuple(sorted((self.partitions | acked.keys()) - want))
        return ShareRequestData(self.epoch, named, forgotten, acked, want)

    def acknowledge_request(self, final: bool = False) -> ShareRequestData | None:
        """The next ShareAcknowledge, taking the waiting acknowledgements (``final``: the
        one that closes the session); None when there is no session, or nothing to send
        and not closing."""
        if not self.open or (not self._pending and not final):
            return None
        acked, self._pending = self._pending, {}
        return ShareRequestData(
            FINAL_EPOCH if final else self.epoch,
            {tp: acknowledgement_batches(acks) for tp, acks in acked.items()},
            acknowledged=acked,
            wanted=self.partitions,
        )

    def completed(self, request: ShareRequestData) -> None:
        """``request`` succeeded: the session holds its partitions at the next epoch."""
        if request.epoch == FINAL_EPOCH:
            self.reset()
            return
        self.partitions = request.wanted
        self.epoch = 1 if self.epoch >= _MAX_EPOCH else self.epoch + 1

    def failed(self) -> dict[TopicPartition, dict[int, AcknowledgeType]]:
        """The request failed or the session is gone: start again at epoch 0; returns the
        acknowledgements dropped with it (their records went back with the session)."""
        dropped, self._pending = self._pending, {}
        self.reset()
        return dropped

    def reset(self) -> None:
        """The session is gone: the next request opens one at epoch 0."""
        self.epoch = INITIAL_EPOCH
        self.partitions = frozenset()
        self.generation += 1


SESSION_ERRORS = (ErrorCode.share_session_not_found, ErrorCode.invalid_share_session_epoch)
"""Errors after which the session is opened again at epoch 0."""
