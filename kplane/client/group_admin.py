"""GroupAdmin: consumer-group administration (list, describe, committed offsets, reset,
delete), each request sent to the group's coordinator as Kafka's AdminClient does.

Committed offsets are altered the way Kafka's tools do it for an inactive group: an
OffsetCommit with generation -1 and no member id, which the coordinator accepts only
while the group has no members.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kplane.client.admin import Admin
from kplane.client.kafka_client import CoordinatorType
from kplane.common.network.connection import UnsupportedApi
from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode, KafkaError

_OFFSET_FETCH_MAX_VERSION = 7  # one group per request, topics by name
_OFFSET_COMMIT_MAX_VERSION = 8  # topics by name


@dataclass(frozen=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True)
class GroupMember:
    member_id: str
    client_id: str
    host: str
    assignment: tuple[tuple[str, int], ...]
    """Partitions of a consumer-protocol member's assignment."""
    instance_id: str | None = None
    member_epoch: int | None = None
    """A KIP-848 member's epoch (None in a classic group)."""
    target_assignment: tuple[tuple[str, int], ...] = ()
    """What a KIP-848 member reconciles towards."""


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[GroupMember, ...]
    coordinator: int
    group_type: str = "classic"
    group_epoch: int | None = None
    """A KIP-848 group's epoch, and that of its target assignment."""
    assignment_epoch: int | None = None


def consumer_assignment(data: bytes) -> tuple[tuple[str, int], ...]:
    """The partitions of a consumer protocol ``Assignment`` (version, [topic, [partition]],
    user data); () when it cannot be read."""
    try:
        pos = 2
        (count,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out: list[tuple[str, int]] = []
        for _ in range(max(count, 0)):
            (length,) = struct.unpack_from(">h", data, pos)
            pos += 2
            topic = data[pos : pos + length].decode()
            pos += length
            (partitions,) = struct.unpack_from(">i", data, pos)
            pos += 4
            for _ in range(max(partitions, 0)):
                (partition,) = struct.unpack_from(">i", data, pos)
                pos += 4
                out.append((topic, partition))
        return tuple(sorted(out))
    except (struct.error, UnicodeDecodeError):
        return ()


def _partitions(assignment: Any) -> tuple[tuple[str, int], ...]:
    return tuple(
        sorted(
            (str(t.topic_name), int(p)) for t in assignment.topic_partitions for p in t.partitions
        )
    )


def _consumer_group(described: Any, coordinator: int) -> GroupDescription:
    """A ConsumerGroupDescribe answer as a GroupDescription."""
    return GroupDescription(
        str(described.group_id),
        described.group_state,
        "consumer",
        described.assignor_name,
        tuple(
            GroupMember(
                m.member_id,
                m.client_id,
                m.client_host,
                _partitions(m.assignment),
                m.instance_id,
                int(m.member_epoch),
                _partitions(m.target_assignment),
            )
            for m in described.members
        ),
        coordinator,
        "consumer",
        int(described.group_epoch),
        int(described.assignment_epoch),
    )


def _check(code: ErrorCode, what: str) -> None:
    if code != ErrorCode.none:
        raise KafkaError(code, f"{what}: {code.name}")


class GroupAdmin:
    """Consumer groups, through an :class:`Admin`'s client."""

    def __init__(self, admin: Admin) -> None:
        self.admin = admin
        self.client = admin.client

    async def _coordinator(self, group: str) -> int:
        return await self.client.find_coordinator(CoordinatorType.GROUP, group)

    async def list_groups(self) -> list[ListedGroup]:
        """Every group of every broker (ListGroups is answered per coordinator)."""
        cluster = await self.client.refresh_metadata()

        async def one(node: int) -> list[ListedGroup]:
            response = await self.client.request(
                node,
                ApiKey.LIST_GROUPS,
                lambda v: api.make(api.request_class(ApiKey.LIST_GROUPS, v)),
            )
            _check(response.error_code, f"ListGroups at broker {node}")
            return [
                ListedGroup(str(g.group_id), g.protocol_type, getattr(g, "group_state", "") or "")
                for g in response.groups
            ]

        found = await asyncio.gather(*(one(node) for node in sorted(cluster.brokers)))
        return sorted({g for groups in found for g in groups}, key=lambda g: g.group_id)

    async def describe_group(self, group: str) -> GroupDescription:
        """State, protocol and members of ``group`` (state ``Dead`` when it does not exist):
        ConsumerGroupDescribe first, as Kafka's admin client does, then DescribeGroups for a
        classic group or a broker without KIP-848."""
        node = await self._coordinator(group)
        try:
            response = await self.client.request(
                node,
                ApiKey.CONSUMER_GROUP_DESCRIBE,
                lambda v: api.make(
                    api.request_class(ApiKey.CONSUMER_GROUP_DESCRIBE, v),
                    group_ids=(group,),
                    include_authorized_operations=False,
                ),
            )
        except UnsupportedApi:
            response = None
        if response is not None:
            (described,) = response.groups
            if described.error_code != ErrorCode.group_id_not_found:
                _check(described.error_code, f"ConsumerGroupDescribe {group!r}")
                return _consumer_group(described, node)
        response = await self.client.request(
            node,
            ApiKey.DESCRIBE_GROUPS,
            lambda v: api.make(
                api.request_class(ApiKey.DESCRIBE_GROUPS, v),
                groups=(group,),
                include_authorized_operations=False,
            ),
        )
        (found,) = response.groups
        _check(found.error_code, f"DescribeGroups {group!r}")
        consumer = found.protocol_type == "consumer"
        members = tuple(
            GroupMember(
                m.member_id,
                m.client_id,
                m.client_host,
                consumer_assignment(bytes(m.member_assignment)) if consumer else (),
                getattr(m, "group_instance_id", None),
            )
            for m in found.members
        )
        return GroupDescription(
            group, found.group_state, found.protocol_type, found.protocol_data, members, node
        )

    async def committed_offsets(self, group: str) -> dict[tuple[str, int], int]:
        """Every committed offset of ``group``: (topic, partition) -> offset."""
        node = await self._coordinator(group)

        def build(version: int) -> Any:
            return api.make(
                api.request_class(ApiKey.OFFSET_FETCH, version),
                group_id=group,
                topics=None,
                require_stable=False,
            )

        response = await self.client.request(
            node, ApiKey.OFFSET_FETCH, build, max_version=_OFFSET_FETCH_MAX_VERSION
        )
        _check(response.error_code, f"OffsetFetch {group!r}")
        return {
            (str(t.name), int(p.partition_index)): int(p.committed_offset)
            for t in response.topics
            for p in t.partitions
            if p.error_code == ErrorCode.none and p.committed_offset >= 0
        }

    async def alter_offsets(
        self, group: str, offsets: Mapping[tuple[str, int], int]
    ) -> dict[tuple[str, int], KafkaError | None]:
        """Commit ``offsets`` for ``group`` as an admin does (generation -1, no member): the
        coordinator refuses it while the group has members."""
        node = await self._coordinator(group)
        topics: dict[str, list[tuple[int, int]]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            topics.setdefault(topic, []).append((partition, offset))

        def build(version: int) -> Any:
            module = api.request_module(ApiKey.OFFSET_COMMIT, version)
            return api.make(
                api.request_class(ApiKey.OFFSET_COMMIT, version),
                group_id=group,
                generation_id_or_member_epoch=-1,
                member_id="",
                group_instance_id=None,
                topics=tuple(
                    api.make(
                        module.OffsetCommitRequestTopic,
                        name=topic,
                        partitions=tuple(
                            api.make(
                                module.OffsetCommitRequestPartition,
                                partition_index=p,
                                committed_offset=o,
                                committed_leader_epoch=-1,
                                committed_metadata=None,
                            )
                            for p, o in parts
                        ),
                    )
                    for topic, parts in topics.items()
                ),
            )

        response = await self.client.request(
            node, ApiKey.OFFSET_COMMIT, build, max_version=_OFFSET_COMMIT_MAX_VERSION
        )
        return {
            (str(t.name), int(p.partition_index)): (
                None if p.error_code == ErrorCode.none else KafkaError(p.error_code)
            )
            for t in response.topics
            for p in t.partitions
        }

    async def delete_groups(self, groups: Iterable[str]) -> dict[str, KafkaError | None]:
        """Delete each group at its coordinator; group -> None or its error."""
        results: dict[str, KafkaError | None] = {}
        for group in groups:
            node = await self._coordinator(group)

            def build(version: int, group: str = group) -> Any:
                return api.make(
                    api.request_class(ApiKey.DELETE_GROUPS, version), groups_names=(group,)
                )

            response = await self.client.request(node, ApiKey.DELETE_GROUPS, build)
            for r in response.results:
                code = r.error_code
                results[str(r.group_id)] = None if code == ErrorCode.none else KafkaError(code)
        return results

    async def delete_offsets(
        self, group: str, partitions: Iterable[tuple[str, int]]
    ) -> tuple[KafkaError | None, dict[tuple[str, int], KafkaError | None]]:
        """OffsetDelete at the group's coordinator: the group-level error and each
        partition's (the coordinator refuses partitions the group is subscribed to)."""
        node = await self._coordinator(group)
        topics: dict[str, list[int]] = {}
        for topic, partition in sorted(set(partitions)):
            topics.setdefault(topic, []).append(partition)

        def build(version: int) -> Any:
            module = api.request_module(ApiKey.OFFSET_DELETE, version)
            return api.make(
                api.request_class(ApiKey.OFFSET_DELETE, version),
                group_id=group,
                topics=tuple(
                    api.make(
                        module.OffsetDeleteRequestTopic,
                        name=topic,
                        partitions=tuple(
                            api.make(module.OffsetDeleteRequestPartition, partition_index=p)
                            for p in parts
                        ),
                    )
                    for topic, parts in topics.items()
                ),
            )

        response = await self.client.request(node, ApiKey.OFFSET_DELETE, build)
        top = None if response.error_code == ErrorCode.none else KafkaError(response.error_code)
        return top, {
            (str(t.name), int(p.partition_index)): (
                None if p.error_code == ErrorCode.none else KafkaError(p.error_code)
            )
            for t in response.topics
            for p in t.partitions
        }
