"""The controller's side of a failed log dir (KIP-112), as Kafka's controller in ZooKeeper mode.

A broker whose log dir failed writes a sequential node under ``/log_dir_event_notification``
(``{"version":1,"broker":<id>,"event":1}``). The controller deletes it and sends that broker
a LeaderAndIsr of every replica it hosts, with the states as they are (Kafka's
onBrokerLogDirFailure); the broker answers ``KAFKA_STORAGE_ERROR`` for each replica in an
offline log dir. Those replicas go offline (Kafka's onReplicasBecomeOffline): one the
partition's leader hands the leadership to the next replica in the ISR (in assignment
order), and every one leaves the ISR; UpdateMetadata lists them as ``offline_replicas``
until their broker restarts.

Part of the KafkaController, split out: it works on the controller's state under its lock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import structlog

from kplane.broker.controller.requests import PartitionState
from kplane.broker.metadata.kafka_store import LOG_DIR_EVENT_PATH, ControllerMovedError
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kplane.broker.controller.controller import KafkaController

log = structlog.get_logger(__name__)

Key = tuple[str, int]


class LogDirEventHandler:
    """Log dir failure notifications, and the replicas they took offline."""

    def __init__(self, controller: KafkaController) -> None:
        self._controller = controller
        self._offline: dict[int, set[Key]] = {}
        """Broker id -> the partitions whose replica there is in an offline log dir, as
        learned in the controller epoch ``_epoch``."""
        self._epoch = -1
        self._watching = False

    # the notifications ---------------------------------------------------------------
    def startup(self) -> None:
        """On election: watch ``/log_dir_event_notification``, and handle what is pending."""
        if not self._watching:
            self._watching = True
            self._controller.client.store.watch_children(
                LOG_DIR_EVENT_PATH, lambda _path: self._notified()
            )
        self._notified()

    def _notified(self) -> None:
        c = self._controller
        with c._lock:
            if not c.active:
                return
            try:
                brokers = set()
                for name, broker_id in c.client.log_dir_event_notifications():
                    brokers.add(broker_id)
                    c.client.delete_log_dir_event_notification(name, c.epoch_zk_version)
                for broker_id in sorted(brokers & set(c._brokers)):
                    self._ask(broker_id)
            except ControllerMovedError as exc:
                c._moved(exc)
            except Exception as exc:  # a store watcher's thread: one line, not a traceback
                log.warning("log dir event not handled", reason=repr(exc))

    def _ask(self, broker_id: int) -> None:
        """Kafka's onBrokerLogDirFailure: LeaderAndIsr of every replica on ``broker_id``;
        its answer names the ones in offline log dirs."""
        c = self._controller
        hosted = [s for s in c._states.values() if broker_id in s.replicas]
        log.info("log dir failed on a broker", broker_id=broker_id, replicas=len(hosted))
        if hosted:
            c.channels.send(
                broker_id,
                ApiKey.LEADER_AND_ISR,
                c._leader_and_isr(hosted),
                lambda response, error: self._answered(broker_id, hosted, response, error),
            )

    def _answered(
        self,
        broker_id: int,
        hosted: list[PartitionState],
        response: Any | None,
        error: Exception | None,
    ) -> None:
        """On the channel's thread: the replicas answered KAFKA_STORAGE_ERROR go offline."""
        if response is None or error is not None:
            return
        names = {s.topic_id: s.topic for s in hosted}
        offline = [
            key
            for key, code in _partition_errors(response, names)
            if code == ErrorCode.kafka_storage_error
        ]
        if not offline:
            return
        c = self._controller
        with c._lock:
            if not c.active:
                return
            try:
                self._replicas_offline(broker_id, offline)
            except ControllerMovedError as exc:
                c._moved(exc)
            except Exception as exc:  # the channel's loop must go on
                log.warning("offline replicas not handled", broker_id=broker_id, reason=repr(exc))

    # offline replicas ----------------------------------------------------------------
    def _replicas_offline(self, broker_id: int, keys: list[Key]) -> None:
        """Kafka's onReplicasBecomeOffline: each partition led by ``broker_id`` gets a new
        leader from the rest of its ISR (none left: ``unclean.leader.election.enable``
        may pick another live replica, else the partition goes offline keeping its ISR);
        ``broker_id`` leaves every ISR; the brokers are told."""
        c = self._controller
        self._replicas().setdefault(broker_id, set()).update(keys)
        live = set(c._brokers) - c._shutting_down
        changed: list[PartitionState] = []
        unchanged: list[PartitionState] = []
        moved = 0
        for key in keys:
            stale = c._states.get(key)
            if stale is None:
                continue
            s = c._refreshed(stale)
            leader, isr = s.leader, tuple(r for r in s.isr if r != broker_id)
            if leader == broker_id:
                leader, isr = self._elect(s, isr, live)
                moved += 1 if leader >= 0 else 0
            elif isr == s.isr:
                unchanged.append(s)  # out of the ISR already: only the metadata changes
                continue
            changed.append(c._write_state(s, leader, isr))
        if changed:
            c._send_leader_and_isr(changed)
        if changed or unchanged:
            c._send_update_metadata(changed + unchanged)
        log.info(
            "replicas offline: their log dir failed",
            broker_id=broker_id,
            partitions=len(keys),
            leaders_moved=moved,
        )

    def _elect(
        self, s: PartitionState, isr: tuple[int, ...], live: set[int]
    ) -> tuple[int, tuple[int, ...]]:
        """(leader, ISR) of ``s`` once its leader's replica is offline: the first replica
        of the ISR left that is online; else, with ``unclean.leader.election.enable``, any
        online replica; else none (-1), the ISR kept."""
        key = (s.topic, s.partition)
        offline = self._replicas()
        online = [r for r in s.replicas if r in live and key not in offline.get(r, ())]
        leader = next((r for r in online if r in isr), -1)
        if leader >= 0:
            return leader, isr
        if online and self._controller._unclean():
            return online[0], (online[0],)
        return -1, s.isr

    def brokers_gone(self, broker_ids: Iterable[int]) -> None:
        """Brokers that stopped: their replicas come back online with them (a restart
        loads every log dir again)."""
        for broker_id in broker_ids:
            self._replicas().pop(broker_id, None)

    def _replicas(self) -> dict[int, set[Key]]:
        """The offline replicas learned in this controller epoch (a new election starts
        with none)."""
        epoch = self._controller.epoch
        if self._epoch != epoch:
            self._epoch, self._offline = epoch, {}
        return self._offline

    # UpdateMetadata ------------------------------------------------------------------
    def with_offline_replicas(self, states: list[PartitionState]) -> list[PartitionState]:
        """``states`` for an UpdateMetadata, each with its replicas in failed log dirs."""
        offline: dict[Key, tuple[int, ...]] = {}
        for broker_id, keys in sorted(self._replicas().items()):
            for key in keys:
                offline[key] = (*offline.get(key, ()), broker_id)
        if not offline:
            return states
        return [
            dataclasses.replace(s, offline=offline.get((s.topic, s.partition), ()))
            for s in states
        ]


def _partition_errors(response: Any, names: Mapping[Any, str]) -> Iterator[tuple[Key, int]]:
    """((topic, partition), error code) of a LeaderAndIsr response of any version (v5+
    names topics by id)."""
    for p in getattr(response, "partition_errors", ()):
        yield (p.topic_name, int(p.partition_index)), int(p.error_code)
    for topic in getattr(response, "topics", ()):
        name = names.get(topic.topic_id)
        if name is not None:
            for p in topic.partition_errors:
                yield (name, int(p.partition_index)), int(p.error_code)
