"""configs/secure.properties as shipped: `kplane certs create`, `kplane serve`, `kplane scram`,
then real clients on each of its three listeners."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from tests.integration.helpers import numbered_round_trip
from tests.integration.test_serve import events_named, wait_for_event
from tests.repo import REPO_ROOT


def _kplane(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kplane", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
        check=False,
    )


@pytest.mark.slow
def test_secure_example_config(broker_process, tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    made = _kplane("certs", "create", "--dir", str(certs), "--hosts", "localhost,127.0.0.1")
    assert made.returncode == 0, made.stderr
    handle = broker_process(
        "configs/secure.properties",
        "listeners=INTERNAL://127.0.0.1:0,SSL://localhost:0,SASL_SSL://localhost:0",
        f"ssl.keystore.location={certs / 'broker.p12'}",
        f"ssl.truststore.location={certs / 'truststore.p12'}",
        plaintext_port=False,
    )
    wait_for_event(handle.log_text, "started", handle.process)
    ports = {e["listener"]: e["port"] for e in events_named(handle.log_text(), "listener bound")}
    assert sorted(ports) == ["INTERNAL", "SASL_SSL", "SSL"]

    added = _kplane(
        "scram",
        "--bootstrap-server",
        f"127.0.0.1:{ports['INTERNAL']}",
        "add",
        "alice",
        "--password",
        "alice-secret",
    )
    assert added.returncode == 0, added.stderr
    described = _kplane("scram", "--bootstrap-server", f"127.0.0.1:{ports['INTERNAL']}", "describe")
    assert "alice: SCRAM-SHA-512 (iterations=4096)" in described.stdout

    # The same, through the SASL_SSL listener with --command-config (PLAIN user bob).
    command_config = tmp_path / "client.properties"
    command_config.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.username=bob\n"
        f"sasl.password=bob-secret\nssl.ca.location={certs / 'ca.pem'}\n"
    )
    secure = _kplane(
        "scram",
        "--bootstrap-server",
        f"localhost:{ports['SASL_SSL']}",
        "--command-config",
        str(command_config),
        "describe",
    )
    assert "alice: SCRAM-SHA-512 (iterations=4096)" in secure.stdout, secure.stderr

    tls = {"ssl.ca.location": str(certs / "ca.pem")}
    scram = {
        **tls,
        "bootstrap.servers": f"localhost:{ports['SASL_SSL']}",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": "alice-secret",
    }
    assert len(numbered_round_trip(scram, "secure-scram", 100)) == 100
    plain = {
        **scram,
        "sasl.mechanism": "PLAIN",
        "sasl.username": "bob",
        "sasl.password": "bob-secret",
    }
    assert len(numbered_round_trip(plain, "secure-plain", 100)) == 100
    mtls = {
        **tls,
        "bootstrap.servers": f"localhost:{ports['SSL']}",
        "security.protocol": "SSL",
        "ssl.certificate.location": str(certs / "client.pem"),
        "ssl.key.location": str(certs / "client-key.pem"),
    }
    assert len(numbered_round_trip(mtls, "secure-mtls", 100)) == 100
    # Required client auth: no certificate, no connection; the broker keeps serving.
    without_cert = {
        k: v for k, v in mtls.items() if not k.startswith("ssl.c") and k != "ssl.key.location"
    }
    with pytest.raises(KafkaException):
        AdminClient(
            {**without_cert, "ssl.ca.location": str(certs / "ca.pem"), "socket.timeout.ms": 3000}
        ).list_topics(timeout=5)
    assert AdminClient(scram).list_topics(timeout=10).brokers
