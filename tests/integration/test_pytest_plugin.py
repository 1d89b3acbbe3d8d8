"""The pytest plugin as a user gets it: the README's example file run by pytest in a
directory of its own (no conftest), through the installed ``pytest11`` entry point."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.repo import REPO_ROOT


def _readme_example() -> str:
    readme = (REPO_ROOT / "README.md").read_text()
    section = readme.split("## Testing your client against kplane", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found is not None
    return found.group(1)


def _pytest(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=directory, capture_output=True, text=True, timeout=180, check=False,
    )


def test_the_readme_example_passes_with_no_conftest(tmp_path: Path) -> None:
    (tmp_path / "test_my_client.py").write_text(_readme_example())
    done = _pytest(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout


def test_a_cluster_fixture_replicates(tmp_path: Path) -> None:
    (tmp_path / "test_cluster.py").write_text(
        "from confluent_kafka import Producer\n"
        "from confluent_kafka.admin import AdminClient, NewTopic\n\n\n"
        "def test_rf2(kafka_cluster):\n"
        "    cluster = kafka_cluster(brokers=2)\n"
        "    admin = AdminClient({'bootstrap.servers': cluster.bootstrap_servers})\n"
        "    admin.create_topics([NewTopic('t', 1, 2)])['t'].result(15)\n"
        "    p = Producer({'bootstrap.servers': cluster.bootstrap_servers, 'acks': 'all'})\n"
        "    p.produce('t', b'x')\n"
        "    assert p.flush(20) == 0\n"
        "    (part,) = admin.list_topics('t', timeout=10).topics['t'].partitions.values()\n"
        "    assert sorted(part.replicas) == [0, 1]\n"
    )
    done = _pytest(tmp_path)
    output = done.stdout + done.stderr
    assert done.returncode == 0 or "skipped" in done.stdout, output
    assert "1 passed" in done.stdout or "no ZooKeeper" in output, output


def test_loading_the_plugin_imports_no_broker_and_no_client_library() -> None:
    code = (
        "import sys, kplane.testing.plugin\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in "
        "('confluent_kafka', 'kafka', 'aiokafka', 'hypothesis', 'kio') "
        "or m.startswith(('kplane.broker', 'kplane.client'))]\n"
        "print(heavy)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd="/", check=True
    )
    assert done.stdout.strip() == "[]"


def test_the_plugin_is_registered_by_the_entry_point() -> None:
    from importlib.metadata import entry_points

    (entry,) = [e for e in entry_points(group="pytest11") if e.name == "kplane"]
    assert entry.value == "kplane.testing.plugin"
