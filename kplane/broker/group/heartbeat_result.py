"""What a ConsumerGroupHeartbeat (KIP-848) or ShareGroupHeartbeat (KIP-932) answers."""

from __future__ import annotations

from dataclasses import dataclass

from kplane.broker.group.modern_group import Assignment
from kplane.protocol.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None
    """The member's whole assignment, when it changed or the request was a full one."""
