"""ProposedListenerSecurity: a proposed config's keystores load once for its validation and
its reconfiguration (real PKCS12 keystores)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kplane.broker.config.errors import ConfigException
from kplane.broker.config.kafka_config import KafkaConfig
from kplane.broker.metadata.kafka_store import KafkaMetadataClient
from kplane.broker.metadata.store import EmbeddedMetadataStore
from kplane.broker.security.scram import ScramCredentialStore
from kplane.broker.server.dynamic_listeners import ProposedListenerSecurity
from kplane.common.certs import create_test_pki


def tls_config(tmp_path: Path, keystore: Path, password: str) -> KafkaConfig:
    return KafkaConfig.from_properties(
        {
            "broker.id": "0",
            "log.dirs": str(tmp_path / "logs"),
            "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
            "listener.name.ssl.ssl.keystore.type": "PKCS12",
            "listener.name.ssl.ssl.keystore.location": str(keystore),
            "listener.name.ssl.ssl.keystore.password": password,
        },
        log_unused=False,
    )


def test_one_load_per_proposed_config(tmp_path: Path) -> None:
    pki = create_test_pki(tmp_path / "pki", ["localhost"])
    proposed = ProposedListenerSecurity(
        ScramCredentialStore(KafkaMetadataClient(EmbeddedMetadataStore(None)))
    )
    config = tls_config(tmp_path, pki.broker_p12, pki.password)
    tls, sasl = proposed.of(config)
    assert set(tls) == {"SSL"} and sasl == {}
    assert proposed.of(config)[0]["SSL"] is tls["SSL"]  # the same load
    again = tls_config(tmp_path, pki.broker_p12, pki.password)
    assert proposed.of(again)[0]["SSL"] is not tls["SSL"]  # another config: loaded anew

    with pytest.raises(ConfigException, match=r"ssl\.keystore\.location"):
        proposed.of(tls_config(tmp_path, tmp_path / "missing.p12", pki.password))
