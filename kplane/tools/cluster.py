"""``kplane cluster up|down``: ZooKeeper and N brokers on this machine, for trying a cluster.

Each broker gets three listeners — CLIENT (clients), INTERNAL (inter-broker) and CONTROLLER
(``control.plane.listener.name``, KIP-291) — on 127.0.0.1 ports ``<base> + 100*id + 0/1/2``
(9092/9093/9094, 9192/... by default; ``--base-port 0`` picks free ports), registers in
ZooKeeper under the chroot ``/kplane``, and logs to ``DIR/broker-<id>.log``. ``DIR/cluster.json``
remembers the processes so ``kplane cluster down`` stops them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from kplane.tools.serve_process import ServeProcess, spawn_serve
from kplane.tools.zookeeper import ZooKeeperServer, unavailable_reason

STATE_FILE = "cluster.json"
DEFAULT_DIR = Path("data/cluster")
STARTUP_TIMEOUT_S = 60.0


def add_parser(sub: Any) -> None:
    """Register the ``cluster`` subcommand."""
    parser = sub.add_parser("cluster", help="start or stop a local ZooKeeper-backed cluster")
    actions = parser.add_subparsers(dest="cluster_action", required=True)
    up = actions.add_parser("up", help="start ZooKeeper and the brokers, print the bootstrap")
    up.add_argument("--brokers", type=int, default=3, help="number of brokers (default 3)")
    up.add_argument("--dir", type=Path, default=DEFAULT_DIR, help=f"state dir ({DEFAULT_DIR})")
    up.add_argument(
        "--base-port", type=int, default=9092, help="CLIENT port of broker 0; 0 = free ports"
    )
    up.add_argument(
        "--session-timeout-ms",
        type=int,
        default=6000,
        help="zookeeper.session.timeout.ms of the brokers (default 6000)",
    )
    up.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="broker property for every broker (repeatable)",
    )
    up.set_defaults(func=run_up)
    down = actions.add_parser("down", help="stop the brokers and ZooKeeper started by up")
    down.add_argument("--dir", type=Path, default=DEFAULT_DIR, help=f"state dir ({DEFAULT_DIR})")
    down.set_defaults(func=run_down)


SINGLE_REQUEST_QUEUE = ("kplane.produce.on.network.threads.max.bytes", "0")
"""Kafka before KIP-291: every request of the data plane, Produce too, through its one
request queue, where controller requests wait behind data."""


def broker_overrides(
    broker_id: int, base_port: int, zk_connect: str, log_dir: Path, control_plane: bool = True
) -> list[str]:
    """The ``--override`` settings of one broker of the local cluster; without
    ``control_plane`` it has no CONTROLLER listener, controller requests arrive on
    INTERNAL and share its request queue with Produce (Kafka before KIP-291)."""

    def port(offset: int) -> int:
        return 0 if base_port == 0 else base_port + 100 * broker_id + offset

    names = ("CLIENT", "INTERNAL", "CONTROLLER") if control_plane else ("CLIENT", "INTERNAL")
    overrides = [
        f"broker.id={broker_id}",
        "listeners=" + ",".join(f"{n}://127.0.0.1:{port(i)}" for i, n in enumerate(names)),
        "listener.security.protocol.map=" + ",".join(f"{n}:PLAINTEXT" for n in names),
        "inter.broker.listener.name=INTERNAL",
    ]
    if control_plane:
        overrides.append("control.plane.listener.name=CONTROLLER")
    else:
        overrides.append("=".join(SINGLE_REQUEST_QUEUE))
    return [
        *overrides,
        f"zookeeper.connect={zk_connect}/kplane",
        f"log.dirs={log_dir}",
        "kplane.metrics.port=0",
        "group.initial.rebalance.delay.ms=0",
    ]


def start_broker(broker_id: int, directory: Path, overrides: list[str]) -> ServeProcess:
    """``kplane serve`` for one broker, appending its JSON log to ``DIR/broker-<id>.log``."""
    log_path = directory / f"broker-{broker_id}.log"
    return spawn_serve(os.devnull, overrides, log_path, append=True, new_session=True)


def listener_ports(events: list[dict[str, Any]]) -> dict[str, int]:
    """Listener name -> bound port, from a started broker's "listener bound" events."""
    return {e["listener"]: e["port"] for e in events if e.get("event") == "listener bound"}


def _progress(message: str) -> None:
    print(f"kplane cluster up: {message}", file=sys.stderr, flush=True)


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def run_up(args: argparse.Namespace) -> int:
    """Start ZooKeeper and the brokers, saying what it does; print the bootstrap servers.
    0 on success. On a failure, SIGINT or SIGTERM it stops what it started, then says why."""
    reason = unavailable_reason()
    if reason is not None:
        print(f"kplane cluster up: {reason}", file=sys.stderr)
        return 1
    directory: Path = args.dir.resolve()
    if (directory / STATE_FILE).exists():
        print(
            f"kplane cluster up: a cluster is recorded in {directory}; run kplane cluster down",
            file=sys.stderr,
        )
        return 1
    directory.mkdir(parents=True, exist_ok=True)
    zookeeper = ZooKeeperServer(directory / "zookeeper")
    state: dict[str, Any] = {"zookeeper": {}, "brokers": {}}
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        _progress(f"starting ZooKeeper (log: {zookeeper.log_path})")
        zookeeper.start()
        state["zookeeper"] = {
            "pid": zookeeper.process.pid if zookeeper.process else None,
            "connect": zookeeper.connect,
        }
        for broker_id in range(args.brokers):
            overrides = broker_overrides(
                broker_id, args.base_port, zookeeper.connect, directory / f"broker-{broker_id}"
            )
            overrides += [
                f"zookeeper.session.timeout.ms={args.session_timeout_ms}",
                *args.override,
            ]
            serve = start_broker(broker_id, directory, overrides)
            entry = {"pid": serve.process.pid, "overrides": overrides, "log": str(serve.log_path)}
            state["brokers"][str(broker_id)] = entry  # recorded first: stopped on failure
            _progress(f"starting broker {broker_id} (log: {serve.log_path})")
            entry["ports"] = listener_ports(serve.wait_started(STARTUP_TIMEOUT_S))
    except KeyboardInterrupt:
        _progress("interrupted; stopping what was started")
        _stop_all(state, zookeeper)
        return 130
    except (RuntimeError, OSError) as exc:
        _stop_all(state, zookeeper)
        print(f"kplane cluster up: {exc}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
    _write_state(directory, state)
    bootstrap = ",".join(f"127.0.0.1:{b['ports']['CLIENT']}" for b in state["brokers"].values())
    print(f"ZooKeeper: {zookeeper.connect}/kplane")
    print(f"bootstrap.servers={bootstrap}")
    return 0


def _stop_all(state: dict[str, Any], zookeeper: ZooKeeperServer) -> None:
    """Stop the brokers recorded in ``state``, then ZooKeeper; a further SIGINT waits."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        _stop_brokers(state)
        zookeeper.stop()
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _write_state(directory: Path, state: dict[str, Any]) -> None:
    (directory / STATE_FILE).write_text(json.dumps(state, indent=2))


def _stop(pid: int, timeout: float = 15.0) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _stop_brokers(state: dict[str, Any]) -> None:
    for broker in state.get("brokers", {}).values():
        _stop(int(broker["pid"]))


def run_down(args: argparse.Namespace) -> int:
    """Stop what ``up`` recorded in ``DIR/cluster.json``: brokers first, then ZooKeeper."""
    path = args.dir.resolve() / STATE_FILE
    if not path.exists():
        print(f"kplane cluster down: no cluster recorded in {args.dir}", file=sys.stderr)
        return 1
    state = json.loads(path.read_text())
    _stop_brokers(state)
    pid = state.get("zookeeper", {}).get("pid")
    if pid:
        _stop(int(pid))
    path.unlink()
    print("cluster stopped")
    return 0
