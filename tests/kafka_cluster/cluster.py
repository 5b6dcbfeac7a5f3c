#!/usr/bin/env python3
"""A real Apache Kafka 4.x cluster on loopback: N combined broker+controller KRaft nodes.

Stdlib only. The server jars come from Maven (``tests/kafka_cluster/pom.xml``) into a cache outside
the repo; each node is one JVM (``kafka.Kafka``) with its config, data and log under the
data directory. Used by hand, by ``.ci/run`` and by pytest fixtures::

    python tests/kafka_cluster/cluster.py start   # prints 127.0.0.1:19392,...:19393,...:19394
    python tests/kafka_cluster/cluster.py status
    python tests/kafka_cluster/cluster.py stop

    with KafkaCluster(nodes=3, base_port=0, data_dir=tmp_path) as cluster:
        cluster.bootstrap          # "127.0.0.1:p0,127.0.0.1:p1,127.0.0.1:p2"
        cluster.kill(1)            # SIGKILL node 1
        cluster.restart(1)         # start it again, wait until the cluster is whole

Node ``i`` (0-based) has ``node.id=i``, its client listener on ``base_port + i`` and its
controller listener on ``base_port + nodes + i``. Readiness is probed on the wire (Metadata
from every node, DescribeQuorum), polled against a deadline, never a fixed sleep.

Do not add an ``__init__.py`` here: with ``tests/`` on ``sys.path`` a package named ``kafka``
would shadow kafka-python. Load this file by path (see README.md).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

DEFAULT_VERSION = os.environ.get("LOOPGUARD_KAFKA_VERSION", "4.1.2")
DEFAULT_BASE_PORT = 19392
POM = Path(__file__).resolve().parent / "pom.xml"
STATE_FILE = "cluster.json"

# Broker settings for tests: every topic replicated 3 ways with 2 in sync, internal topics
# too, no auto-created topics (loopguard creates its own), quick failure detection.
TEST_BROKER_CONFIG: dict[str, str] = {
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "num.partitions": "1",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "10",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": "10",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
    "group.initial.rebalance.delay.ms": "0",
    "auto.create.topics.enable": "false",
    # a SIGKILLed node is fenced (and dropped from every ISR) after 4 s instead of 9 s
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "4000",
    "replica.lag.time.max.ms": "10000",
    # small machine: fewer threads, a small cleaner buffer (compacted topics still work)
    "num.network.threads": "2",
    "num.io.threads": "4",
    "background.threads": "2",
    "num.recovery.threads.per.data.dir": "1",
    "log.cleaner.threads": "1",
    "log.cleaner.dedupe.buffer.size": "16777216",
}
JVM_OPTS = [
    "-XX:TieredStopAtLevel=1",  # C1 only: measured ~35% faster start, ~40 MiB less RSS a node
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
]
LOG4J2_XML = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders>
    <Console name="out" target="SYSTEM_OUT">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </Console>
  </Appenders>
  <Loggers>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="state.change.logger" level="WARN"/>
    <Logger name="org.apache.kafka.clients" level="WARN"/>
    <Root level="INFO"><AppenderRef ref="out"/></Root>
  </Loggers>
</Configuration>
"""


class ClusterError(RuntimeError):
    """An expected fault (java/Maven missing, fetch failed, port taken, node died...)."""


# --------------------------------------------------------------------------- environment


def default_cache_dir(version: str) -> Path:
    """$LOOPGUARD_KAFKA_CACHE, else ~/.cache/loopguard/kafka-<version>; jars go in libs/."""
    env = os.environ.get("LOOPGUARD_KAFKA_CACHE")
    if env:
        return Path(env).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "loopguard" / f"kafka-{version}"


def default_data_dir(base_port: int) -> Path:
    return Path(tempfile.gettempdir()) / f"loopguard-kafka-{base_port}"


def find_java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise ClusterError(
            "java not found: Kafka needs Java 17+ (apt-get install openjdk-17-jre-headless)"
        )
    return found


def fetch(version: str = DEFAULT_VERSION, cache_dir: Path | None = None) -> Path:
    """Copy the Kafka server jars into ``<cache>/libs`` with Maven; no-op when present."""
    cache = Path(cache_dir) if cache_dir else default_cache_dir(version)
    libs = cache / "libs"
    stamp = libs / ".version"
    if stamp.is_file() and stamp.read_text().strip() == version:
        return libs
    java = find_java()
    mvn = shutil.which("mvn")
    if not mvn:
        raise ClusterError(
            "Maven (mvn) not found: it fetches the Kafka jars (apt-get install maven)"
        )
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="libs.tmp-", dir=cache))
    cmd = [
        mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(POM),
        "dependency:copy-dependencies", f"-DoutputDirectory={tmp}", f"-Dkafka.version={version}",
    ]  # fmt: skip
    env = {**os.environ, "JAVA_HOME": os.environ.get("JAVA_HOME") or _java_home(java)}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    except subprocess.TimeoutExpired:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ClusterError(f"fetching Kafka {version} with Maven timed out after 900 s") from None
    if done.returncode != 0 or not (tmp / f"kafka_2.13-{version}.jar").exists():
        shutil.rmtree(tmp, ignore_errors=True)
        raise ClusterError(
            f"fetching Kafka {version} with Maven failed: {_maven_error(done.stdout + done.stderr)}"
        )
    (tmp / ".version").write_text(version + "\n")
    if libs.exists():  # an older version, or another process fetched it meanwhile
        old = cache / f"libs.old-{os.getpid()}"
        with contextlib.suppress(OSError):
            libs.rename(old)
        shutil.rmtree(old, ignore_errors=True)
    try:
        tmp.rename(libs)
    except OSError:  # lost a race with a concurrent fetch of the same version
        shutil.rmtree(tmp, ignore_errors=True)
    if not (stamp.is_file() and stamp.read_text().strip() == version):
        raise ClusterError(f"Kafka {version} jars missing in {libs} after fetch")
    return libs


def _java_home(java: str) -> str:
    return str(Path(java).resolve().parent.parent)


def _maven_error(output: str) -> str:
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", ln).strip() for ln in output.splitlines()]
    errors = [ln.removeprefix("[ERROR]").strip() for ln in lines if ln.startswith("[ERROR]")]
    noise = ("->", "Re-run", "To see", "For more", "Help 1")
    errors = [ln for ln in errors if ln and not ln.startswith(noise)]
    text = errors[0] if errors else next((ln for ln in reversed(lines) if ln), "no output")
    return text[:300]


# --------------------------------------------------------------------------- wire probes
# Just enough of the Kafka protocol to ask a node who is in the cluster, so readiness needs
# neither a client library nor a JVM tool.


def _kafka_call(port: int, api_key: int, version: int, body: bytes, flexible: bool,
                timeout: float) -> bytes:  # fmt: skip
    client_id = b"loopguard-probe"
    header = struct.pack(">hhih", api_key, version, 7, len(client_id)) + client_id
    if flexible:
        header += b"\x00"  # no tagged fields
    payload = header + body
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", _recv_exact(sock, 4))[0]
        data = _recv_exact(sock, size)
    if struct.unpack(">i", data[:4])[0] != 7:
        raise OSError("correlation id mismatch")
    return data[4:]


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise OSError("connection closed")
        buf += chunk
    return buf


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> Any:
        value = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return value[0] if len(value) == 1 else value

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            byte = self.data[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7

    def string(self) -> str | None:
        n = self.take(">h")
        if n < 0:
            return None
        self.pos += n
        return self.data[self.pos - n : self.pos].decode()

    def compact_string(self) -> str | None:
        n = self.uvarint() - 1
        if n < 0:
            return None
        self.pos += n
        return self.data[self.pos - n : self.pos].decode()

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.pos += self.uvarint()


def api_versions(port: int, timeout: float = 2.0) -> dict[int, tuple[int, int]]:
    r = _Reader(_kafka_call(port, 18, 0, b"", False, timeout))
    error = r.take(">h")
    if error:
        raise OSError(f"ApiVersions error {error}")
    out = {}
    for _ in range(r.take(">i")):
        key, lo, hi = r.take(">hhh")
        out[key] = (lo, hi)
    return out


def metadata_brokers(port: int, timeout: float = 2.0) -> dict[int, int]:
    """{node id: client port} of the brokers that the node on ``port`` lists (the live ones)."""
    lo, hi = api_versions(port, timeout).get(3, (0, -1))
    version = max(lo, 4)
    if version > min(hi, 8):
        raise OSError(f"no Metadata version in 4..8 (broker has {lo}..{hi})")
    body = struct.pack(">i?", 0, False)  # no topics, no auto-creation
    if version >= 8:
        body += struct.pack(">??", False, False)
    r = _Reader(_kafka_call(port, 3, version, body, False, timeout))
    r.take(">i")  # throttle
    brokers = {}
    for _ in range(r.take(">i")):
        node_id = r.take(">i")
        r.string()
        brokers[node_id] = r.take(">i")
        r.string()  # rack
    return brokers


def describe_quorum(port: int, timeout: float = 2.0) -> dict[str, Any]:
    """The KRaft quorum as the active controller sees it (asked through any broker)."""
    lo, hi = api_versions(port, timeout).get(55, (0, -1))
    if hi < 0:
        raise OSError("node does not offer DescribeQuorum")
    version = min(hi, 1)
    topic = b"__cluster_metadata"
    body = (
        b"\x02" + bytes([len(topic) + 1]) + topic  # one topic
        + b"\x02" + struct.pack(">i", 0) + b"\x00"  # one partition: 0
        + b"\x00" + b"\x00"  # topic and request tagged fields
    )  # fmt: skip
    r = _Reader(_kafka_call(port, 55, version, body, True, timeout))
    r.skip_tags()  # response header v1
    error = r.take(">h")
    if error:
        raise OSError(f"DescribeQuorum error {error}")
    for _ in range(r.uvarint() - 1):
        r.compact_string()
        for _ in range(r.uvarint() - 1):
            _, perror, leader, epoch, hwm = r.take(">ihiiq")
            if perror:
                raise OSError(f"DescribeQuorum partition error {perror}")
            groups = []
            for _ in range(2):  # voters, observers
                replicas = {}
                for _ in range(r.uvarint() - 1):
                    rid, leo = r.take(">iq")
                    if version >= 1:
                        r.take(">qq")
                    r.skip_tags()
                    replicas[rid] = leo
                groups.append(replicas)
            return {"leader": leader, "epoch": epoch, "high_watermark": hwm,
                    "voters": groups[0], "observers": groups[1]}  # fmt: skip
    raise OSError("DescribeQuorum answered no partition")


# --------------------------------------------------------------------------- processes


def _pid_alive(pid: int, marker: str) -> bool:
    """True if ``pid`` runs and its command line contains ``marker`` (guards pid reuse)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return marker in cmdline and stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:])


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_ports(count: int) -> list[int]:
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


def _cluster_id() -> str:
    while True:  # Kafka never hands out ids starting with '-' (they read as CLI flags)
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


class KafkaCluster:
    """``nodes`` combined broker+controller KRaft nodes on 127.0.0.1.

    ``base_port=0`` picks free ports. ``data_dir`` holds ``node-<i>/`` (server.properties,
    data/, server.log) and ``cluster.json`` (ports and pids, read by ``stop``/``status`` of
    another process). ``start()`` formats fresh storage; ``start_node``/``restart`` keep it.
    ``extra_config`` is merged into every node's server.properties; ``jvm_opts`` (and
    ``$LOOPGUARD_KAFKA_JVM_OPTS``) are added to each node's JVM command line.
    """

    def __init__(
        self,
        nodes: int = 3,
        base_port: int = DEFAULT_BASE_PORT,
        data_dir: str | Path | None = None,
        cache_dir: str | Path | None = None,
        version: str = DEFAULT_VERSION,
        heap_mb: int = 512,
        extra_config: dict[str, str] | None = None,
        jvm_opts: list[str] | None = None,
        scram_users: dict[str, str] | None = None,
        super_users: tuple[str, ...] = ("admin",),
    ) -> None:
        if nodes < 1:
            raise ClusterError("nodes must be >= 1")
        self.nodes = nodes
        self.base_port = base_port
        self.data_dir = Path(data_dir) if data_dir else default_data_dir(base_port)
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir(version)
        self.version = version
        self.heap_mb = heap_mb
        self.extra_config = dict(extra_config or {})
        # SASL (see SASL_DOC): users -> passwords, made at format time (--add-scram)
        self.scram_users = dict(scram_users or {})
        self.super_users = tuple(super_users)
        env_opts = os.environ.get("LOOPGUARD_KAFKA_JVM_OPTS", "").split()
        self.jvm_opts = [*JVM_OPTS, *env_opts, *(jvm_opts or [])]
        self._requested_nodes = nodes
        self._state_version: str | None = None
        self.cluster_id = ""
        self.ports: list[int] = []  # client ports, controller ports, then SASL ports if any
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._pids: dict[int, int] = {}
        self._down: set[int] = set()  # nodes stopped or killed on purpose
        self._load_state()
        if not self.ports and base_port:
            self.ports = [base_port + i for i in range(self._port_count())]

    # ----------------------------------------------------------------- public API

    @property
    def broker_ports(self) -> list[int]:
        return self.ports[: self.nodes]

    @property
    def controller_ports(self) -> list[int]:
        return self.ports[self.nodes : 2 * self.nodes]

    @property
    def sasl_ports(self) -> list[int]:
        """The SASL_PLAINTEXT (SCRAM-SHA-512) client listeners; empty without ``scram_users``."""
        return self.ports[2 * self.nodes : 3 * self.nodes]

    @property
    def sasl_bootstrap(self) -> str:
        """Bootstrap servers of the SASL listeners: where authenticated clients connect."""
        return ",".join(f"127.0.0.1:{p}" for p in self.sasl_ports)

    def _port_count(self) -> int:
        return (3 if self.scram_users else 2) * self.nodes

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.broker_ports)

    def node_dir(self, i: int) -> Path:
        return self.data_dir / f"node-{i}"

    def log_path(self, i: int) -> Path:
        return self.node_dir(i) / "server.log"

    @property
    def libs(self) -> Path:
        return self.cache_dir / "libs"

    def fetch(self) -> Path:
        return fetch(self.version, self.cache_dir)

    def running(self, i: int) -> bool:
        proc = self._procs.get(i)
        if proc is not None:
            return proc.poll() is None
        pid = self._pids.get(i)
        return bool(pid) and _pid_alive(pid, str(self.node_dir(i) / "server.properties"))

    def pid(self, i: int) -> int | None:
        return self._pids.get(i) if self.running(i) else None

    def start(self, timeout: float = 120.0) -> KafkaCluster:
        """Fetch if needed, format fresh storage, start every node, wait until ready."""
        live = [i for i in range(self.nodes) if self.running(i)]
        if live:
            raise ClusterError(
                f"a cluster is already running in {self.data_dir} (nodes {live}); stop it first"
            )
        self.nodes = self._requested_nodes  # not a stale cluster.json's
        self._state_version = None
        java = find_java()
        self.fetch()
        if not self.base_port:
            self.ports = _free_ports(self._port_count())
        else:
            self.ports = [self.base_port + i for i in range(self._port_count())]
        taken = [p for p in self.ports if not _port_free(p)]
        if taken:
            raise ClusterError(
                f"port {taken[0]} on 127.0.0.1 is in use (this cluster needs "
                f"{self.ports[0]}..{self.ports[-1]}): pick another --base-port"
            )
        self.cluster_id = _cluster_id()
        self._procs.clear()
        self._pids.clear()
        self._down.clear()
        self._write_configs()
        self._format(java)
        try:
            for i in range(self.nodes):
                self._launch(i, java)
            self._save_state()
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Poll until every running node lists exactly the running brokers and the quorum
        has a leader; raise with the log tail if a node we did not stop has exited."""
        deadline = time.monotonic() + timeout
        reason = "not probed yet"
        while True:
            self._check_alive()
            reason = self.probe()
            if reason is None:
                return
            if time.monotonic() >= deadline:
                raise ClusterError(
                    f"Kafka cluster not ready after {timeout:.0f} s: {reason} "
                    f"(logs: {self.data_dir}/node-*/server.log)"
                )
            time.sleep(0.2)

    def probe(self) -> str | None:
        """None when ready, else what is missing (one quick round of wire checks)."""
        expected = {i: self.broker_ports[i] for i in range(self.nodes) if i not in self._down}
        if len(expected) <= self.nodes // 2:
            return f"only {len(expected)} of {self.nodes} nodes running: no controller majority"
        for i in expected:
            try:
                seen = metadata_brokers(self.broker_ports[i], timeout=2.0)
            except (OSError, struct.error, IndexError) as exc:
                return f"node {i} does not answer Metadata ({exc or type(exc).__name__})"
            if seen != expected:
                return f"node {i} lists brokers {sorted(seen)}, expected {sorted(expected)}"
        try:
            quorum = describe_quorum(self.broker_ports[next(iter(expected))], timeout=2.0)
        except (OSError, struct.error, IndexError) as exc:
            return f"quorum not described ({exc or type(exc).__name__})"
        voters = quorum["voters"]
        if quorum["leader"] not in expected:
            return f"controller quorum has no live leader (leader {quorum['leader']})"
        if set(voters) != set(range(self.nodes)):
            return f"quorum voters {sorted(voters)}, expected {list(range(self.nodes))}"
        lagging = [i for i in expected if voters[i] < 0]
        if lagging:
            return f"controllers {lagging} have not fetched from the leader yet"
        return None

    def kill(self, i: int) -> None:
        """SIGKILL node ``i``: nothing flushed, no controlled shutdown."""
        self._down.add(i)
        self._signal(i, signal.SIGKILL)
        self._reap(i, 10.0)
        self._save_state()

    def stop_node(self, i: int, timeout: float = 30.0) -> None:
        """SIGTERM node ``i`` (controlled shutdown), SIGKILL after ``timeout``."""
        self._down.add(i)
        self._signal(i, signal.SIGTERM)
        if not self._reap(i, timeout):
            self._signal(i, signal.SIGKILL)
            self._reap(i, 10.0)
        self._save_state()

    def start_node(self, i: int, timeout: float | None = 60.0) -> None:
        """Start node ``i`` again on its existing storage; wait until ready unless
        ``timeout`` is None."""
        if self.running(i):
            raise ClusterError(f"node {i} is already running (pid {self._pids.get(i)})")
        self._launch(i, find_java())
        self._down.discard(i)
        self._save_state()
        if timeout is not None:
            self.wait_ready(timeout)

    def restart(self, i: int, timeout: float = 60.0) -> None:
        """Stop node ``i`` (if running), start it, wait until the cluster is whole again."""
        if self.running(i):
            self.stop_node(i)
        self.start_node(i, timeout)

    def rolling_restart(self, timeout: float = 60.0) -> None:
        for i in range(self.nodes):
            self.restart(i, timeout)

    def stop(self, timeout: float = 30.0, graceful: bool = True) -> None:
        """SIGTERM every node at once, SIGKILL what is left after ``timeout``.

        A graceful stop takes about 6 s (the last controller waits for its peers);
        ``graceful=False`` SIGKILLs at once, for throw-away data."""
        live = [i for i in range(self.nodes) if self.running(i)]
        for i in live:
            self._signal(i, signal.SIGTERM if graceful else signal.SIGKILL)
        deadline = time.monotonic() + timeout
        for i in live:
            if not self._reap(i, max(0.1, deadline - time.monotonic())):
                self._signal(i, signal.SIGKILL)
                self._reap(i, 10.0)
        self._down.update(range(self.nodes))
        self._procs.clear()
        self._pids.clear()
        if self.data_dir.exists():
            self._save_state()

    def rss_mb(self) -> dict[int, float]:
        """Resident memory of each running node, in MiB (from /proc)."""
        out = {}
        for i in range(self.nodes):
            pid = self.pid(i)
            if pid:
                status = Path(f"/proc/{pid}/status").read_text()
                kb = int(re.search(r"VmRSS:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
                out[i] = kb / 1024
        return out

    def info(self) -> dict[str, Any]:
        return {
            "bootstrap": self.bootstrap,
            "version": self._state_version or self.version,
            "cluster_id": self.cluster_id,
            "data_dir": str(self.data_dir),
            "nodes": [
                {
                    "id": i,
                    "port": self.broker_ports[i],
                    "controller_port": self.controller_ports[i],
                    "pid": self.pid(i),
                    "log": str(self.log_path(i)),
                }
                for i in range(self.nodes)
            ],
        }

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- internals

    def _write_configs(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "log4j2.xml").write_text(LOG4J2_XML)
        voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in enumerate(self.controller_ports))
        for i in range(self.nodes):
            ndir = self.node_dir(i)
            if ndir.exists():  # only ever our own node folders
                shutil.rmtree(ndir)
            (ndir / "data").mkdir(parents=True)
            props = {
                "process.roles": "broker,controller",
                "node.id": str(i),
                "controller.quorum.voters": voters,
                "listeners": f"PLAINTEXT://127.0.0.1:{self.broker_ports[i]},"
                f"CONTROLLER://127.0.0.1:{self.controller_ports[i]}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.broker_ports[i]}",
                "controller.listener.names": "CONTROLLER",
                "inter.broker.listener.name": "PLAINTEXT",
                "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                "log.dirs": str(ndir / "data"),
                **TEST_BROKER_CONFIG,
                **self.extra_config,
            }
            if self.nodes < 3:  # a 1- or 2-node cluster cannot hold 3 replicas
                for key in ("default.replication.factor", "offsets.topic.replication.factor",
                            "transaction.state.log.replication.factor",
                            "share.coordinator.state.topic.replication.factor"):  # fmt: skip
                    props[key] = self.extra_config.get(key, str(self.nodes))
                for key in ("min.insync.replicas", "transaction.state.log.min.isr",
                            "share.coordinator.state.topic.min.isr"):  # fmt: skip
                    props[key] = self.extra_config.get(key, "1")
            if self.scram_users:
                props.update(self._sasl_props(i))
            text = "".join(f"{k}={v}\n" for k, v in props.items())
            (ndir / "server.properties").write_text(text)

    def _sasl_props(self, i: int) -> dict[str, str]:
        """A SASL_PLAINTEXT listener with SCRAM-SHA-512 for clients, the StandardAuthorizer
        (no ACL, no access) and the super users. The PLAINTEXT and CONTROLLER listeners stay
        for inter-broker traffic and the readiness probes, as User:ANONYMOUS, a super user:
        loopback only, and no test client is given their ports."""
        sasl = f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_ports[i]}"
        supers = ";".join(f"User:{name}" for name in ("ANONYMOUS", *self.super_users))
        return {
            "listeners": f"PLAINTEXT://127.0.0.1:{self.broker_ports[i]},{sasl},"
            f"CONTROLLER://127.0.0.1:{self.controller_ports[i]}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.broker_ports[i]},{sasl}",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,"
            "SASL_PLAINTEXT:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "false",
            "super.users": supers,
        }

    def _classpath(self) -> str:
        return str(self.libs / "*")

    def _format(self, java: str) -> None:
        procs = []
        for i in range(self.nodes):
            cmd = [
                java, "-Xmx256m", "-XX:TieredStopAtLevel=1",
                f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.xml'}",
                "-cp", self._classpath(), "kafka.tools.StorageTool", "format",
                "-t", self.cluster_id, "-c", str(self.node_dir(i) / "server.properties"),
            ]  # fmt: skip
            for name, password in self.scram_users.items():  # SCRAM users exist from the start
                cmd += ["--add-scram", f"SCRAM-SHA-512=[name={name},password={password}]"]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        try:
            for i, proc in enumerate(procs):
                out, _ = proc.communicate(timeout=120)
                if proc.returncode != 0:
                    tail = "\n".join(out.decode(errors="replace").strip().splitlines()[-5:])
                    raise ClusterError(f"kafka-storage format failed for node {i}:\n{tail}")
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()

    def _launch(self, i: int, java: str) -> None:
        ndir = self.node_dir(i)
        cmd = [
            java, f"-Xms{min(256, self.heap_mb)}m", f"-Xmx{self.heap_mb}m", *self.jvm_opts,
            f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.xml'}",
            f"-Dkafka.logs.dir={ndir}",
            "-cp", self._classpath(), "kafka.Kafka", str(ndir / "server.properties"),
        ]  # fmt: skip
        with open(self.log_path(i), "ab") as log:
            log.write(f"==== {time.strftime('%F %T')} starting node {i}\n".encode())
            log.flush()
            proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                cwd=ndir, start_new_session=True,
            )  # fmt: skip
        self._procs[i] = proc
        self._pids[i] = proc.pid

    def _check_alive(self) -> None:
        for i in range(self.nodes):
            if i in self._down or self.running(i):
                continue
            proc = self._procs.get(i)
            code = proc.returncode if proc is not None else "?"
            self._down.add(i)
            raise ClusterError(
                f"Kafka node {i} exited (code {code}); last lines of {self.log_path(i)}:\n"
                + _log_tail(self.log_path(i))
            )

    def _signal(self, i: int, sig: signal.Signals) -> None:
        if not self.running(i):
            return
        pid = self._pids[i]
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)

    def _reap(self, i: int, timeout: float) -> bool:
        """Wait up to ``timeout`` for node ``i`` to be gone; True if it is."""
        proc = self._procs.get(i)
        if proc is not None:
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return False
            return True
        deadline = time.monotonic() + timeout
        while self.running(i):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def _save_state(self) -> None:
        state = {
            "version": self.version,
            "cache_dir": str(self.cache_dir),
            "nodes": self.nodes,
            "ports": self.ports,
            "cluster_id": self.cluster_id,
            "sasl": bool(self.scram_users),
            "pids": {str(i): pid for i, pid in self._pids.items() if self.running(i)},
            "down": sorted(self._down),
        }
        tmp = self.data_dir / f".{STATE_FILE}.tmp"
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        tmp.replace(self.data_dir / STATE_FILE)

    def _load_state(self) -> None:
        path = self.data_dir / STATE_FILE
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            return
        self.nodes = int(state.get("nodes", self.nodes))
        self.ports = [int(p) for p in state.get("ports", [])]
        self.cluster_id = state.get("cluster_id", "")
        self._pids = {int(i): int(pid) for i, pid in state.get("pids", {}).items()}
        self._down = {int(i) for i in state.get("down", [])}
        self._state_version = state.get("version")  # the running cluster's, for info()


# --------------------------------------------------------------------------- CLI


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--nodes", type=int, default=3, help="number of nodes (default 3)")
    common.add_argument(
        "--base-port", type=int, default=DEFAULT_BASE_PORT,
        help="first client port; node i listens on BASE+i, its controller on BASE+NODES+i "
        f"(default {DEFAULT_BASE_PORT}; 0 = any free ports)",
    )  # fmt: skip
    common.add_argument(
        "--data", type=Path, default=None,
        help="data dir: configs, storage, logs, cluster.json with pids "
        "(default $TMPDIR/loopguard-kafka-BASEPORT)",
    )  # fmt: skip
    common.add_argument("--version", default=DEFAULT_VERSION, dest="kafka_version",
                        help=f"Apache Kafka version (default {DEFAULT_VERSION})")  # fmt: skip
    common.add_argument("--cache", type=Path, default=None,
                        help="jar cache (default $LOOPGUARD_KAFKA_CACHE or "
                        "~/.cache/loopguard/kafka-VERSION)")  # fmt: skip
    common.add_argument("--timeout", type=float, default=120.0,
                        help="seconds to wait for readiness (default 120)")  # fmt: skip
    common.add_argument("--json", action="store_true", help="print JSON")
    parser = argparse.ArgumentParser(
        prog="cluster.py",
        description="Run a real Apache Kafka 4.x KRaft cluster (combined broker+controller "
        "nodes) on 127.0.0.1 for loopguard's tests. The jars come from Maven into a cache "
        "outside the repo; the nodes are JVMs left running in the background until 'stop'.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("fetch", parents=[common], help="download the Kafka jars (no-op if cached)")
    sub.add_parser("start", parents=[common],
                   help="format and start the cluster in the background, wait until ready, "
                   "print the bootstrap servers")  # fmt: skip
    sub.add_parser("stop", parents=[common], help="stop the cluster started with 'start'")
    sub.add_parser("status", parents=[common],
                   help="show nodes and readiness (exit 0 only if ready)")  # fmt: skip
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    cluster = KafkaCluster(
        nodes=args.nodes, base_port=args.base_port, data_dir=args.data,
        cache_dir=args.cache, version=args.kafka_version,
    )  # fmt: skip
    try:
        if args.command == "fetch":
            t0 = time.monotonic()
            libs = cluster.fetch()
            if args.json:
                print(json.dumps({"libs": str(libs), "version": cluster.version,
                                  "seconds": round(time.monotonic() - t0, 1)}))  # fmt: skip
            else:
                print(libs)
        elif args.command == "start":
            t0 = time.monotonic()
            cluster.start(timeout=args.timeout)
            if args.json:
                print(json.dumps({**cluster.info(), "seconds": round(time.monotonic() - t0, 1)}))
            else:
                print(cluster.bootstrap)
        elif args.command == "stop":
            live = [i for i in range(cluster.nodes) if cluster.running(i)]
            cluster.stop()
            if args.json:
                print(json.dumps({"stopped": live}))
            else:
                print(f"stopped {len(live)} node(s)" if live else "not running")
        elif args.command == "status":
            live = [i for i in range(cluster.nodes) if cluster.running(i)]
            cluster._down = set(range(cluster.nodes)) - set(live)
            reason = cluster.probe() if live else "not running"
            if args.json:
                print(json.dumps({**cluster.info(), "ready": reason is None, "reason": reason}))
            else:
                for node in cluster.info()["nodes"]:
                    state = f"pid {node['pid']}" if node["pid"] else "down"
                    print(f"node {node['id']}  127.0.0.1:{node['port']}  {state}")
                print(f"ready: {cluster.bootstrap}" if reason is None else f"not ready: {reason}")
            return 0 if reason is None else 1
    except ClusterError as exc:
        print(f"cluster.py: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        cluster.stop()
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
