"""KIP-848's online migration of a group with members between the two protocols: the
conversions themselves (Kafka's ``ConsumerGroup.fromClassicGroup`` and
``ClassicGroup.fromConsumerGroup``). The consumer protocol decides when they happen
(``group.consumer.migration.policy``) and registers the result.
"""

from __future__ import annotations

import uuid

from kplane.broker.group.classic_group import (
    CONSUMER_PROTOCOL_TYPE,
    ClassicGroup,
    ClassicGroupMember,
    ClassicGroupState,
)
from kplane.broker.group.consumer_group import (
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    assignment_of,
)
from kplane.broker.group.embedded_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    protocol_version,
)
from kplane.broker.group.group import now_ms
from kplane.broker.metadata.cache import MetadataSnapshot


def uses_consumer_protocol(group: ClassicGroup) -> bool:
    """Whether a classic group's members embed the consumer protocol (protocol type
    ``consumer``): only such a group can become a consumer group."""
    return group.protocol_type == CONSUMER_PROTOCOL_TYPE


def consumer_group_from_classic(group: ClassicGroup, snapshot: MetadataSnapshot) -> ConsumerGroup:
    """The consumer group a classic group becomes: its generation is the group and the
    assignment epoch, each member keeps its subscription and its last assignment (which
    is also its target), Stable at that epoch, and remembers its classic session timeout
    and protocols. The offsets come along. MalformedProtocol when a member's embedded
    bytes do not parse."""
    ids = {name: info.topic_id for name, info in snapshot.topics.items()}
    generation = group.generation_id
    converted = ConsumerGroup(
        group.group_id,
        state_timestamp_ms=now_ms(),
        group_epoch=generation,
        assignment_epoch=generation,
        offsets=group.offsets,
        pending_txn_offsets=group.pending_txn_offsets,
    )
    for member in group.all_members():
        protocol = group.protocol_name or member.protocols[0][0]
        subscription = decode_subscription(member.metadata(protocol))
        assigned = assignment_of(
            (ids[topic], (partition,))
            for topic, partition in decode_assignment(member.assignment)
            if topic in ids
        )
        converted.target[member.member_id] = assigned
        converted.update_member(
            ConsumerGroupMember(
                member.member_id,
                member_epoch=generation,
                previous_member_epoch=generation,
                state=MemberState.STABLE,
                instance_id=member.group_instance_id,
                rack_id=subscription.rack_id,
                client_id=member.client_id,
                client_host=member.client_host,
                rebalance_timeout_ms=member.rebalance_timeout_ms,
                subscribed_topic_names=subscription.topics,
                assigned=assigned,
                classic=ClassicMemberMetadata(member.session_timeout_ms, tuple(member.protocols)),
            )
        )
    return converted


def classic_group_from_consumer(
    group: ConsumerGroup, leaving_member_id: str, snapshot: MetadataSnapshot
) -> ClassicGroup:
    """The classic group a consumer group becomes when ``leaving_member_id``, its last
    consumer-protocol member, goes: Stable at the group epoch, its classic members each
    with its target assignment encoded in the version of its subscription; the offsets
    come along."""
    names: dict[uuid.UUID, str] = {info.topic_id: name for name, info in snapshot.topics.items()}
    converted = ClassicGroup(
        group.group_id,
        state=ClassicGroupState.STABLE,
        state_timestamp_ms=now_ms(),
        protocol_type=CONSUMER_PROTOCOL_TYPE,
        generation_id=group.group_epoch,
        offsets=group.offsets,
        pending_txn_offsets=group.pending_txn_offsets,
    )
    for member in group.members.values():
        if member.member_id == leaving_member_id or member.classic is None:
            continue
        converted.add(
            ClassicGroupMember(
                member.member_id,
                member.instance_id,
                member.client_id,
                member.client_host,
                member.rebalance_timeout_ms,
                member.classic.session_timeout_ms,
                CONSUMER_PROTOCOL_TYPE,
                list(member.classic.protocols),
            )
        )
    converted.protocol_name = converted.select_protocol()
    converted.subscribed_topics = converted.compute_subscribed_topics()
    for classic_member in converted.all_members():
        target = group.target.get(classic_member.member_id, {})
        classic_member.assignment = encode_assignment(
            {names[t]: parts for t, parts in target.items() if t in names},
            protocol_version(classic_member.metadata(converted.protocol_name)),
        )
    return converted
