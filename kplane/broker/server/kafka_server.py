"""KafkaServer: builds every component from a KafkaConfig, starts them, stops them."""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections.abc import Callable
from urllib.parse import unquote

import structlog

from kplane.broker.config.dynamic_config import DynamicBrokerConfig
from kplane.broker.config.endpoint import EndPoint
from kplane.broker.config.kafka_config import KafkaConfig
from kplane.broker.controller.channel_manager import ControllerChannelManager
from kplane.broker.controller.controller import KafkaController
from kplane.broker.group.coordinator import GroupCoordinator
from kplane.broker.group.group_config import group_config_from
from kplane.broker.group.group_configs import GROUPS, GroupConfigManager, group_node
from kplane.broker.group.placement import coordinator_for, partition_leader
from kplane.broker.group.share_config import share_group_config_from
from kplane.broker.log.log_cleaner import CleanerConfig
from kplane.broker.log.log_config import LogConfigs
from kplane.broker.log.log_dir_failure_channel import LogDirFailureHandler
from kplane.broker.log.log_manager import LogManager, LogManagerConfig
from kplane.broker.log.partition import TopicPartition
from kplane.broker.metadata.cache import MetadataCache
from kplane.broker.metadata.config_changes import ConfigChangeListener
from kplane.broker.metadata.kafka_store import BrokerRegistration, KafkaMetadataClient
from kplane.broker.metadata.registration import BrokerRegistrar
from kplane.broker.metadata.store import MetadataStore
from kplane.broker.metadata.stores import open_store
from kplane.broker.metadata.zk_store import ZooKeeperMetadataStore
from kplane.broker.metrics import (
    BrokerMetrics,
    MetricsHttpServer,
    metric_name,
)
from kplane.broker.metrics.reporters import DynamicMetricsReporters
from kplane.broker.network.broker_channels import BrokerChannelManager
from kplane.broker.network.connection_quotas import ConnectionQuotas
from kplane.broker.network.plane import Plane, planes
from kplane.broker.network.plane_priority import ControlPlanePriority
from kplane.broker.network.request_channel import Request, RequestChannel
from kplane.broker.network.socket_server import SocketServer, SocketServerConfig, log_listener_bound
from kplane.broker.network.tls import server_tls
from kplane.broker.quota.client_quotas import ClientQuotas
from kplane.broker.quota.store import ClientQuotaStore
from kplane.broker.security.authorizer import authorizer_from_config
from kplane.broker.security.delegation_token_manager import DelegationTokenManager
from kplane.broker.security.delegation_token_store import DelegationTokenStore
from kplane.broker.security.sasl import sasl_listeners
from kplane.broker.security.scram import ScramCredentialStore
from kplane.broker.server.acl_apis import AclApis
from kplane.broker.server.admin_manager import AdminManager, TopicDefaults
from kplane.broker.server.api_versions import ApiVersionsApi
from kplane.broker.server.client_quota_apis import ClientQuotaApis
from kplane.broker.server.config_apis import ConfigApis, load_policy
from kplane.broker.server.consumer_group_apis import ConsumerGroupApis
from kplane.broker.server.context import ApiFamily
from kplane.broker.server.controlled_shutdown import controlled_shutdown
from kplane.broker.server.controller_apis import ControllerApis
from kplane.broker.server.delegation_token_apis import DelegationTokenApis
from kplane.broker.server.dynamic_listeners import (
    DynamicListenerConfig,
    DynamicListenerSecurity,
    ProposedListenerSecurity,
)
from kplane.broker.server.dynamic_thread_pool import DynamicThreadPool
from kplane.broker.server.fault_apis import FaultApis
from kplane.broker.server.faults import FaultInjector
from kplane.broker.server.fetch_apis import FetchApis
from kplane.broker.server.group_apis import GroupApis
from kplane.broker.server.initial_catch_up import InitialCatchUp
from kplane.broker.server.kafka_apis import KafkaApis
from kplane.broker.server.leader_epoch_apis import OffsetForLeaderEpochApis
from kplane.broker.server.lifecycle import Lifecycle
from kplane.broker.server.log_dir_apis import LogDirApis
from kplane.broker.server.metadata_apis import MetadataApis
from kplane.broker.server.own_principal import check_can_reach_itself
from kplane.broker.server.process_tuning import set_switch_interval, settle_heap
from kplane.broker.server.produce_apis import ProduceApis, ProducerIdManager
from kplane.broker.server.replica_fetcher import ReplicaFetcherManager
from kplane.broker.server.replica_manager import ReplicaManager
from kplane.broker.server.replication_quota import ReplicationQuota, throttled_replicas
from kplane.broker.server.request_handler import RequestHandlerPool
from kplane.broker.server.request_metrics import RequestMetricsObserver
from kplane.broker.server.sasl_apis import SaslApis
from kplane.broker.server.scram_apis import ScramApis
from kplane.broker.server.share_fetch_apis import ShareFetchApis
from kplane.broker.server.share_group_apis import ShareGroupApis
from kplane.broker.server.share_offset_apis import ShareOffsetApis
from kplane.broker.server.telemetry_apis import TelemetryApis
from kplane.broker.server.topic_apis import TopicApis
from kplane.broker.server.txn_apis import GROUP_METADATA_TOPIC, TxnApis, TxnMarkerWriter
from kplane.broker.share.share_partition_manager import SharePartitionManager
from kplane.broker.share.share_session import ShareSessionCache
from kplane.broker.share.share_state_store import ShareStateStore
from kplane.broker.telemetry.exporter import ClientMetricsExporter
from kplane.broker.telemetry.manager import ClientMetricsManager
from kplane.broker.telemetry.subscriptions import CLIENT_METRICS, subscription_node
from kplane.broker.transaction.coordinator import TransactionConfig, TransactionCoordinator
from kplane.broker.transaction.marker_channel import (
    UNKNOWN_PARTITION,
    TransactionMarkerChannelManager,
)
from kplane.broker.transaction.state_manager import TransactionStateManager
from kplane.broker.utils.purgatory import DelayedOperationPurgatory
from kplane.broker.utils.scheduler import KafkaScheduler
from kplane.broker.utils.timer import SystemTimer
from kplane.protocol.api_keys import ApiKey

log = structlog.get_logger(__name__)

SHUTDOWN_DRAIN_SECONDS = 3.0
PROCESSOR_APIS = frozenset({ApiKey.PRODUCE})
"""Data-plane APIs handled on the Processor that read the request (see RequestChannel):
Produce never waits on a peer or a lock held for long, and answers or parks at once."""


class KafkaServer:
    """One broker: start-up in dependency order, shutdown in reverse."""

    def __init__(self, config: KafkaConfig, store: MetadataStore | None = None) -> None:
        self.static_config = config
        self.broker_id = config.broker_id
        self._store = store
        self.coordinator_overrides: dict[str, int] = {}
        """Group id -> the broker a test moved its coordinator to (fault injection)."""
        self._started = False
        self._stopped = threading.Event()
        self._shut_down = threading.Event()
        self.halted = False
        """The broker stopped itself on a fault (every log dir failed), not on request."""
        self.metrics = BrokerMetrics()
        self.metrics_http: MetricsHttpServer | None = None
        self.socket_server: SocketServer | None = None
        self.bound: dict[str, EndPoint] = {}
        self.lifecycle = Lifecycle()

    @property
    def config(self) -> KafkaConfig:
        """The current config: static, with the dynamic values on top once started."""
        dynamic: DynamicBrokerConfig | None = getattr(self, "dynamic", None)
        return dynamic.current if dynamic is not None else self.static_config

    # start-up --------------------------------------------------------------------------
    def startup(self) -> None:
        """Start the broker in named phases: metadata -> security -> logs and coordinators
        -> request planes -> open (accepting, registered) -> controller. Each component's
        stop joins one lifecycle, so shutdown is start-up reversed; raises (and cleans up)
        when the broker cannot start."""
        try:
            config = self._start_metadata()
            self._start_security(config)
            self._start_logs_and_coordinators(config)
            self._start_request_planes(config)
            self._open()
            self._start_controller(config)
        except BaseException:
            self.shutdown()
            raise
        self._started = True
        assert self.socket_server is not None
        for name, endpoint in self.bound.items():
            advertised = self.advertised(name)
            log_listener_bound(
                endpoint,
                endpoint.port,
                advertised=advertised.connection_string if advertised else None,
                plane=self.socket_server.channel_of(name).plane.name,
            )
        log.info("started", broker_id=self.broker_id, cluster_id=self.cluster_id)

    def fault_injector(self) -> FaultInjector:
        """The broker's FaultInjector, attached to its request path on first use (a test
        fixture's, or ``kplane.faults.enable``'s)."""
        faults = self.apis.faults
        if faults is None:
            socket_server = self.socket_server
            assert socket_server is not None
            faults = self.apis.faults = FaultInjector(lambda: socket_server)
        return faults

    def settle_heap(self, stop: Callable[[], bool]) -> None:
        """A long-running broker's last start-up step (``kplane serve``): every served
        schema loaded and the start-up heap frozen (``process_tuning.settle_heap``)."""
        settle_heap(self.apis.supported_versions(), stop)

    def _start_metadata(self) -> KafkaConfig:
        """The metadata store, the dynamic config on top of the static one (KIP-226), the
        cluster id and the MetadataCache. Returns the config to start with."""
        config = self.static_config
        self.log_manager = LogManager(
            LogManagerConfig(
                storage=config.get_str("kplane.log.storage"),
                log_dirs=tuple(config.log_dirs),
                retention_check_interval_ms=config.get_int("log.retention.check.interval.ms"),
                flush_check_interval_ms=config.get_int("log.flush.scheduler.interval.ms"),
                recovery_point_checkpoint_interval_ms=config.get_int(
                    "log.flush.offset.checkpoint.interval.ms"
                ),
                log_start_checkpoint_interval_ms=config.get_int(
                    "log.flush.start.offset.checkpoint.interval.ms"
                ),
                file_delete_delay_ms=config.get_int("log.segment.delete.delay.ms"),
            ),
            lambda topic: self.log_configs.log_settings(topic),
        )
        self.log_manager.log_dir_mover.io_max_bytes_per_second = lambda: self.config.get_int(
            "replica.alter.log.dirs.io.max.bytes.per.second"
        )
        self.log_manager.lock_dirs()  # before the store: a second broker on these dirs stops
        self.lifecycle.on_shutdown("close logs", self.log_manager.shutdown)
        self.store = self._store or open_store(self.static_config)
        self.lifecycle.on_shutdown("close metadata store", self.store.close)
        self.client = KafkaMetadataClient(self.store)
        self.dynamic = DynamicBrokerConfig(self.static_config, self.client)
        config = self.dynamic.initialize()
        set_switch_interval(config)
        self.cluster_id = self.client.get_or_create_cluster_id()
        self.log_manager.check_identity(self.broker_id, self.cluster_id)
        self.cache = MetadataCache(self.cluster_id, self.broker_id)
        self.registrar = BrokerRegistrar(self.client, self._registration)
        return config

    def _start_security(self, config: KafkaConfig) -> None:
        """TLS contexts, SASL servers and the authorizer: a bad keystore or JAAS config
        stops start-up here, before anything listens."""
        self.tls = server_tls(config)
        self.scram_credentials = ScramCredentialStore(self.client)
        self.tokens = DelegationTokenManager.from_config(config, DelegationTokenStore(self.store))
        self.tokens.startup()
        self.scram_credentials.tokens = self.tokens
        self.sasl_listeners = sasl_listeners(config, self.scram_credentials)
        self.authorizer = authorizer_from_config(config, self.store)

    def _start_logs_and_coordinators(self, config: KafkaConfig) -> None:
        """The timer, partition logs, the replica manager, topic administration and the
        group coordinator."""
        self.timer = SystemTimer()
        self.lifecycle.on_shutdown("stop timer", self.timer.shutdown)
        self.log_configs = LogConfigs(self.client, lambda: self.config)
        self.log_manager.startup(CleanerConfig.from_config(config), self.metrics)
        self.fetch_purgatory = DelayedOperationPurgatory("Fetch", self.timer)
        self.produce_purgatory = DelayedOperationPurgatory("Produce", self.timer)
        self.replica_manager = ReplicaManager(
            self.broker_id,
            self.log_manager,
            self.cache,
            self.fetch_purgatory,
            self.log_configs,
            self.produce_purgatory,
            lambda tp, record: self.client.update_isr(tp.topic, tp.partition, record),
        )
        self._start_replication(config)
        self._start_log_dir_failure_handler()
        self.admin = AdminManager(
            self.client,
            self.cache,
            TopicDefaults(
                config.get_int("num.partitions"), config.get_int("default.replication.factor")
            ),
        )
        self.group_configs = GroupConfigManager(
            lambda: self.config,
            lambda group_id: self.client.get_entity_config(GROUPS, group_node(group_id)),
        )
        self.group_coordinator = GroupCoordinator(
            group_config_from(config),
            self.timer,
            self._partition_exists,
            self.client,
            topics=lambda: self.cache.snapshot,
            stored_topics=self.client.get_topics,
            group_store=self.client,
            group_configs=self.group_configs,
            owns=self._owns_group,
            share_config=share_group_config_from(config),
        )
        self.lifecycle.on_shutdown("stop group coordinator", self.group_coordinator.shutdown)
        self._start_share_partitions()
        self._start_transaction_coordinator(config)

    def _start_share_partitions(self) -> None:
        """KIP-932's share partitions beside the leaders, their state in the metadata
        store, and the share sessions; a member whose group session expired gives its
        records back."""
        states = ShareStateStore(self.store)
        self.share_partitions = SharePartitionManager(
            self.replica_manager,
            self.group_coordinator.share_config,
            self.group_configs,
            states,
            self.fetch_purgatory.check_and_complete,
        )
        restored = self.group_coordinator.share.restore(
            g for g in states.group_ids() if self._owns_group(g)
        )
        if restored:
            log.info("share groups with stored state registered", groups=restored)
        self.share_sessions = ShareSessionCache(
            self.config.get_int("group.share.max.share.sessions")
        )

        def member_fenced(group_id: str, member_id: str) -> None:
            self.share_sessions.close(group_id, member_id)
            self.share_partitions.release(group_id, member_id)

        self.group_coordinator.share.add_member_listener(member_fenced)

        def topic_changed(name: str) -> None:
            if name not in self.cache.snapshot.topics:
                self.share_partitions.topic_deleted(name)

        self.cache.add_topic_listener(topic_changed)
        self.group_coordinator.share_group_deleted.append(self.share_partitions.delete_group)

    def _start_replication(self, config: KafkaConfig) -> None:
        """The fetchers of the partitions this broker follows, and the leader's periodic
        ISR check (every half ``replica.lag.time.max.ms``, as Kafka's)."""
        self.replica_fetchers = ReplicaFetcherManager(
            self.broker_id, config, self.cache, self.log_manager
        )
        self.replica_manager.fetchers = self.replica_fetchers
        window = (
            config.get_int("replication.quota.window.num"),
            config.get_int("replication.quota.window.size.seconds"),
        )
        self.replica_manager.leader_quota = self._replication_quota("leader", *window)
        self.replica_fetchers.quota = self._replication_quota("follower", *window)
        self.lifecycle.on_shutdown("stop replica fetchers", self.replica_fetchers.shutdown)
        rm = self.replica_manager
        for mbean_type, name, doc, fn in (
            (
                "ReplicaManager",
                "UnderReplicatedPartitions",
                "Partitions led here whose ISR lacks replicas.",
                rm.under_replicated_partitions,
            ),
            ("ReplicaManager", "IsrShrinksPerSec", "ISR shrinks so far.", lambda: rm.isr_shrinks),
            ("ReplicaManager", "IsrExpandsPerSec", "ISR expands so far.", lambda: rm.isr_expands),
            (
                "ReplicaFetcherManager",
                "MaxLag",
                "Largest lag in offsets of a partition followed here.",
                self.replica_fetchers.max_lag,
            ),
        ):
            self.metrics.register_gauge(metric_name("server", mbean_type, name), doc, fn)
        lag_ms = config.get_int("replica.lag.time.max.ms")
        self.replication_scheduler = KafkaScheduler("replica-isr-scheduler")
        self.lifecycle.on_shutdown("stop isr checks", self.replication_scheduler.shutdown)
        if config.get_bool("auto.leader.rebalance.enable"):
            interval_ms = config.get_int("leader.imbalance.check.interval.seconds") * 1000
            percentage = config.get_int("leader.imbalance.per.broker.percentage")
            self.replication_scheduler.schedule(
                "auto-leader-rebalance",
                lambda: self.controller.rebalance_leaders(percentage),
                interval_ms,
                interval_ms,
            )
        self.replication_scheduler.schedule(
            "isr-expiration",
            lambda: self.replica_manager.maybe_shrink_isr(lag_ms),
            lag_ms / 2,
            lag_ms / 2,
        )

    def _start_log_dir_failure_handler(self) -> None:
        """The thread that takes each failed log dir out of service (KIP-112)."""
        if not self.log_manager.files:
            return
        handler = LogDirFailureHandler(self.log_manager.log_dir_failures, self._on_log_dir_failure)
        self.lifecycle.on_shutdown("stop log dir failure handler", handler.shutdown)
        handler.start()

    def _on_log_dir_failure(self, log_dir: str) -> None:
        """Kafka's handleLogDirFailure: the dir's replicas stop being served; while another
        log dir is online the controller is told (it moves their leaderships away), else the
        broker shuts down."""
        self.replica_manager.handle_log_dir_failure(log_dir)
        if self.log_manager.live_log_dirs:
            self.client.propagate_log_dir_event(self.broker_id)
            return
        log.error(
            "shutdown broker because all log dirs have failed",
            broker_id=self.broker_id,
            log_dirs=[str(d.path) for d in self.log_manager.log_dirs],
        )
        threading.Thread(target=self._halt, name="log-dirs-failed-shutdown").start()

    def _halt(self) -> None:
        """Stop as Kafka halts: ``kplane serve`` sees :attr:`halted` and exits with 1."""
        self.halted = True
        self.shutdown()

    def _replication_quota(self, side: str, window_num: int, window_s: int) -> ReplicationQuota:
        """The ``leader`` or ``follower`` replication throttle: its rate a dynamic broker
        config, the replicas it covers named by each topic's throttled-replicas list."""
        rate_key = f"{side}.replication.throttled.rate"
        list_key = f"{side}.replication.throttled.replicas"
        return ReplicationQuota(
            lambda: self.config.get_int(rate_key),
            lambda tp: throttled_replicas(
                self.log_configs.replica_list(tp.topic, list_key), tp.partition, self.broker_id
            ),
            window_num,
            window_s,
        )

    def _start_transaction_coordinator(self, config: KafkaConfig) -> None:
        """The transaction coordinator: its state in the metadata store, its markers
        written here directly or sent over the inter-broker listener (its duties start
        with the controller phase, once the cluster's metadata is known)."""
        self.producer_ids = ProducerIdManager(
            lambda: self.client.next_producer_id_block(self.broker_id)
        )
        self.txn_marker_writer = TxnMarkerWriter(
            self.replica_manager,
            self.group_coordinator,
            lambda p: (
                partition_leader(p, list(self.cache.snapshot.brokers)) in (None, self.broker_id)
            ),
            lambda: self.config.get_int("offsets.topic.num.partitions"),
        )
        self.txn_channels = BrokerChannelManager(
            config, config.inter_broker_listener_name, "txn-marker"
        )
        self.lifecycle.on_shutdown("stop transaction marker channels", self.txn_channels.shutdown)
        self.txn_coordinator = TransactionCoordinator(
            TransactionConfig(
                max_timeout_ms=config.get_int("transaction.max.timeout.ms"),
                abort_timed_out_interval_ms=config.get_int(
                    "transaction.abort.timed.out.transaction.cleanup.interval.ms"
                ),
                remove_expired_interval_ms=config.get_int(
                    "transaction.remove.expired.transaction.cleanup.interval.ms"
                ),
                transactional_id_expiration_ms=config.get_int("transactional.id.expiration.ms"),
            ),
            TransactionStateManager(self.client, self.broker_id, self._owns_transactional_id),
            TransactionMarkerChannelManager(
                self.broker_id,
                self._marker_leader,
                lambda broker_id: self.cache.snapshot.brokers.get(broker_id),
                self.txn_channels,
                self.txn_marker_writer,
                self.timer,
            ),
            self.producer_ids.generate,
            self.timer,
        )
        self.lifecycle.on_shutdown("stop transaction coordinator", self.txn_coordinator.shutdown)

    def _start_request_planes(self, config: KafkaConfig) -> None:
        """KafkaApis, a RequestChannel and a handler pool per plane (KIP-291), the
        SocketServer bound (connections wait in the backlog), and the components KIP-226
        reconfigures."""
        self.catch_up = InitialCatchUp()
        self.quota_store = ClientQuotaStore(self.client)
        self.connection_quotas = ConnectionQuotas(config, self.metrics)
        self.client_quotas = ClientQuotas(
            config,
            self.quota_store,
            self.metrics,
            self.connection_quotas.update_ip_connection_rate_quota,
        )
        self.client_quotas.load()
        self._start_client_telemetry(config)
        self.apis = KafkaApis(self._api_families(), self.authorizer, self.catch_up)
        data_plane, control_plane = planes(config)
        self.data_channel = RequestChannel(data_plane)
        self.control_channel = RequestChannel(control_plane) if control_plane else None
        # KIP-291 in one process: data-plane threads yield the GIL to control requests.
        self.priority = (
            ControlPlanePriority(data_thread_nice=config.get_int("kplane.data.plane.thread.nice"))
            if self.control_channel
            else None
        )
        if self.priority is not None:
            self.lifecycle.on_shutdown("release control-plane priority", self.priority.close)
        observer = RequestMetricsObserver(self.metrics)
        self.data_channel.throttler = self.client_quotas  # the control plane: never
        self.socket_server = SocketServer(
            config.listeners,
            config.control_plane_listener_name,
            SocketServerConfig(
                num_network_threads=config.get_int("num.network.threads"),
                socket_request_max_bytes=config.get_int("socket.request.max.bytes"),
                connections_max_idle_ms=config.get_int("connections.max.idle.ms"),
                socket_send_buffer_bytes=config.get_int("socket.send.buffer.bytes"),
                socket_receive_buffer_bytes=config.get_int("socket.receive.buffer.bytes"),
                queued_max_request_bytes=config.get_int("queued.max.request.bytes"),
                sasl_server_max_receive_size=config.get_int("sasl.server.max.receive.size"),
            ),
            self.data_channel,
            self.control_channel,
            self.apis.is_known_api,
            observer.on_response_sent,
            self._processor_idle_meter,
            self.tls,
            self.priority,
            self.connection_quotas,
        )
        self.handler_pool = self._handler_pool(self.data_channel)
        self.control_handler_pool = (
            self._handler_pool(self.control_channel) if self.control_channel else None
        )
        for channel in (self.data_channel, self.control_channel):
            if channel is not None:
                channel.register_gauges(self.metrics)
        self._add_reconfigurables(config)
        self.lifecycle.on_shutdown("stop processors", self.socket_server.shutdown_processors)
        self.socket_server.bind()
        self.bound = self.socket_server.bound
        for pool in (self.handler_pool, self.control_handler_pool):
            if pool is not None:
                self.lifecycle.on_shutdown("stop handlers", pool.shutdown)
                pool.start()

    def _open(self) -> None:
        """Start the authorizer, register under /brokers/ids and accept connections. At
        shutdown, in reverse: stop accepting, let parked fetches answer, drain."""
        assert self.socket_server is not None
        if self.authorizer is not None:
            self.authorizer.startup()
            check_can_reach_itself(self.config, self.tls, self.authorizer)
        self.registrar.register()
        self.lifecycle.on_shutdown("drain", self._drain)
        self.lifecycle.on_shutdown("complete delayed fetches", self.fetch_purgatory.complete_all)
        self.lifecycle.on_shutdown("complete delayed produces", self.produce_purgatory.complete_all)
        self.lifecycle.on_shutdown("stop accepting", self.socket_server.stop_accepting)
        self.lifecycle.on_shutdown("answer requests held for metadata", self.catch_up.complete)
        self.socket_server.start()

    def _start_controller(self, config: KafkaConfig) -> None:
        """The controller and its channels (which reach this broker over its own listener,
        so after ``_open``), the wait for the controller's first UpdateMetadata, dynamic
        config changes, and /metrics."""
        self.channels = ControllerChannelManager(config)
        self.lifecycle.on_shutdown("stop controller channels", self.channels.shutdown)
        self.controller = KafkaController(
            self.broker_id,
            self.client,
            self.channels,
            lambda: self.config.get_bool("unclean.leader.election.enable"),
        )
        self.controller.startup()
        self._start_token_expiry(config)
        if isinstance(self.store, ZooKeeperMetadataStore):
            self.store.add_session_listener(self._on_new_session)
        self._await_own_metadata()
        self.txn_coordinator.startup()
        # Shutdown's first step, while everything still serves: leaderships move away.
        self.lifecycle.on_shutdown(
            "controlled shutdown",
            lambda: controlled_shutdown(self.config, self.client, self.broker_id),
        )
        self.config_changes = ConfigChangeListener(self.store)
        self.config_changes.subscribe(self.dynamic.on_config_change)
        self.config_changes.subscribe(self.log_configs.on_config_change)
        self.config_changes.subscribe(self.group_configs.on_config_change)
        self.config_changes.subscribe(self.client_quotas.on_config_change)
        self.config_changes.subscribe(self.client_metrics.on_config_change)
        self.config_changes.start()
        self.client_quotas.load()  # what changed before the listener started
        self.client_metrics.load()  # what changed before the listener started
        self._start_metrics_http()

    def _start_token_expiry(self, config: KafkaConfig) -> None:
        """With delegation tokens on, the controller removes expired tokens every
        ``delegation.token.expiry.check.interval.ms`` (Kafka's delete-expired-tokens)."""
        if not self.tokens.enabled:
            return
        interval_ms = config.get_int("delegation.token.expiry.check.interval.ms")
        scheduler = KafkaScheduler("delegation-token-expiry-scheduler")
        self.lifecycle.on_shutdown("stop token expiry checks", scheduler.shutdown)

        def delete_expired_tokens() -> None:
            if self.controller.active:
                self.tokens.expire_tokens()

        scheduler.schedule("delete-expired-tokens", delete_expired_tokens, interval_ms, interval_ms)

    def _start_client_telemetry(self, config: KafkaConfig) -> None:
        """KIP-714: the client-metrics subscriptions in the store, the client instances,
        and the pushed metrics on this broker's Prometheus registry."""
        exporter = ClientMetricsExporter()
        self.metrics.registry.register(exporter)
        self.client_metrics = ClientMetricsManager(
            lambda name: self.client.get_entity_config(CLIENT_METRICS, subscription_node(name)),
            lambda: [unquote(n) for n in self.client.get_entities(CLIENT_METRICS)],
            exporter,
            config.get_int("telemetry.max.bytes"),
        )
        self.client_metrics.load()
        self.telemetry_apis = TelemetryApis(self.client_metrics)

    def _api_families(self) -> list[ApiFamily]:
        return [
            self.telemetry_apis.noting_client_software(
                ApiVersionsApi(lambda: self.apis.supported_versions())
            ),
            self.telemetry_apis,
            MetadataApis(
                self.broker_id,
                self.cache,
                self.admin,
                lambda: self.config.get_bool("auto.create.topics.enable"),
                self._coordinator_of,
                self._txn_coordinator_of,
                lambda: self.config.get_int("max.request.partition.size.limit"),
                self.client_quotas,
            ),
            ProduceApis(self.replica_manager, self.cache, self.produce_purgatory),
            TxnApis(
                self.txn_coordinator,
                self.producer_ids,
                self.cache,
                self._owns_transactional_id,
                self.txn_marker_writer,
                lambda: self.config.get_int("offsets.topic.num.partitions"),
                self.replica_manager,
            ),
            OffsetForLeaderEpochApis(self.replica_manager),
            FetchApis(
                self.replica_manager,
                self.cache,
                self.fetch_purgatory,
                self.config.get_int("fetch.max.bytes"),
                self.client_quotas,
            ),
            TopicApis(
                self.admin,
                self.cache,
                lambda: self.config.get_bool("delete.topic.enable"),
                DelayedOperationPurgatory("topic", self.timer),
                self.client_quotas,
            ),
            SaslApis(
                self.sasl_listeners,
                self.timer,
                self.config.get_int("connection.failed.authentication.delay.ms"),
            ),
            AclApis(self.authorizer),
            ConfigApis(
                self.dynamic,
                self.client,
                self.cache,
                load_policy(self.config.get("alter.config.policy.class.name")),
                self.group_configs,
            ),
            ControllerApis(
                self.broker_id,
                self.replica_manager,
                self.cache,
                lambda: self.controller,
            ),
            ScramApis(self.scram_credentials),
            ClientQuotaApis(self.quota_store),
            DelegationTokenApis(self.tokens),
            LogDirApis(self.log_manager),
            *(
                [FaultApis(self.fault_injector, self.authorizer)]
                if self.static_config.get_bool("kplane.faults.enable")
                else []
            ),
            GroupApis(
                self.group_coordinator,
                topic_name_of=self.cache.topic_name,
                topic_id_of=self._topic_id,
                owns=self._owns_group,
            ),
            *(
                [
                    ConsumerGroupApis(
                        self.group_coordinator,
                        topic_name_of=self.cache.topic_name,
                        owns=self._owns_group,
                    )
                ]
                if self.group_coordinator.config.consumer_protocol
                else []
            ),
            *self._share_apis(),
        ]

    def _share_apis(self) -> list[ApiFamily]:
        """KIP-932's APIs, served with group.share.enable."""
        if not self.group_coordinator.share_config.enabled:
            return []
        return [
            ShareGroupApis(
                self.group_coordinator,
                topic_name_of=self.cache.topic_name,
                owns=self._owns_group,
            ),
            ShareFetchApis(
                self.share_partitions,
                self.share_sessions,
                self.cache,
                self.fetch_purgatory,
                self.config.get_int("fetch.max.bytes"),
                self.client_quotas,
            ),
            ShareOffsetApis(
                self.group_coordinator, self.share_partitions, self.cache, owns=self._owns_group
            ),
        ]

    def _owns_group(self, group_id: str) -> bool:
        return self._coordinator_of(group_id) in (None, self.broker_id)

    def _add_reconfigurables(self, config: KafkaConfig) -> None:
        """The components KIP-226 changes at runtime."""
        assert self.socket_server is not None
        dynamic = self.dynamic
        proposed = ProposedListenerSecurity(self.scram_credentials)
        dynamic.add_reconfigurable(self.connection_quotas)
        dynamic.add_reconfigurable(
            DynamicThreadPool(
                config,
                self.handler_pool,
                self.socket_server,
                lambda n: self.metrics.idle_meter(
                    self.data_channel.plane.handler_idle_metric,
                    {"plane": self.data_channel.plane.name},
                    pool_size=n,
                ).set_pool_size(n),
                self.replica_fetchers.resize,
            )
        )
        dynamic.add_reconfigurable(
            DynamicListenerConfig(
                config,
                self.socket_server,
                self.sasl_listeners,
                proposed,
                self.registrar.update,
            )
        )
        self.metric_reporters = DynamicMetricsReporters(config, self.metrics)
        self.lifecycle.on_shutdown("close metrics reporters", self.metric_reporters.close)
        dynamic.add_reconfigurable(self.metric_reporters)
        dynamic.add_reconfigurable(
            DynamicListenerSecurity(self.socket_server, self.tls, self.sasl_listeners, proposed)
        )
        if self.log_manager.cleaner is not None:  # log.cleaner.threads and its siblings
            dynamic.add_reconfigurable(self.log_manager.cleaner)

    def _await_own_metadata(self) -> None:
        """Wait (bounded) for the controller's first UpdateMetadata to name this broker, so
        "started" means clients are answered with the cluster, not an empty one; the
        client requests held meanwhile are then served."""
        timeout_s = self.config.get_int("zookeeper.session.timeout.ms") / 1000
        if not self.cache.wait_for(lambda s: self.broker_id in s.brokers, timeout_s):
            log.warning("no metadata from the controller yet", broker_id=self.broker_id)
        self.catch_up.complete()

    def _on_new_session(self) -> None:
        """A new ZooKeeper session: the old one's ephemeral nodes are gone. Register again
        and stand for controller again."""
        log.info("metadata store session renewed: registering again", broker_id=self.broker_id)
        self.controller.resign()
        self.registrar.register_again()
        self.controller.elect()

    def _coordinator_of(self, group_id: str) -> int | None:
        """The live broker coordinating ``group_id`` (None before any metadata); a test's
        ``coordinator_overrides`` entry first, while that broker is alive."""
        moved = self.coordinator_overrides.get(group_id)
        if moved is not None and moved in self.cache.snapshot.brokers:
            return moved
        return coordinator_for(
            group_id,
            list(self.cache.snapshot.brokers),
            self.config.get_int("offsets.topic.num.partitions"),
        )

    def _txn_coordinator_of(self, transactional_id: str) -> int | None:
        """The live broker coordinating ``transactional_id`` (None before any metadata)."""
        return coordinator_for(
            transactional_id,
            list(self.cache.snapshot.brokers),
            self.config.get_int("transaction.state.log.num.partitions"),
        )

    def _owns_transactional_id(self, transactional_id: str) -> bool:
        return self._txn_coordinator_of(transactional_id) in (None, self.broker_id)

    def _marker_leader(self, tp: TopicPartition) -> int | None:
        """Where a transaction marker for ``tp`` goes: the partition's live leader, the
        group coordinator for ``__consumer_offsets``; UNKNOWN_PARTITION for a deleted
        topic, None while the partition has no live leader."""
        brokers = self.cache.snapshot.brokers
        if tp.topic == GROUP_METADATA_TOPIC:
            return partition_leader(tp.partition, list(brokers))
        topic = self.cache.topic(tp.topic)
        if topic is None or tp.partition not in topic.partitions:
            return UNKNOWN_PARTITION
        leader = topic.partitions[tp.partition].leader
        return leader if leader in brokers else None

    def _topic_id(self, topic: str) -> uuid.UUID | None:
        info = self.cache.topic(topic)
        return info.topic_id if info else None

    def _partition_exists(self, topic: str, partition: int) -> bool:
        info = self.cache.topic(topic)
        return info is not None and partition in info.partitions

    def _handler_pool(self, channel: RequestChannel) -> RequestHandlerPool:
        plane = channel.plane
        max_bytes = self.static_config.get_int("kplane.produce.on.network.threads.max.bytes")
        if not plane.is_control and max_bytes > 0:
            priority = self.priority

            def on_processor(request: Request) -> None:
                if priority is not None:
                    priority.yield_to_control()  # as a data-plane handler thread does
                self.apis.handle(request, channel)

            channel.serve_on_processors(PROCESSOR_APIS, on_processor, max_bytes)
        threads = plane.handler_threads
        meter = self.metrics.idle_meter(
            plane.handler_idle_metric, {"plane": plane.name}, pool_size=threads
        )

        def on_idle(idle_ns: int, _total_ns: int) -> None:
            meter.record_idle(idle_ns)

        return RequestHandlerPool(
            channel,
            lambda request: self.apis.handle(request, channel),
            threads,
            on_idle,
            None if plane.is_control else self.priority,
        )

    def _processor_idle_meter(
        self, processor_id: int, listener: str, plane: Plane
    ) -> Callable[[int, int], None]:
        meter = self.metrics.idle_meter(
            plane.processor_idle_metric,
            {"networkProcessor": str(processor_id), "listener": listener},
        )

        def on_idle(idle_ns: int, _total_ns: int) -> None:
            meter.record_idle(idle_ns)

        return on_idle

    def advertised(self, listener_name: str) -> EndPoint | None:
        """The advertised endpoint, with port 0 replaced by the port actually bound."""
        endpoint = self.config.advertised(listener_name)
        if endpoint is None:
            return None
        if endpoint.port == 0 and listener_name in self.bound:
            return dataclasses.replace(endpoint, port=self.bound[listener_name].port)
        return endpoint

    def _registration(self) -> BrokerRegistration:
        endpoints = tuple(
            ep
            for ep in (self.advertised(e.listener_name) for e in self.config.advertised_listeners)
            if ep is not None
        )
        return BrokerRegistration(self.broker_id, endpoints, self.config.get("broker.rack"))

    def _start_metrics_http(self) -> None:
        port = self.config.get_int("kplane.metrics.port")
        if port < 0:
            return
        self.metrics_http = MetricsHttpServer(
            self.metrics,
            self.config.get_str("kplane.metrics.host"),
            port,
            self.priority.yield_to_control if self.priority is not None else None,
        )
        self.lifecycle.on_shutdown("stop metrics http", self.metrics_http.stop)
        self.metrics_http.start()
        log.info("metrics exposed", url=self.metrics_http.url)

    # shutdown ------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stop accepting, let in-flight requests finish, close connections, stop threads:
        start-up reversed (see ``Lifecycle``); the error that stopped a start-up is the one
        reported."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        started = time.monotonic()
        self.lifecycle.shutdown()
        if self._started:
            log.info(
                "stopped", broker_id=self.broker_id, seconds=round(time.monotonic() - started, 3)
            )
        self._shut_down.set()

    def await_shutdown(self, timeout_s: float | None = None) -> bool:
        """Wait until a shutdown (asked for, or the broker's own) has finished (Kafka's
        ``awaitShutdown``); False when ``timeout_s`` passed first."""
        return self._shut_down.wait(timeout_s)

    def _drain(self) -> None:
        assert self.socket_server is not None
        if not self.socket_server.wait_for_in_flight(SHUTDOWN_DRAIN_SECONDS):
            log.warning("shutdown: requests still in flight after drain timeout")
