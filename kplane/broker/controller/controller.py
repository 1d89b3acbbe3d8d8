"""KafkaController: one broker of the cluster elected through ``/controller``.

Every broker runs one. The first to create the ephemeral ``/controller`` is the controller
(it bumps ``/controller_epoch`` in the same multi); the others watch the node and try again
when it goes. Every write of the controller is made only while ``/controller_epoch`` is at
the version its election left it at, so a deposed controller (one paused past its session,
say) writes nothing: its first refused write makes it resign. The controller watches
``/brokers/ids`` and ``/brokers/topics``, decides each partition's leader and ISR (written
to ``.../partitions/<p>/state``) and tells the brokers — itself included, over the network
as Kafka does — with LeaderAndIsr (the replicas whose role changed), UpdateMetadata (every
live broker) and StopReplica (a deleted topic's replicas), through the
ControllerChannelManager.

A new partition's ISR is its live replicas. Leaders change the ISR themselves (a follower
that caught up joins, one that fell behind leaves), writing the state znode at the version
the controller last sent and a notification under ``/isr_change_notification``, which the
controller answers with UpdateMetadata to every broker. When a broker dies the controller
takes it out of every ISR and elects new leaders from the ISR; a partition whose ISR has no
live broker goes offline (leader -1) unless ``unclean.leader.election.enable`` lets another
replica lead.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

import structlog

from kplane.broker.controller.channel_manager import ControllerChannelManager
from kplane.broker.controller.log_dir_events import LogDirEventHandler
from kplane.broker.controller.requests import (
    LEADER_DURING_DELETE,
    PartitionState,
    leader_and_isr,
    stop_replica,
    update_metadata,
)
from kplane.broker.metadata.kafka_store import (
    CONTROLLER_PATH,
    ISR_CHANGE_PATH,
    BrokerRegistration,
    ControllerMovedError,
    KafkaMetadataClient,
    PartitionStateRecord,
)
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode, KafkaError

log = structlog.get_logger(__name__)

P = ParamSpec("P")
R = TypeVar("R")


def _controller_event(
    handler: Callable[Concatenate[KafkaController, P], None],
) -> Callable[Concatenate[KafkaController, P], None]:
    """A watcher's duty, run under the controller's lock: when one of its writes finds that
    another broker was elected since (ControllerMovedError) this one resigns, and the duty
    ends there."""

    @functools.wraps(handler)
    def run(self: KafkaController, *args: P.args, **kwargs: P.kwargs) -> None:
        with self._lock:
            try:
                handler(self, *args, **kwargs)
            except ControllerMovedError as exc:
                self._moved(exc)

    return run


def _controller_request(
    handler: Callable[Concatenate[KafkaController, P], R],
) -> Callable[Concatenate[KafkaController, P], R]:
    """A request's duty, run under the controller's lock: when one of its writes finds that
    another broker was elected since (ControllerMovedError) this one resigns, and the
    request is answered NOT_CONTROLLER (a KafkaError)."""

    @functools.wraps(handler)
    def run(self: KafkaController, *args: P.args, **kwargs: P.kwargs) -> R:
        with self._lock:
            try:
                return handler(self, *args, **kwargs)
            except ControllerMovedError as exc:
                raise self._moved(exc) from exc

    return run


class KafkaController:
    """Controller election, and the controller's duties while elected."""

    def __init__(
        self,
        broker_id: int,
        client: KafkaMetadataClient,
        channels: ControllerChannelManager,
        unclean_leader_election: Callable[[], bool],
    ) -> None:
        self.broker_id = broker_id
        self.client = client
        self.channels = channels
        self._unclean = unclean_leader_election
        self.epoch = 0
        self.epoch_zk_version = -1
        """The version of ``/controller_epoch`` this broker's election left it at: every
        write of this controller is made only while the node is still at it."""
        self.active = False
        self._lock = threading.RLock()
        self._brokers: dict[int, BrokerRegistration] = {}
        self._states: dict[tuple[str, int], PartitionState] = {}
        self._assigned: set[str] = set()  # the topics in _states
        self._watched_brokers: set[int] = set()
        self._watched_topics: set[str] = set()
        self._watching = False
        self._shutting_down: set[int] = set()
        """Brokers in controlled shutdown: never elected, out of every ISR."""
        self.log_dir_events = LogDirEventHandler(self)
        """The brokers' failed log dirs and the replicas they took offline (KIP-112)."""

    # election ------------------------------------------------------------------------
    def startup(self) -> None:
        """Try to become controller; otherwise follow ``/controller``."""
        store = self.client.store
        store.watch_data(CONTROLLER_PATH, lambda _path: self._controller_changed())
        self.elect()

    def _controller_changed(self) -> None:
        if self.client.store.exists(CONTROLLER_PATH) is None:
            self.elect()

    def elect(self) -> None:
        """Create ``/controller`` and bump ``/controller_epoch`` if nobody holds it, and
        take over."""
        with self._lock:
            if self.active:
                return
            elected = self.client.register_controller(self.broker_id)
            if elected is None:
                return
            self.epoch, self.epoch_zk_version = elected
            self.active = True
            log.info("controller elected", broker_id=self.broker_id, controller_epoch=self.epoch)
            try:
                self._on_elected()
            except ControllerMovedError as exc:
                self._moved(exc)

    def resign(self) -> None:
        """Stop acting as controller (the session that held ``/controller`` is gone)."""
        with self._lock:
            if self.active:
                log.info(
                    "controller resigned", broker_id=self.broker_id, controller_epoch=self.epoch
                )
            self._step_down()

    def _moved(self, exc: ControllerMovedError) -> KafkaError:
        """A write found another broker elected since (Kafka's ControllerMovedException):
        resign at once, in one line; the error to answer a request with."""
        log.warning(
            "controller moved: resigning",
            broker_id=self.broker_id,
            controller_epoch=self.epoch,
            reason=str(exc),
        )
        self._step_down()
        return KafkaError(ErrorCode.not_controller, "this broker is no longer the controller")

    def _step_down(self) -> None:
        self.active = False
        for broker_id in list(self._brokers):
            self.channels.remove_broker(broker_id)
        self._brokers.clear()
        self._states.clear()
        self._assigned.clear()

    # duties ----------------------------------------------------------------------------
    def _on_elected(self) -> None:
        store = self.client.store
        self.client.create_controller_paths(self.epoch_zk_version)
        if not self._watching:
            self._watching = True
            store.watch_children("/brokers/ids", lambda _p: self._brokers_changed())
            store.watch_children("/brokers/topics", lambda _p: self._topics_changed())
            store.watch_children(ISR_CHANGE_PATH, lambda _p: self._isr_changed())
        # Load everything first, then tell every broker the whole state at once.
        self._brokers = {b.broker_id: b for b in self.client.get_brokers()}
        for broker in self._brokers.values():
            self._watch_broker(broker.broker_id)
            self.channels.add_broker(broker)
        for topic in sorted(self.client.get_topics()):
            self._watch_topic(topic)
            self._assign(topic)
        self._elect_offline_partitions()  # leaders that died while nobody was controller
        # Replicas on brokers that died while nobody was controller leave the ISR, as
        # Kafka's replica state machine takes them offline at failover.
        hosted = {r for s in self._states.values() for r in s.replicas}
        self._remove_from_isr(hosted - set(self._brokers))
        full = list(self._states.values())
        self._send_leader_and_isr(full, full=True)
        self._send_update_metadata(full)
        self.log_dir_events.startup()

    def _watch_broker(self, broker_id: int) -> None:
        if broker_id not in self._watched_brokers:
            self._watched_brokers.add(broker_id)
            self.client.store.watch_data(f"/brokers/ids/{broker_id}", self._brokers_changed)

    def _watch_topic(self, topic: str) -> None:
        if topic not in self._watched_topics:
            self._watched_topics.add(topic)
            self.client.store.watch_data(f"/brokers/topics/{topic}", self._assignment_changed)

    @_controller_event
    def _brokers_changed(self, _path: str | None = None) -> None:
        if not self.active:
            return
        current = {b.broker_id: b for b in self.client.get_brokers()}
        for broker_id in current:
            self._watch_broker(broker_id)
        gone = set(self._brokers) - set(current)
        joined = [b for i, b in current.items() if self._brokers.get(i) != b]
        self._brokers = current
        self._shutting_down -= gone | {b.broker_id for b in joined}
        self.log_dir_events.brokers_gone(gone)
        for broker_id in sorted(gone):
            self.channels.remove_broker(broker_id)
            log.info("broker gone", broker_id=broker_id)
        for broker in joined:
            self.channels.add_broker(broker)
        changed = self._elect_offline_partitions() if gone or joined else []
        changed += self._remove_from_isr(gone)
        if changed:
            self._send_leader_and_isr(changed)
        # Every live broker learns the new broker list; a joining (or changed) broker
        # gets every partition state, the others only what changed.
        joined_ids = {b.broker_id for b in joined}
        full = list(self._states.values())
        for broker_id in self._brokers:
            states = full if broker_id in joined_ids else changed
            self._send(broker_id, ApiKey.UPDATE_METADATA, self._update_metadata(states))
        for broker in joined:
            hosted = [s for s in full if broker.broker_id in s.replicas]
            if hosted:
                self._send(
                    broker.broker_id,
                    ApiKey.LEADER_AND_ISR,
                    self._leader_and_isr(hosted, full=True),
                )

    @_controller_event
    def _topics_changed(self) -> None:
        if not self.active:
            return
        current = set(self.client.get_topics())
        known = set(self._assigned)
        for topic in sorted(current - self._watched_topics):
            self._watch_topic(topic)
        for topic in sorted(current - known):
            self._topic_assigned(topic)
        for topic in sorted(known - current):
            self._topic_deleted(topic)
        self._watched_topics &= current

    @_controller_event
    def _assignment_changed(self, path: str) -> None:
        topic = path.rsplit("/", 1)[-1]
        if self.active and topic in self._assigned:
            self._topic_assigned(topic)

    def _topic_assigned(self, topic: str) -> None:
        """Give every new partition of ``topic`` a leader, and tell the brokers."""
        changed = self._assign(topic)
        if changed:
            self._send_leader_and_isr(changed)
            self._send_update_metadata(changed)
            log.info("partitions assigned", topic=topic, partitions=len(changed))

    def _assign(self, topic: str) -> list[PartitionState]:
        """The partitions of ``topic`` the controller does not know yet: their stored state,
        or for a new partition its first live replica as leader."""
        assignment = self.client.get_assignment(topic)
        if assignment is None:
            return []
        live = set(self._brokers)
        changed = []
        for index, replicas in sorted(assignment.partitions.items()):
            if (topic, index) in self._states:
                continue
            record = self.client.get_partition_state(topic, index)
            if record is None:  # a new partition: its first live replica leads, all in sync
                isr = tuple(r for r in replicas if r in live)
                record = PartitionStateRecord(isr[0] if isr else -1, 0, isr, self.epoch)
                version = self.client.set_partition_state(
                    topic, index, record, self.epoch_zk_version
                )
                record = dataclasses.replace(record, version=version)
            state = PartitionState(
                topic,
                index,
                record.leader,
                record.leader_epoch,
                tuple(record.isr),
                tuple(replicas),
                assignment.topic_id,
                record.version,
                assignment.adding.get(index, ()),
                assignment.removing.get(index, ()),
            )
            self._states[(topic, index)] = state
            self._assigned.add(topic)
            changed.append(state)
        return changed

    def _topic_deleted(self, topic: str) -> None:
        states = [s for (t, _), s in self._states.items() if t == topic]
        for s in states:
            del self._states[(s.topic, s.partition)]
        self._assigned.discard(topic)
        deleting = [
            PartitionState(s.topic, s.partition, LEADER_DURING_DELETE, s.leader_epoch, (), ())
            for s in states
        ]
        self._send_update_metadata(deleting)
        by_broker: dict[int, list[tuple[str, int]]] = {}
        for s in states:
            for replica in s.replicas:
                by_broker.setdefault(replica, []).append((s.topic, s.partition))
        for broker_id, partitions in by_broker.items():
            self._send(
                broker_id,
                ApiKey.STOP_REPLICA,
                stop_replica(self.broker_id, self.epoch, partitions, True),
            )
        log.info("topic deleted", topic=topic, partitions=len(states))

    def _elect_offline_partitions(self) -> list[PartitionState]:
        """New leaders for partitions whose leader is not live: the first live ISR member,
        else (``unclean.leader.election.enable``) any live replica, else none — the
        partition goes offline (leader -1) keeping its last ISR, so it comes back when that
        broker does (Kafka's rule)."""
        live = set(self._brokers)
        changed = []
        for stale in list(self._states.values()):
            if stale.leader in live:
                continue
            s = self._refreshed(stale)
            alive = tuple(r for r in s.isr if r in live and r not in self._shutting_down)
            leader = alive[0] if alive else -1
            isr = alive or s.isr
            if leader < 0 and self._unclean():
                leader = next((r for r in s.replicas if r in live), -1)
                isr = (leader,) if leader >= 0 else s.isr
            if leader < 0 and s.leader < 0:
                continue  # still offline: nothing changes
            new = self._write_state(s, leader, isr)
            changed.append(new)
            log.info(
                "partition leader elected" if leader >= 0 else "partition offline",
                topic=s.topic,
                partition=s.partition,
                leader=leader,
                leader_epoch=new.leader_epoch,
            )
        return changed

    def _write_state(self, s: PartitionState, leader: int, isr: tuple[int, ...]) -> PartitionState:
        """Store a new leader and ISR for ``s`` with the next leader epoch."""
        epoch = s.leader_epoch + 1
        version = self.client.set_partition_state(
            s.topic,
            s.partition,
            PartitionStateRecord(leader, epoch, isr, self.epoch),
            self.epoch_zk_version,
        )
        new = dataclasses.replace(s, leader=leader, leader_epoch=epoch, isr=isr, zk_version=version)
        self._states[(s.topic, s.partition)] = new
        return new

    def _remove_from_isr(self, gone: set[int]) -> list[PartitionState]:
        """Take dead brokers out of the ISR of partitions whose leader lives (Kafka's
        controller does this at once, so acks=all producers do not wait for the lag
        timeout); the leader epoch moves on."""
        changed = []
        for stale in list(self._states.values()):
            # The replicas, not the ISR known here: a leader may have let a gone broker
            # back in (its notification not read yet).
            if stale.leader in gone or stale.leader < 0 or not gone & set(stale.replicas):
                continue
            s = self._refreshed(stale)
            if not gone & set(s.isr):
                continue
            isr = tuple(r for r in s.isr if r not in gone)
            changed.append(self._write_state(s, s.leader, isr))
        return changed

    # reassignment (KIP-455) --------------------------------------------------------------
    @_controller_request
    def alter_reassignments(
        self, targets: dict[tuple[str, int], tuple[int, ...] | None]
    ) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
        """AlterPartitionReassignments: each partition moves to its target replicas (None
        cancels an ongoing move, back to its original replicas). The target replicas join
        as followers; once all are in the ISR the leader moves into them if it must, and
        the replicas leaving are stopped and their logs deleted (Kafka's ZooKeeper-mode
        steps). KafkaError NOT_CONTROLLER on a broker that is not the controller."""
        if not self.active:
            raise KafkaError(ErrorCode.not_controller, "this broker is not the controller")
        results: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {}
        for key, target in targets.items():
            s = self._states.get(key)
            if s is None:
                results[key] = (ErrorCode.unknown_topic_or_partition, None)
                continue
            original = tuple(r for r in s.replicas if r not in s.adding)
            if target is None:
                if not s.adding and not s.removing:
                    results[key] = (ErrorCode.no_reassignment_in_progress, None)
                    continue
                target = original
            problem = self._invalid_target(target)
            if problem is not None:
                results[key] = (ErrorCode.invalid_replica_assignment, problem)
                continue
            self._start_reassignment(self._refreshed(s), original, target)
            results[key] = (ErrorCode.none, None)
        return results

    def _invalid_target(self, target: tuple[int, ...]) -> str | None:
        if not target:
            return "The replica list is empty."
        if len(set(target)) != len(target):
            return f"The replica list {list(target)} has duplicate brokers."
        unknown = [r for r in target if r not in self._brokers]
        if unknown:
            return f"Unknown broker ids {unknown}."
        return None

    def _start_reassignment(
        self, s: PartitionState, original: tuple[int, ...], target: tuple[int, ...]
    ) -> None:
        adding = tuple(r for r in target if r not in original)
        removing = tuple(r for r in original if r not in target)
        replicas = target + removing
        self._store_assignment(s.topic, s.partition, replicas, adding, removing)
        moving = dataclasses.replace(s, replicas=replicas, adding=adding, removing=removing)
        new = self._write_state(moving, s.leader, s.isr)
        self._send_leader_and_isr([new])
        self._send_update_metadata([new])
        log.info(
            "reassignment started",
            topic=s.topic,
            partition=s.partition,
            target=list(target),
            adding=list(adding),
            removing=list(removing),
        )
        self._maybe_complete_reassignment(new)

    def _store_assignment(
        self,
        topic: str,
        partition: int,
        replicas: tuple[int, ...],
        adding: tuple[int, ...],
        removing: tuple[int, ...],
    ) -> None:
        assignment = self.client.get_assignment(topic)
        if assignment is None:
            return
        assignment.partitions[partition] = replicas
        for field_, value in ((assignment.adding, adding), (assignment.removing, removing)):
            if value:
                field_[partition] = value
            else:
                field_.pop(partition, None)
        self.client.set_assignment(topic, assignment, self.epoch_zk_version)

    def _maybe_complete_reassignment(self, s: PartitionState) -> None:
        """Finish a reassignment whose target replicas are all in the ISR."""
        if not s.adding and not s.removing:
            return
        target = tuple(r for r in s.replicas if r not in s.removing)
        if not set(target) <= set(s.isr):
            return
        live = set(self._brokers) - self._shutting_down
        leader = s.leader
        if leader not in target or leader not in live:
            leader = next((r for r in target if r in s.isr and r in live), -1)
        isr = tuple(r for r in s.isr if r in target)
        self._store_assignment(s.topic, s.partition, target, (), ())
        done = dataclasses.replace(s, replicas=target, adding=(), removing=())
        new = self._write_state(done, leader, isr)
        self._send_leader_and_isr([new])
        self._send_update_metadata([new])
        for broker_id in s.removing:
            if broker_id in self._brokers:
                self._send(
                    broker_id,
                    ApiKey.STOP_REPLICA,
                    stop_replica(self.broker_id, self.epoch, [(s.topic, s.partition)], True),
                )
        log.info(
            "reassignment completed",
            topic=s.topic,
            partition=s.partition,
            replicas=list(target),
            leader=leader,
        )

    def list_reassignments(
        self, partitions: list[tuple[str, int]] | None
    ) -> dict[tuple[str, int], PartitionState]:
        """ListPartitionReassignments: the ongoing ones (of ``partitions``; None: all)."""
        with self._lock:
            if not self.active:
                raise KafkaError(ErrorCode.not_controller, "this broker is not the controller")
            keys = list(self._states) if partitions is None else partitions
            return {
                k: s
                for k in keys
                if (s := self._states.get(k)) is not None and (s.adding or s.removing)
            }

    @_controller_request
    def elect_leaders(
        self, unclean: bool, partitions: list[tuple[str, int]] | None
    ) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
        """ElectLeaders: the preferred replica (the first assigned) becomes leader where it is
        live and in the ISR; with ``unclean``, a partition without a leader gets any live
        replica. ``partitions`` None: every partition (Kafka answers only those it changed
        then). KafkaError NOT_CONTROLLER on a broker that is not the controller."""
        if not self.active:
            raise KafkaError(ErrorCode.not_controller, "this broker is not the controller")
        wanted = list(self._states) if partitions is None else partitions
        results: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {}
        changed: list[PartitionState] = []
        live = set(self._brokers) - self._shutting_down
        for key in wanted:
            stale = self._states.get(key)
            if stale is None:
                results[key] = (ErrorCode.unknown_topic_or_partition, None)
                continue
            s = self._refreshed(stale)
            if unclean:
                leader = next((r for r in s.replicas if r in live), -1)
                if s.leader in live:
                    results[key] = (ErrorCode.election_not_needed, None)
                    continue
                if leader < 0:
                    results[key] = (
                        ErrorCode.eligible_leaders_not_available,
                        "no live replica",
                    )
                    continue
                changed.append(self._write_state(s, leader, (leader,)))
            else:
                preferred = s.replicas[0] if s.replicas else -1
                if s.leader == preferred:
                    results[key] = (ErrorCode.election_not_needed, None)
                    continue
                if preferred not in live or preferred not in s.isr:
                    results[key] = (
                        ErrorCode.preferred_leader_not_available,
                        f"preferred replica {preferred} is not live and in the ISR",
                    )
                    continue
                changed.append(self._write_state(s, preferred, s.isr))
            results[key] = (ErrorCode.none, None)
        if changed:
            self._send_leader_and_isr(changed)
            self._send_update_metadata(changed)
            log.info("leaders elected", unclean=unclean, partitions=len(changed))
        if partitions is None:
            return {k: v for k, v in results.items() if v[0] is ErrorCode.none}
        return results

    def rebalance_leaders(self, imbalance_percentage: int) -> int:
        """``auto.leader.rebalance.enable``: for each broker whose share of partitions led
        by another replica than their preferred one (it) is above
        ``leader.imbalance.per.broker.percentage``, elect the preferred leaders. Returns how
        many partitions moved."""
        with self._lock:
            if not self.active:
                return 0
            by_preferred: dict[int, list[PartitionState]] = {}
            for s in self._states.values():
                if s.replicas:
                    by_preferred.setdefault(s.replicas[0], []).append(s)
            moving: list[tuple[str, int]] = []
            for broker, states in by_preferred.items():
                misled = [s for s in states if s.leader != broker]
                if broker in self._brokers and len(misled) * 100 > imbalance_percentage * len(
                    states
                ):
                    moving += [(s.topic, s.partition) for s in misled]
            if not moving:
                return 0
            try:
                moved = self.elect_leaders(False, moving)
            except KafkaError:  # it resigned: another broker is controller
                return 0
            return sum(1 for error, _ in moved.values() if error is ErrorCode.none)

    @_controller_request
    def controlled_shutdown(self, broker_id: int) -> list[tuple[str, int]]:
        """Kafka's controlled shutdown: the partitions ``broker_id`` leads get a leader
        from the rest of their ISR, and it leaves the ISR of those it follows (and stops
        fetching them). Returns the partitions it still leads (no other ISR member).
        KafkaError NOT_CONTROLLER on a broker that is not the controller,
        BROKER_NOT_AVAILABLE for a broker that is not live."""
        if not self.active:
            raise KafkaError(ErrorCode.not_controller, "this broker is not the controller")
        if broker_id not in self._brokers:
            raise KafkaError(ErrorCode.broker_not_available, f"broker {broker_id} is not live")
        self._shutting_down.add(broker_id)
        live = set(self._brokers) - self._shutting_down
        changed: list[PartitionState] = []
        stopped: list[tuple[str, int]] = []
        for stale in list(self._states.values()):
            if broker_id not in stale.replicas or len(stale.replicas) < 2:
                continue
            s = self._refreshed(stale)
            isr = tuple(r for r in s.isr if r != broker_id)
            if s.leader == broker_id:
                leader = next((r for r in isr if r in live), None)
                if leader is not None:
                    changed.append(self._write_state(s, leader, isr))
            elif broker_id in s.isr:
                changed.append(self._write_state(s, s.leader, isr))
                stopped.append((s.topic, s.partition))
        if changed:
            self._send_leader_and_isr(changed)
            self._send_update_metadata(changed)
        if stopped:
            self._send(
                broker_id,
                ApiKey.STOP_REPLICA,
                stop_replica(self.broker_id, self.epoch, stopped, False),
            )
        remaining = [
            (s.topic, s.partition)
            for s in self._states.values()
            if s.leader == broker_id and len(s.replicas) > 1
        ]
        log.info(
            "controlled shutdown",
            broker_id=broker_id,
            moved=len(changed),
            remaining=len(remaining),
        )
        return remaining

    def _refreshed(self, s: PartitionState) -> PartitionState:
        """``s`` with the ISR and version stored now (a leader may have changed the ISR
        since the controller last read it)."""
        record = self.client.get_partition_state(s.topic, s.partition)
        if record is None:
            return s
        return dataclasses.replace(
            s,
            leader=record.leader,
            leader_epoch=record.leader_epoch,
            isr=tuple(record.isr),
            zk_version=record.version,
        )

    @_controller_event
    def _isr_changed(self) -> None:
        """Leaders changed ISRs: read the partitions' state again and tell every broker."""
        if not self.active:
            return
        changed = []
        for name, partitions in self.client.isr_change_notifications():
            for topic, index in partitions:
                s = self._states.get((topic, index))
                if s is None:
                    continue
                new = self._refreshed(s)
                self._states[(topic, index)] = new
                stopping = {
                    r for r in new.isr if r in self._shutting_down or r not in self._brokers
                }
                if stopping and new.leader not in stopping:
                    # A leader let a broker in controlled shutdown back in (it fetched
                    # before its StopReplica arrived), or one gone since: take it out again.
                    isr = tuple(r for r in new.isr if r not in stopping)
                    new = self._write_state(new, new.leader, isr)
                    self._send_leader_and_isr([new])
                self._maybe_complete_reassignment(new)
                changed.append(self._states[(topic, index)])
            self.client.delete_isr_change_notification(name, self.epoch_zk_version)
        if changed:
            log.info("isr changes propagated", partitions=len(changed))
            self._send_update_metadata(changed)

    # sending -------------------------------------------------------------------------
    def _send(self, broker_id: int, api_key: int, build: Callable[[int], object]) -> None:
        self.channels.send(broker_id, api_key, build)

    def _leaders(self, states: list[PartitionState]) -> list[tuple[int, str, int]]:
        out = []
        for leader in sorted({s.leader for s in states if s.leader >= 0}):
            broker = self._brokers.get(leader)
            endpoint = broker.endpoint(self.channels.listener) if broker else None
            if endpoint is not None:
                out.append((leader, endpoint.host, endpoint.port))
        return out

    def _leader_and_isr(self, states: list[PartitionState], full: bool = False) -> Callable:
        return leader_and_isr(self.broker_id, self.epoch, states, self._leaders(states), full)

    def _update_metadata(self, states: list[PartitionState]) -> Callable:
        brokers = [self._brokers[i] for i in sorted(self._brokers)]
        states = self.log_dir_events.with_offline_replicas(states)
        return update_metadata(self.broker_id, self.epoch, states, brokers)

    def _send_leader_and_isr(self, states: list[PartitionState], full: bool = False) -> None:
        by_broker: dict[int, list[PartitionState]] = {}
        for s in states:
            for replica in s.replicas:
                if replica in self._brokers:
                    by_broker.setdefault(replica, []).append(s)
        for broker_id, hosted in by_broker.items():
            self._send(broker_id, ApiKey.LEADER_AND_ISR, self._leader_and_isr(hosted, full))

    def _send_update_metadata(self, states: list[PartitionState]) -> None:
        build = self._update_metadata(states)
        for broker_id in self._brokers:
            self._send(broker_id, ApiKey.UPDATE_METADATA, build)
