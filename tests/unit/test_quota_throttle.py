"""ClientQuotas on the response path: what each answer records and who is never throttled
(the control plane, controller requests, followers' fetches, brokers' AddPartitionsToTxn,
an acks=0 Produce's request time), over a real quota store in memory."""

from __future__ import annotations

from types import SimpleNamespace

from kplane.broker.config.endpoint import SecurityProtocol
from kplane.broker.config.kafka_config import KafkaConfig
from kplane.broker.metadata.config_changes import ConfigChangeListener
from kplane.broker.metadata.kafka_store import KafkaMetadataClient
from kplane.broker.metadata.store import EmbeddedMetadataStore
from kplane.broker.metrics.registry import CONTROL_PLANE, DATA_PLANE
from kplane.broker.network.request_channel import Request
from kplane.broker.quota.client_quotas import ClientQuotas
from kplane.broker.quota.entity import QuotaEntity
from kplane.broker.quota.store import ClientQuotaStore
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.framing import RequestHeader
from tests.unit.test_quota_manager import Clock


def quotas_over_a_store() -> tuple[
    ClientQuotas, ClientQuotaStore, list[tuple[str | None, int | None]]
]:
    store = ClientQuotaStore(KafkaMetadataClient(EmbeddedMetadataStore(None)))
    config = KafkaConfig.from_properties({"log.dirs": "/tmp/unused"}, log_unused=False)
    ips: list[tuple[str | None, int | None]] = []
    quotas = ClientQuotas(
        config, store, ip_quotas=lambda ip, rate: ips.append((ip, rate)), clock=Clock()
    )
    listener = ConfigChangeListener(store.client.store)
    listener.subscribe(quotas.on_config_change)
    listener.start()
    quotas.load()
    return quotas, store, ips


def request(
    api_key: int, version: int = 9, plane: str = DATA_PLANE, size: int = 100_000
) -> Request:
    return Request(
        processor=None,  # type: ignore[arg-type]
        connection_id="c",
        listener_name="PLAINTEXT",
        security_protocol=SecurityProtocol.PLAINTEXT,
        principal="User:alice",
        client_host="127.0.0.1",
        client_port=1,
        header=RequestHeader(api_key, version, 1, "app", 10),
        frame=b"x" * size,
        plane=plane,
    )


def test_configs_apply_from_the_store_and_its_notifications() -> None:
    quotas, store, ips = quotas_over_a_store()
    store.alter(QuotaEntity.of(user="alice"), {"producer_byte_rate": 1000.0})
    store.alter(QuotaEntity.of(ip=None), {"connection_creation_rate": 5.0})
    assert quotas.produce.quota("alice", "app") == 1000
    assert ips == [(None, 5)]
    store.alter(QuotaEntity.of(user="alice"), {"producer_byte_rate": None})
    assert quotas.produce.quota("alice", "app") is None
    # a broker started later reads what is stored
    later = ClientQuotas(
        KafkaConfig.from_properties({"log.dirs": "/tmp/unused"}, log_unused=False), store
    )
    store.alter(QuotaEntity.of(client_id="app"), {"consumer_byte_rate": 10.0})
    later.load()
    assert later.fetch.quota("alice", "app") == 10
    # what changed while it followed no notification is taken at the next load, removals too
    store.alter(QuotaEntity.of(client_id="app"), {"consumer_byte_rate": None})
    store.alter(QuotaEntity.of(client_id=None), {"consumer_byte_rate": 20.0})
    later.load()
    assert later.fetch.quota("alice", "app") == 20


def test_who_is_never_throttled() -> None:
    quotas, store, _ = quotas_over_a_store()
    store.alter(
        QuotaEntity.of(client_id=None), {"producer_byte_rate": 1.0, "consumer_byte_rate": 1.0}
    )
    produce = SimpleNamespace(acks=1)
    assert quotas.throttle_time_ms(request(ApiKey.PRODUCE), produce, 10) > 0
    assert quotas.throttle_time_ms(request(ApiKey.PRODUCE, plane=CONTROL_PLANE), produce, 10) == 0
    for api in (ApiKey.LEADER_AND_ISR, ApiKey.UPDATE_METADATA, ApiKey.WRITE_TXN_MARKERS):
        assert quotas.throttle_time_ms(request(api), None, 10) == 0
    follower = SimpleNamespace(replica_id=1)
    consumer = SimpleNamespace(replica_id=-1)
    assert quotas.throttle_time_ms(request(ApiKey.FETCH, 12), follower, 10**6) == 0
    assert quotas.throttle_time_ms(request(ApiKey.FETCH, 12), consumer, 10**6) > 0
    assert quotas.throttle_time_ms(request(ApiKey.ADD_PARTITIONS_TO_TXN, 4), None, 10) == 0


def test_request_time_but_not_for_acks_0() -> None:
    quotas, store, _ = quotas_over_a_store()
    store.alter(QuotaEntity.of(user=None), {"request_percentage": 0.0001})
    busy = request(ApiKey.PRODUCE, size=10)
    busy.dequeue_ns = 1  # a handler busy since long ago
    assert quotas.throttle_time_ms(busy, SimpleNamespace(acks=0), 0) == 0
    assert busy.record_network_time is None
    assert quotas.throttle_time_ms(busy, SimpleNamespace(acks=1), 10) == 1000  # one window
    assert busy.record_network_time is not None
