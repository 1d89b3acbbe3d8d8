"""ShareSessionCache: the share sessions of this broker (KIP-932), Kafka's ShareSessionCache.

A member opens a session with epoch 0 (a full request naming its partitions), then each
request names the next epoch and only the partitions it adds or forgets; epoch -1 closes
it. A missing session is SHARE_SESSION_NOT_FOUND, a wrong epoch
INVALID_SHARE_SESSION_EPOCH. The cache holds at most ``group.share.max.share.sessions``
(2,000) sessions; when full, a new session is refused with SHARE_SESSION_LIMIT_REACHED and
none is evicted (Kafka 4.1's ShareSessionCache: an evicted session's member would hold its
records until their locks expired). A session goes only when its member closes it (epoch
-1), its member is fenced, or the connection that opened it closes (Kafka 4.1's
connection-disconnect listener); whoever removes it gives its member's records back.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from kplane.broker.log.partition import TopicPartition
from kplane.protocol.errors import ErrorCode, KafkaError

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_SHARE_SESSIONS = 2000
"""Kafka's default group.share.max.share.sessions."""


@dataclass(eq=False)
class ShareSession:
    group_id: str
    member_id: str
    epoch: int = 1
    """The epoch the next request must name."""
    partitions: dict[TopicPartition, None] = field(default_factory=dict)
    """The session's partitions, in the order they were added."""
    connection_id: str = ""
    """The connection that opened the session."""


class ShareSessionCache:
    """Sessions by (group id, member id), at most ``max_sessions`` of them."""

    def __init__(self, max_sessions: int = MAX_SHARE_SESSIONS) -> None:
        self._sessions: dict[tuple[str, str], ShareSession] = {}
        self._by_connection: dict[str, set[tuple[str, str]]] = {}
        """The keys of the sessions each connection opened, until it closes."""
        self._lock = threading.Lock()
        self.max_sessions = max_sessions

    def open(
        self,
        group_id: str,
        member_id: str,
        partitions: Iterable[TopicPartition],
        connection_id: str = "",
    ) -> ShareSession:
        """A new session (epoch 0) opened on ``connection_id``, replacing the member's old
        one (its records stay the member's); SHARE_SESSION_LIMIT_REACHED when the cache
        is full."""
        key = (group_id, member_id)
        with self._lock:
            self._sessions.pop(key, None)
            if len(self._sessions) >= self.max_sessions:
                raise KafkaError(
                    ErrorCode.share_session_limit_reached,
                    f"The limit of {self.max_sessions} share sessions has been reached.",
                )
            session = self._sessions[key] = ShareSession(
                group_id,
                member_id,
                partitions=dict.fromkeys(partitions),
                connection_id=connection_id,
            )
            self._by_connection.setdefault(connection_id, set()).add(key)
            return session

    def watches(self, connection_id: str) -> bool:
        """Whether a session was opened on ``connection_id`` since it was last closed
        (its close is already looked out for)."""
        with self._lock:
            return connection_id in self._by_connection

    def connection_closed(self, connection_id: str) -> list[ShareSession]:
        """``connection_id`` closed: remove the sessions opened on it still here (not
        closed or opened again elsewhere since) and return them."""
        with self._lock:
            keys = self._by_connection.pop(connection_id, ())
            gone = [
                self._sessions.pop(key)
                for key in keys
                if key in self._sessions and self._sessions[key].connection_id == connection_id
            ]
            return gone

    def next(self, group_id: str, member_id: str, epoch: int) -> ShareSession:
        """The session a request at ``epoch`` (> 0) continues, its epoch moved on."""
        with self._lock:
            session = self._sessions.get((group_id, member_id))
            if session is None:
                raise KafkaError(
                    ErrorCode.share_session_not_found,
                    f"Share session for member {member_id} of group {group_id} not found.",
                )
            if epoch != session.epoch:
                raise KafkaError(
                    ErrorCode.invalid_share_session_epoch,
                    f"Share session epoch {epoch} is not the expected {session.epoch}.",
                )
            session.epoch += 1
            return session

    def close(self, group_id: str, member_id: str) -> ShareSession | None:
        """Remove the member's session (None: it had none)."""
        with self._lock:
            return self._sessions.pop((group_id, member_id), None)

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        with self._lock:
            return self._sessions.get((group_id, member_id))

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)
