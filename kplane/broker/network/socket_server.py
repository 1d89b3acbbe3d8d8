"""SocketServer: an Acceptor and a Processor pool per listener, the control plane apart."""

from __future__ import annotations

import dataclasses
import itertools
import socket
import time
from collections.abc import Callable, Mapping

import structlog

from kplane.broker.config.endpoint import EndPoint
from kplane.broker.network.acceptor import Acceptor, bind_listener
from kplane.broker.network.connection_quotas import ConnectionQuotas
from kplane.broker.network.memory_pool import MemoryPool
from kplane.broker.network.plane import Plane
from kplane.broker.network.plane_priority import ControlPlanePriority
from kplane.broker.network.processor import IdleObserver, Processor, RequestObserver
from kplane.broker.network.request_channel import RequestChannel
from kplane.broker.network.tls import ServerTls

log = structlog.get_logger(__name__)


def log_listener_bound(endpoint: EndPoint, port: int, **details: object) -> None:
    """The one "listener bound" line, at start-up and for a listener added at runtime."""
    log.info(
        "listener bound",
        listener=endpoint.listener_name,
        security_protocol=endpoint.security_protocol.value,
        bind_host=endpoint.host or "0.0.0.0",
        port=port,
        **details,
    )


@dataclasses.dataclass
class SocketServerConfig:
    """The settings the network layer reads from KafkaConfig."""

    num_network_threads: int
    socket_request_max_bytes: int
    connections_max_idle_ms: int
    socket_send_buffer_bytes: int = -1
    socket_receive_buffer_bytes: int = -1
    queued_max_request_bytes: int = -1
    sasl_server_max_receive_size: int = 524288


class SocketServer:
    """Binds every listener; data-plane listeners share the data RequestChannel."""

    def __init__(
        self,
        listeners: tuple[EndPoint, ...],
        control_plane_listener_name: str | None,
        config: SocketServerConfig,
        data_channel: RequestChannel,
        control_channel: RequestChannel | None,
        is_known_api: Callable[[int], bool],
        on_response_sent: RequestObserver | None = None,
        idle_observer: Callable[[int, str, Plane], IdleObserver] | None = None,
        tls: Mapping[str, ServerTls] | None = None,
        priority: ControlPlanePriority | None = None,
        quotas: ConnectionQuotas | None = None,
    ) -> None:
        self._tls = dict(tls or {})
        self.quotas = quotas
        self._priority = priority
        self.listeners = listeners
        self.control_plane_listener_name = control_plane_listener_name
        self.config = config
        self.data_channel = data_channel
        self.control_channel = control_channel
        self._is_known_api = is_known_api
        self._on_response_sent = on_response_sent
        self._idle_observer = idle_observer
        self._ids = itertools.count()
        # Data-plane requests only: the control plane never waits for data-plane memory.
        self.memory_pool = (
            MemoryPool(config.queued_max_request_bytes)
            if config.queued_max_request_bytes > 0
            else None
        )
        self.acceptors: dict[str, Acceptor] = {}
        self.processors: dict[str, list[Processor]] = {}
        self.bound: dict[str, EndPoint] = {}

    def bind(self) -> None:
        """Bind every listener (all or nothing) and start the Processors.

        Connections wait in the listen backlog until ``start`` starts the Acceptors.
        """
        sockets = []
        for endpoint in self.listeners:
            try:
                sockets.append((endpoint, bind_listener(endpoint)))
            except OSError as exc:
                for _, sock in sockets:
                    sock.close()
                raise OSError(
                    exc.errno,
                    f"listener {endpoint.listener_name} cannot bind "
                    f"{endpoint.host or '0.0.0.0'}:{endpoint.port}: {exc.strerror}",
                ) from exc
        for endpoint, sock in sockets:
            self._add(endpoint, sock)

    def channel_of(self, listener_name: str) -> RequestChannel:
        """The RequestChannel, and so the Plane, of a listener."""
        control = listener_name == self.control_plane_listener_name
        return self.control_channel if control and self.control_channel else self.data_channel

    def _add(self, endpoint: EndPoint, sock: socket.socket) -> None:
        channel = self.channel_of(endpoint.listener_name)
        count = 1 if channel.plane.is_control else self.config.num_network_threads
        if self.quotas is not None:
            self.quotas.add_listener(endpoint.listener_name)
        pool = [self._new_processor(endpoint, channel) for _ in range(count)]
        self.processors[endpoint.listener_name] = pool
        acceptor = Acceptor(
            endpoint,
            sock,
            pool,
            channel.plane.thread_name(
                "socket-acceptor", f"{endpoint.listener_name}-{endpoint.port}"
            ),
            self.config.socket_send_buffer_bytes,
            self.config.socket_receive_buffer_bytes,
            self.quotas,
        )
        self.acceptors[endpoint.listener_name] = acceptor
        self.bound[endpoint.listener_name] = dataclasses.replace(endpoint, port=acceptor.bound_port)
        for processor in pool:
            processor.start()

    # runtime changes (KIP-226) -------------------------------------------------------
    def add_listener(self, endpoint: EndPoint, tls: ServerTls | None) -> EndPoint:
        """Bind and start a new listener; OSError naming it when it cannot bind."""
        try:
            sock = bind_listener(endpoint)
        except OSError as exc:
            raise OSError(
                exc.errno,
                f"listener {endpoint.listener_name} cannot bind "
                f"{endpoint.host or '0.0.0.0'}:{endpoint.port}: {exc.strerror}",
            ) from exc
        if tls is not None:
            self._tls[endpoint.listener_name] = tls
        self._add(endpoint, sock)
        self.acceptors[endpoint.listener_name].start()
        return self.bound[endpoint.listener_name]

    def remove_listener(self, name: str) -> None:
        """Stop accepting on ``name`` and close its connections."""
        acceptor = self.acceptors.pop(name)
        acceptor.shutdown()
        for processor in self.processors.pop(name):
            self._stop_processor(processor)
        if self.quotas is not None:
            self.quotas.remove_listener(name)
        self.bound.pop(name, None)
        self._tls.pop(name, None)

    def tls_of(self, name: str) -> ServerTls | None:
        """The TLS set-up of listener ``name``; None on a plaintext listener."""
        return self._tls.get(name)

    def set_tls(self, name: str, tls: ServerTls) -> None:
        """New connections to ``name`` use ``tls``; open ones keep theirs."""
        self._tls[name] = tls
        for processor in self.processors.get(name, ()):
            processor.tls = tls

    def resize_processors(self, count: int) -> None:
        """``num.network.threads`` per data-plane listener: new Processors take new
        connections (the Acceptor picks the least loaded); a shrink stops the Processors
        with the fewest connections, closing those (clients reconnect)."""
        self.config = dataclasses.replace(self.config, num_network_threads=count)
        for name, pool in list(self.processors.items()):
            if name == self.control_plane_listener_name or len(pool) == count:
                continue
            acceptor = self.acceptors[name]
            if count > len(pool):
                added = [
                    self._new_processor(acceptor.endpoint, self.data_channel)
                    for _ in range(count - len(pool))
                ]
                for processor in added:
                    processor.start()
                kept = pool + added
            else:
                by_load = sorted(pool, key=lambda p: p.connection_count)
                leaving, kept = by_load[: len(pool) - count], by_load[len(pool) - count :]
                acceptor.processors = kept
                for processor in leaving:
                    self._stop_processor(processor)
            acceptor.processors = kept
            self.processors[name] = kept
        log.info("network threads resized", per_listener=count)

    def start(self) -> None:
        """Start accepting connections on every listener."""
        for acceptor in self.acceptors.values():
            acceptor.start()

    def _stop_processor(self, processor: Processor) -> None:
        processor.shutdown()
        processor.channel.processors.remove(processor)

    def _new_processor(self, endpoint: EndPoint, channel: RequestChannel) -> Processor:
        processor_id = next(self._ids)
        processor = Processor(
            processor_id,
            endpoint,
            channel,
            self.config.socket_request_max_bytes,
            self.config.connections_max_idle_ms,
            self._is_known_api,
            self._on_response_sent,
            self._idle_observer(processor_id, endpoint.listener_name, channel.plane)
            if self._idle_observer
            else None,
            self._tls.get(endpoint.listener_name),
            self._priority,
            None if channel.plane.is_control else self.memory_pool,
            self.config.sasl_server_max_receive_size,
            self.quotas,
        )
        channel.processors.append(processor)
        return processor

    def all_processors(self) -> list[Processor]:
        """Every Processor of every listener."""
        return [p for pool in self.processors.values() for p in pool]

    def stop_accepting(self) -> None:
        """Close the listening sockets and take no new requests; connections stay open."""
        for acceptor in self.acceptors.values():
            acceptor.shutdown()
        for processor in self.all_processors():
            processor.stop_reading()

    def wait_for_in_flight(self, timeout_s: float) -> bool:
        """Wait until no request is in flight or queued; True when drained in time."""
        deadline = time.monotonic() + timeout_s
        channels = [c for c in (self.data_channel, self.control_channel) if c is not None]
        while time.monotonic() < deadline:
            busy = sum(p.in_flight() for p in self.all_processors())
            if busy == 0 and all(c.size == 0 for c in channels):
                return True
            time.sleep(0.01)
        return False

    def shutdown_processors(self) -> None:
        """Close every connection and stop every Processor."""
        processors = self.all_processors()
        for processor in processors:  # every one stops at once, then they are awaited
            processor.begin_shutdown()
        for processor in processors:
            processor.await_shutdown()
