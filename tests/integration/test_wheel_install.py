"""kplane as a user installs it: a wheel built from the checkout holds one top-level
package, and installed (not editable) in a fresh virtual environment it gives the
``kplane`` command and the pytest fixtures to a project whose own packages are named
``testing``, ``tools``, ``common`` and ``client``."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.repo import REPO_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("wheel")]

USER_PACKAGES = ("testing", "tools", "common", "client")

USER_TEST = '''\
from confluent_kafka import Consumer, Producer

from client.naming import topic_name
from common.values import payload
from testing.mine import MARK
from tools.helpers import group

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret";'
)


def test_own_packages_and_the_broker(kafka_broker):
    assert MARK == "mine"
    kafka_broker.create_topic(topic_name())
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    producer.produce(topic_name(), payload())
    assert producer.flush(10) == 0
    consumer = Consumer({
        "bootstrap.servers": kafka_broker.bootstrap_servers,
        "group.id": group(), "auto.offset.reset": "earliest",
    })
    consumer.subscribe([topic_name()])
    message = None
    for _ in range(100):
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            break
    consumer.close()
    assert message is not None and message.value() == payload()


def test_a_sasl_plain_listener(kafka_broker_factory):
    broker = kafka_broker_factory(
        listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        sasl_enabled_mechanisms="PLAIN",
        overrides={"listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS},
    )
    producer = Producer({
        "bootstrap.servers": broker.bootstrap("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": "admin-secret",
    })
    producer.produce("authenticated", payload())
    assert producer.flush(10) == 0
'''

USER_MODULES = {
    "testing/mine.py": 'MARK = "mine"\n',
    "tools/helpers.py": 'def group() -> str:\n    return "users-own-group"\n',
    "common/values.py": 'def payload() -> bytes:\n    return b"from the user\'s project"\n',
    "client/naming.py": 'def topic_name() -> str:\n    return "users-topic"\n',
}


def _run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"{args}:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    build = tmp_path_factory.mktemp("source")
    # Built from a copy of what the Dockerfile copies too, so the build leaves nothing in
    # the checkout (build/, egg-info).
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, build / name)
    shutil.copytree(REPO_ROOT / "kplane", build / "kplane",
                    ignore=shutil.ignore_patterns("__pycache__"))
    _run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", out, build)
    (found,) = out.glob("kplane-*.whl")
    return found


def test_the_wheel_holds_one_top_level_package(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        tops = {name.split("/", 1)[0] for name in archive.namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"kplane"}, sorted(tops)


def test_a_user_project_with_its_own_testing_package(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    # pytest's bound as kplane's dev extra has it (pytest 9.2 breaks xdist_group).
    _run(python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", wheel,
         "pytest>=8,<9.2", "confluent-kafka>=2.5")
    assert "serve" in _run(venv / "bin" / "kplane", "--help").stdout
    assert "serve" in _run(python, "-m", "kplane", "--help").stdout

    project = tmp_path / "project"
    for package in USER_PACKAGES:
        (project / package).mkdir(parents=True)
        (project / package / "__init__.py").write_text("")
    for path, text in USER_MODULES.items():
        (project / path).write_text(text)
    (project / "tests").mkdir()
    (project / "tests" / "test_users_own.py").write_text(USER_TEST)
    done = subprocess.run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=project, capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout, done.stdout
