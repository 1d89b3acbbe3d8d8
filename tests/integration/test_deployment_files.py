"""Deployment files: configs/cluster/broker-N.properties, the Dockerfile and docker-compose.yml.

Docker does not run here, so docker-compose.yml is checked as far as Debian's
docker-compose 1.29 can without a daemon: ``config -q`` validates it, ``config`` prints it
normalised, and each broker's command (config file plus ``--override``s, what the image's
``kplane serve`` entrypoint receives) is loaded with kplane's own config loader.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kplane.broker.config.endpoint import EndPoint
from kplane.broker.config.kafka_config import KafkaConfig

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
CLUSTER_CONFIGS = sorted((ROOT / "configs" / "cluster").glob("broker-*.properties"))
BROKERS = ("kafka-0", "kafka-1", "kafka-2")
ZOOKEEPER = "zookeeper"
# `make test` sets this: there a missing docker-compose is a failure, not a skip.
REQUIRE_COMPOSE = os.environ.get("KPLANE_REQUIRE_COMPOSE") == "1"
# YAML to JSON, run by docker-compose's own interpreter (Debian's depends on python3-yaml).
YAML_TO_JSON = "import json, sys, yaml; json.dump(yaml.safe_load(sys.stdin), sys.stdout)"


def _unavailable(reason: str) -> None:
    if REQUIRE_COMPOSE:
        pytest.fail(f"{reason} (KPLANE_REQUIRE_COMPOSE=1)")
    pytest.skip(reason)


def _compose(binary: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [binary, "-f", str(COMPOSE_FILE), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _yaml_to_data(text: str, compose_binary: str) -> Any:
    """Parse YAML with PyYAML if this interpreter has it, else with docker-compose's."""
    try:
        import yaml  # type: ignore[import-untyped]
    except ImportError:
        pass
    else:
        return yaml.safe_load(text)
    first = Path(compose_binary).read_bytes()[:200].split(b"\n", 1)[0].decode(errors="replace")
    interpreter = shlex.split(first[2:]) if first.startswith("#!") else []
    if not interpreter or "python" not in " ".join(interpreter):
        _unavailable(f"no PyYAML to parse `docker-compose config` ({compose_binary} is no script)")
    done = subprocess.run(
        [*interpreter, "-c", YAML_TO_JSON], input=text, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    """docker-compose.yml as `docker-compose config` normalises it, after `config -q`."""
    binary = shutil.which("docker-compose")
    if binary is None:
        _unavailable("docker-compose is not installed (`make setup` installs it)")
    assert binary is not None
    quiet = _compose(binary, "config", "-q")
    assert quiet.returncode == 0, f"docker-compose config -q failed:\n{quiet.stderr}"
    printed = _compose(binary, "config")
    assert printed.returncode == 0, printed.stderr
    data = _yaml_to_data(printed.stdout, binary)
    assert isinstance(data, dict)
    return data


def _broker_config(service: dict[str, Any]) -> KafkaConfig:
    """What `kplane serve COMMAND` loads: the command is CONFIG [--override k=v]..., its
    CONFIG relative to the image's WORKDIR, which holds a copy of the project's configs."""
    command = service["command"]
    assert isinstance(command, list), "command must be a list (exec form)"
    path, rest = command[0], command[1:]
    assert len(rest) % 2 == 0 and all(flag == "--override" for flag in rest[::2]), command
    assert (ROOT / path).is_file(), f"{path} is not in the project (nor the image)"
    return KafkaConfig.load(str(ROOT / path), rest[1::2])


def _published(service: dict[str, Any]) -> dict[int, int]:
    """Container port -> published host port, from long or short port syntax."""
    mapping: dict[int, int] = {}
    for entry in service.get("ports", []):
        if isinstance(entry, dict):
            target, published = entry["target"], entry.get("published")
        else:
            parts = str(entry).split("/")[0].split(":")
            target, published = parts[-1], parts[-2] if len(parts) > 1 else None
        assert published is not None, f"port {target} published on a random host port"
        mapping[int(target)] = int(published)
    return mapping


def _named_volumes(service: dict[str, Any], declared: dict[str, Any]) -> dict[str, str]:
    """Mount point -> named volume, from long or short volume syntax."""
    mounts = {}
    for entry in service.get("volumes", []):
        if isinstance(entry, dict):
            source, target = entry.get("source"), entry["target"]
        else:
            source, _, target = str(entry).partition(":")
            target = target.split(":")[0]
        if source in declared:
            mounts[target] = source
    return mounts


def _by_name(endpoints: tuple[EndPoint, ...]) -> dict[str, EndPoint]:
    return {e.listener_name: e for e in endpoints}


def test_compose_has_zookeeper_and_three_brokers(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {ZOOKEEPER, *BROKERS}
    zookeeper = services[ZOOKEEPER]
    assert zookeeper["image"].startswith("zookeeper:3.8")
    assert "ZOO_4LW_COMMANDS_WHITELIST" in zookeeper.get("environment", {})
    assert not zookeeper.get("ports"), "ZooKeeper must stay on the compose network"
    for name in BROKERS:
        service = services[name]
        assert Path(service["build"]["context"]).resolve() == ROOT, name
        assert "entrypoint" not in service, f"{name} must keep the image's `kplane serve`"
        assert ZOOKEEPER in service["depends_on"], name
        assert "network_mode" not in service, name


def test_compose_brokers_listeners(compose: dict[str, Any]) -> None:
    host_ports = set()
    for name in BROKERS:
        service = compose["services"][name]
        config = _broker_config(service)
        bound = _by_name(config.listeners)
        advertised = _by_name(config.advertised_listeners)
        assert set(bound) == set(advertised) == {"CLIENT", "INTERNAL", "CONTROLLER"}, name
        assert all(e.host == "0.0.0.0" for e in bound.values()), f"{name} binds in-container"
        published = _published(service)

        # CLIENT: published, and advertised as the host sees it.
        client = advertised["CLIENT"]
        assert published == {bound["CLIENT"].port: client.port}, (name, published)
        assert client.host == "localhost", name
        host_ports.add(client.port)

        # INTERNAL and CONTROLLER: unpublished, advertised under the service's name.
        for listener in ("INTERNAL", "CONTROLLER"):
            assert bound[listener].port not in published, f"{name} publishes {listener}"
            assert advertised[listener].host == name, (name, listener)
            assert advertised[listener].port == bound[listener].port, (name, listener)
        assert config.inter_broker_listener_name == "INTERNAL", name
        assert config.control_plane_listener_name == "CONTROLLER", name
    assert len(host_ports) == len(BROKERS), "brokers share a published port"


def test_compose_brokers_identity_zookeeper_and_data(compose: dict[str, Any]) -> None:
    ids, volumes = set(), set()
    for name in BROKERS:
        service = compose["services"][name]
        config = _broker_config(service)
        ids.add(config.broker_id)
        servers, _, chroot = config.props["zookeeper.connect"].partition("/")
        assert [s.split(":")[0] for s in servers.split(",")] == [ZOOKEEPER], name
        assert chroot == "kplane", name

        # log.dirs lie on a named volume of the broker's own.
        mounts = _named_volumes(service, compose.get("volumes") or {})
        for log_dir in config.log_dirs:
            sources = [s for t, s in mounts.items() if Path(log_dir).is_relative_to(t)]
            assert sources, f"{name}: log dir {log_dir} is not on a named volume"
            volumes.add(sources[0])
    assert ids == {0, 1, 2}
    assert len(volumes) == len(BROKERS), "brokers share a data volume"


def test_cluster_properties_load_and_do_not_collide() -> None:
    assert [p.name for p in CLUSTER_CONFIGS] == [f"broker-{n}.properties" for n in range(3)]
    configs = [KafkaConfig.load(str(path)) for path in CLUSTER_CONFIGS]
    assert [c.broker_id for c in configs] == [0, 1, 2]
    ports = [(e.host, e.port) for c in configs for e in c.listeners]
    assert len(ports) == 9 and len(set(ports)) == 9, ports
    assert len({d for c in configs for d in c.log_dirs}) == 3
    for config in configs:
        assert {e.listener_name for e in config.listeners} == {"CLIENT", "INTERNAL", "CONTROLLER"}
        assert config.inter_broker_listener_name == "INTERNAL"
        assert config.control_plane_listener_name == "CONTROLLER"
        assert config.props["zookeeper.connect"] == "127.0.0.1:2181/kplane"
        assert config.props["zookeeper.session.timeout.ms"] == "6000"


def _dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuations joined, comments dropped."""
    instructions, pending = [], ""
    for raw in (ROOT / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, args = (pending + line).partition(" ")
        instructions.append((keyword.upper(), args.strip()))
        pending = ""
    return instructions


def test_dockerfile() -> None:
    instructions = _dockerfile()
    keywords = [k for k, _ in instructions]
    args = {k: a for k, a in instructions}  # the last of each counts
    assert keywords[0] == "FROM" and args["FROM"].startswith("python:3.11"), args["FROM"]
    assert json.loads(args["ENTRYPOINT"]) == ["kplane", "serve"]
    cmd = json.loads(args["CMD"])
    assert (ROOT / cmd[0]).is_file(), f"default config {cmd[0]} is not in the project"
    assert args["USER"] not in ("root", "0"), "the broker must not run as root"
    assert keywords.index("USER") > max(i for i, k in enumerate(keywords) if k == "RUN")
    runs = " ".join(a for k, a in instructions if k == "RUN")
    assert "pip install . " in runs + " ", "the image installs the project without extras"
    copied = {a.split()[0] for k, a in instructions if k == "COPY"}
    assert {"kplane", "configs"} <= copied
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", "data"} <= set(ignored)
