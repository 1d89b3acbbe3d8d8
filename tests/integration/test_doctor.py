"""``kplane doctor`` against brokers set up the ways clients most often trip over."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kplane.common.certs import PkiFiles
from kplane.testing.plugin import free_port
from tests.repo import REPO_ROOT

from .helpers import with_inter_broker_sasl


def doctor(bootstrap: str, config: Path | None = None) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "kplane", "doctor", "--bootstrap-server", bootstrap]
    if config is not None:
        args += ["--command-config", str(config)]
    return subprocess.run(
        args, capture_output=True, text=True, cwd=REPO_ROOT, timeout=120, check=False
    )


def test_a_healthy_plaintext_broker(broker_factory) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    broker = broker_factory({"listeners": f"PLAINTEXT://127.0.0.1:{port}"})
    done = doctor(broker.bootstrap_servers)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        f"bootstrap {broker.bootstrap_servers}: OK (PLAINTEXT)",
        "the bootstrap server is listener PLAINTEXT of broker 0",
        f"broker 0 advertises {broker.bootstrap_servers}: OK",
    ]


def test_an_advertised_name_that_does_not_resolve(broker_factory) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    broker = broker_factory({
        "listeners": f"CLIENT://127.0.0.1:{port},INTERNAL://127.0.0.1:0",
        "advertised.listeners": f"CLIENT://kafka-0.invalid:{port},INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
    })
    done = doctor(broker.bootstrap("CLIENT"))
    assert done.returncode == 1
    assert done.stdout.splitlines()[-1] == (
        f"broker 0 advertises kafka-0.invalid:{port}: kafka-0.invalid does not resolve from "
        "here; check advertised.listeners of broker 0 for this listener"
    )


def test_an_advertised_port_nothing_listens_on(broker_factory) -> None:  # type: ignore[no-untyped-def]
    port, wrong = free_port(), free_port()
    broker = broker_factory({
        "listeners": f"CLIENT://127.0.0.1:{port},INTERNAL://127.0.0.1:0",
        "advertised.listeners": f"CLIENT://127.0.0.1:{wrong},INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
    })
    done = doctor(broker.bootstrap("CLIENT"))
    assert done.returncode == 1
    assert f"broker 0 advertises 127.0.0.1:{wrong}: nothing listens on 127.0.0.1:{wrong}" in (
        done.stdout
    )


def test_a_tls_listener_probed_with_plaintext(broker_factory, pki: PkiFiles) -> None:  # type: ignore[no-untyped-def]
    broker = broker_factory({
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "listener.name.ssl.ssl.keystore.type": "PKCS12",
        "listener.name.ssl.ssl.keystore.location": str(pki.broker_p12),
        "listener.name.ssl.ssl.keystore.password": pki.password,
    })
    done = doctor(broker.bootstrap("SSL"))
    assert done.returncode == 1
    assert "this listener speaks TLS but security.protocol is PLAINTEXT" in done.stdout


def test_a_sasl_listener_without_credentials_then_with(broker_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    broker = broker_factory(with_inter_broker_sasl({
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            'user_alice="alice-secret";'
        ),
    }))
    bootstrap = broker.bootstrap("SASL_PLAINTEXT")
    done = doctor(bootstrap)
    assert done.returncode == 1
    assert "it expects SASL authentication, but security.protocol is PLAINTEXT" in done.stdout

    config = tmp_path / "client.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.username=alice\nsasl.password=wrong\n"
    )
    refused = doctor(bootstrap, config)
    assert refused.returncode == 1
    assert "SASL authentication failed" in refused.stdout
    config.write_text(config.read_text().replace("wrong", "alice-secret"))
    good = doctor(bootstrap, config)
    assert good.returncode == 0, good.stdout
    assert f"broker 0 advertises {bootstrap}: OK" in good.stdout


def test_the_control_plane_listener_as_bootstrap(broker_factory) -> None:  # type: ignore[no-untyped-def]
    ports = [free_port() for _ in range(3)]
    broker = broker_factory({
        "listeners": ",".join(
            f"{name}://127.0.0.1:{port}"
            for name, port in zip(("CLIENT", "INTERNAL", "CONTROLLER"), ports, strict=True)
        ),
        "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT,"
        "CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "control.plane.listener.name": "CONTROLLER",
    })
    done = doctor(broker.bootstrap("CONTROLLER"))
    assert "the bootstrap server is listener CONTROLLER of broker 0" in done.stdout
    assert (
        "warning: CONTROLLER is the control-plane listener (control.plane.listener.name): "
        "it is for the controller's requests, and clients on it queue with them; use a "
        "client listener instead (CLIENT)"
    ) in done.stdout


def test_an_unreachable_bootstrap_is_one_sentence() -> None:
    done = doctor(f"127.0.0.1:{free_port()}")
    assert done.returncode == 1
    (line,) = done.stdout.splitlines()
    assert line.startswith("bootstrap 127.0.0.1:") and "nothing listens on" in line
    assert "Traceback" not in done.stderr
