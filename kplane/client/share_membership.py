"""ShareMembership: a share consumer's membership of a KIP-932 share group, as Kafka's
ShareMembershipManager keeps it.

A task heartbeats to the group's coordinator (ShareGroupHeartbeat) every
``heartbeat_interval`` the broker answers: the first heartbeat at epoch 0 names the
subscription (and the member id the client chose), later ones only the epoch. The
assignment the broker answers is taken as it is: members of a share group share partitions
and hold no offsets, so there is nothing to revoke or commit first. A fenced member
(FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID) drops its assignment and joins again at epoch 0; a
moved coordinator or a failed request is retried after ``retry.backoff.ms``; an error that
retrying cannot cure (e.g. GROUP_AUTHORIZATION_FAILED) stops the heartbeats and is raised
by the consumer's next call. On close the member leaves (epoch -1).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from typing import Any

import structlog

from kplane.client.group_membership import (
    COORDINATOR_MOVED,
    FENCED,
    LEAVE_GROUP,
    GroupMember,
    TopicPartition,
    named_assignment,
)
from kplane.client.kafka_client import CoordinatorType, KafkaClient
from kplane.common.network.connection import BrokerConnectionError
from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode, KafkaError

log = structlog.get_logger(__name__)


class ShareMembership(GroupMember):
    """One member of share group ``group_id``; ``subscribe`` starts it, ``close`` leaves."""

    def __init__(
        self,
        client: KafkaClient,
        group_id: str,
        *,
        rack_id: str | None = None,
        retry_backoff_ms: int = 100,
    ) -> None:
        super().__init__(client, group_id, retry_backoff_ms)
        self.rack_id = rack_id
        self.assigned: frozenset[TopicPartition] = frozenset()
        self.error: KafkaError | None = None
        """What stopped the heartbeats, raised by the consumer."""

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                next_ms = await self._heartbeat()
            except KafkaError as exc:
                if not exc.code.retriable and exc.code not in COORDINATOR_MOVED:
                    log.warning("share group heartbeat failed", group=self.group_id, error=str(exc))
                    self.error = exc
                    self.assigned = frozenset()
                    return
                next_ms = self._retry(exc)
            except (BrokerConnectionError, TimeoutError, LookupError) as exc:
                next_ms = self._retry(exc)
            heartbeat_at = loop.time() + next_ms / 1000.0
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(0.0, heartbeat_at - loop.time()))
            self._wake.clear()

    def _retry(self, exc: BaseException) -> float:
        log.info("share group heartbeat failed, retrying", group=self.group_id, error=str(exc))
        self._coordinator = None
        self._full = True
        return self.retry_backoff_ms

    async def _send(self, epoch: int, full: bool) -> Any:
        if self._coordinator is None:
            self._coordinator = await self.client.find_coordinator(
                CoordinatorType.GROUP, self.group_id
            )

        def build(version: int) -> Any:
            return api.make(
                api.request_class(ApiKey.SHARE_GROUP_HEARTBEAT, version),
                group_id=self.group_id,
                member_id=self.member_id,
                member_epoch=epoch,
                rack_id=self.rack_id if full else None,
                subscribed_topic_names=self.topics if full else None,
            )

        return await self.client.request(self._coordinator, ApiKey.SHARE_GROUP_HEARTBEAT, build)

    async def _heartbeat(self) -> float:
        """One heartbeat; the milliseconds until the next."""
        response = await self._send(self.member_epoch, self._full)
        code = ErrorCode(response.error_code)
        if code in FENCED:
            log.info("fenced from the share group, joining again", group=self.group_id)
            self.assigned = frozenset()
            self.member_epoch = 0
            self._full = True
            return 0
        if code is not ErrorCode.none:
            raise KafkaError(code, response.error_message or code.name)
        self._full = False
        self.member_epoch = int(response.member_epoch)
        if response.assignment is not None:
            self.assigned = await named_assignment(
                self.client, self.topics, response.assignment.topic_partitions
            )
            log.info(
                "share group assignment",
                group=self.group_id,
                member_epoch=self.member_epoch,
                assigned=sorted(self.assigned),
            )
        interval: float = response.heartbeat_interval / datetime.timedelta(milliseconds=1)
        return interval

    async def close(self) -> None:
        """Stop heartbeating and leave the group (epoch -1)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self.assigned = frozenset()
        if self.member_epoch <= 0:
            return
        try:
            await self._send(LEAVE_GROUP, False)
        except (KafkaError, BrokerConnectionError, TimeoutError, LookupError) as exc:
            log.info("leaving the share group failed", group=self.group_id, error=str(exc))
        self.member_epoch = LEAVE_GROUP
