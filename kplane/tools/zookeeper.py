"""A real ZooKeeper for tests and tools: Debian's ``zookeeper`` package run as a plain process.

``ZooKeeperServerMain`` (standalone, no quorum) with a generated ``zoo.cfg`` in a temp dir,
listening on a free 127.0.0.1 port. The jar's manifest names most of its dependencies; the
classpath adds the slf4j API and a binding so the server's log goes to ``zookeeper.log``.

The server's connection factory is ``LoadedFirstCnxnFactory.java`` beside this module,
compiled once per classpath into the temp dir: it loads the database before accepting, so a
client that connects while the server starts is closed and connects again, instead of
waiting until its session expires (ZOOKEEPER-5051).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

JAVA_DIR = Path("/usr/share/java")
ZOOKEEPER_JAR = JAVA_DIR / "zookeeper.jar"
# zookeeper.jar first; the rest are added when present (the manifest's Class-Path covers
# netty, commons-cli, metrics, jackson and snappy on Debian).
CLASSPATH_JARS = ("zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar", "slf4j-simple.jar")
CLASSPATH_ENV = "KPLANE_ZOOKEEPER_CLASSPATH"
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
FACTORY_SOURCE = Path(__file__).with_name("LoadedFirstCnxnFactory.java")
FACTORY_CLASS = "kplane.tools.LoadedFirstCnxnFactory"
JVM_OPTIONS = (
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Dzookeeper.jmx.log4j.disable=true",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
)


def classpath() -> str:
    """The server's classpath: ``$KPLANE_ZOOKEEPER_CLASSPATH`` or Debian's jars."""
    override = os.environ.get(CLASSPATH_ENV)
    if override:
        return override
    return os.pathsep.join(str(JAVA_DIR / j) for j in CLASSPATH_JARS if (JAVA_DIR / j).exists())


def factory_classes(server_classpath: str) -> Path:
    """The directory holding ``LoadedFirstCnxnFactory`` compiled against ``server_classpath``.

    Compiled with the JDK compiler module that Debian's headless JRE carries, once per source
    and classpath; concurrent callers each compile and the first rename wins.
    """
    digest = hashlib.sha256(FACTORY_SOURCE.read_bytes() + server_classpath.encode()).hexdigest()
    built = Path(tempfile.gettempdir()) / f"kplane-zookeeper-factory-{digest[:16]}"
    if built.is_dir():
        return built
    work = Path(tempfile.mkdtemp(prefix=built.name + "-"))
    javac = ["java", "-XX:+UseSerialGC", "-m", "jdk.compiler/com.sun.tools.javac.Main"]
    options = ["-implicit:none", "-cp", server_classpath, "-d", str(work)]
    result = subprocess.run(
        [*javac, *options, str(FACTORY_SOURCE)], capture_output=True, text=True, timeout=300
    )
    if result.returncode != 0:
        shutil.rmtree(work, ignore_errors=True)
        raise RuntimeError(f"{FACTORY_SOURCE.name} did not compile:\n{result.stderr[-3000:]}")
    try:
        work.rename(built)
    except OSError:  # another process built it first
        shutil.rmtree(work, ignore_errors=True)
    return built


def unavailable_reason() -> str | None:
    """Why no ZooKeeper can be started here (no java, no jar), or None."""
    if shutil.which("java") is None:
        return "java is not installed (Debian: apt-get install zookeeper)"
    if not os.environ.get(CLASSPATH_ENV) and not ZOOKEEPER_JAR.exists():
        return f"{ZOOKEEPER_JAR} is missing (Debian: apt-get install zookeeper)"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def four_letter_word(port: int, word: str, timeout: float = 2.0) -> str:
    """Send a four-letter command (``ruok``, ``srvr``) and return the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(word.encode())
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


class ZooKeeperServer:
    """A standalone ZooKeeper process; ``connect`` is its ``host:port``.

    ``stop()``/``kill()`` keep the data directory so ``start()``/``restart()`` bring the same
    tree (and unexpired sessions) back on the same port; ``close()`` also removes the
    temp dir when this object created it.
    """

    def __init__(
        self, directory: str | Path | None = None, port: int | None = None, tick_time_ms: int = 500
    ) -> None:
        self._owns_directory = directory is None
        self.directory = Path(directory or tempfile.mkdtemp(prefix="kplane-zk-"))
        self._fixed_port = port is not None
        self.port = port or _free_port()
        self.tick_time_ms = tick_time_ms
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def connect(self) -> str:
        """``127.0.0.1:<port>`` (append a chroot such as ``/kplane`` for a broker)."""
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.directory / "zookeeper.log"

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _write_config(self) -> Path:
        data_dir = self.directory / "data"
        data_dir.mkdir(parents=True, exist_ok=True)
        config = self.directory / "zoo.cfg"
        config.write_text(
            "\n".join(
                [
                    f"dataDir={data_dir}",
                    f"clientPort={self.port}",
                    "clientPortAddress=127.0.0.1",
                    f"tickTime={self.tick_time_ms}",
                    # sessions from 2 ticks (the minimum) to 60 s, so brokers get what they ask
                    "maxSessionTimeout=60000",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=ruok,srvr",
                    "maxClientCnxns=0",
                    # test data: no fsync per transaction, no 64 MB log preallocation
                    "forceSync=no",
                    "preAllocSize=1024",
                    "",
                ]
            )
        )
        return config

    def start(self, timeout: float = 60.0) -> ZooKeeperServer:
        """Start the process and wait until it serves requests; returns self."""
        if self.running():
            return self
        reason = unavailable_reason()
        if reason:
            raise RuntimeError(reason)
        server_classpath = classpath()
        server_command = [
            "java",
            *JVM_OPTIONS,
            f"-Dzookeeper.serverCnxnFactory={FACTORY_CLASS}",
            "-cp",
            os.pathsep.join([server_classpath, str(factory_classes(server_classpath))]),
            MAIN_CLASS,
        ]
        for attempt in range(3):
            config = self._write_config()
            args = [*server_command, str(config)]
            with open(self.log_path, "ab") as out:
                self.process = subprocess.Popen(
                    args, stdout=out, stderr=subprocess.STDOUT, cwd=self.directory
                )
            if self._wait_ready(timeout):
                return self
            exited = self.process.poll() is not None
            self.kill()
            # exited early: most likely the free port was taken meanwhile; pick another
            if not exited or self._fixed_port or attempt == 2:
                break
            self.port = _free_port()
        raise RuntimeError(
            f"ZooKeeper did not start on port {self.port}; log tail:\n{self.log_text()[-3000:]}"
        )

    def _wait_ready(self, timeout: float) -> bool:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                # ``ruok`` answers imok before the server serves; ``srvr`` tells the mode
                if "Mode:" in four_letter_word(self.port, "srvr", timeout=1.0):
                    return True
            except OSError:
                pass
            time.sleep(0.05)
        return False

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds (idempotent)."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=timeout)
        self.process = None

    def kill(self) -> None:
        """SIGKILL: a crash, as far as clients can tell."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None

    def restart(self, timeout: float = 60.0) -> ZooKeeperServer:
        """Stop and start again on the same port with the same data."""
        self.stop()
        fixed, self._fixed_port = self._fixed_port, True
        try:
            return self.start(timeout)
        finally:
            self._fixed_port = fixed

    def close(self) -> None:
        """Stop, and remove the temp dir if this server created it."""
        self.stop()
        if self._owns_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> ZooKeeperServer:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
