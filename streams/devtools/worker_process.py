"""Run a loopguard worker as a child process and wait until it really processes events.

Readiness is proven end to end with a canary run (a compaction followed by identical tool
cycles) whose abort decision must come back on the control topic: a consumer group that
has not joined yet, a missing topic or a broken database all show up as "not ready",
without any fixed sleep.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from streams.audit.canary import CANARY_AGENT
from streams.core.events import Action, ToolCall
from streams.devtools.demo_services import parent_death_signal
from streams.gateway.client import GatewayClient


@dataclass
class WorkerProcess:
    broker: str
    db_url: str
    app_id: str = "loopguard"
    profile: str = "kafka"  # broker profile (streams.settings.PROFILES)
    log_path: Path | None = None
    config_file: str | None = None
    partitions: int | None = None
    web_port: int | None = None
    data_dir: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    # The kernel sends it SIGTERM when the process that started it dies (Linux): the demo's
    # guarantee that nothing outlives it, even killed outright.
    die_with_parent: bool = False
    process: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        # -P: import the installed loopguard (the compiled core, say), never a streams/
        # directory that happens to be in the working directory.
        cmd = [sys.executable, "-P", "-m", "streams.cli.main", "worker", "--broker", self.broker]
        cmd += ["--db", self.db_url, "--app-id", self.app_id, "--broker-profile", self.profile]
        if self.config_file:
            cmd += ["--config", self.config_file]
        if self.partitions:
            cmd += ["--partitions", str(self.partitions)]
        if self.web_port:
            cmd += ["--web-port", str(self.web_port)]
        if self.data_dir:
            cmd += ["--data-dir", self.data_dir]
        return cmd

    def start(self) -> WorkerProcess:
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(
            self.command(),
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **self.env},
            start_new_session=True,
            preexec_fn=parent_death_signal() if self.die_with_parent else None,  # noqa: PLW1509
        )
        return self

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 20.0) -> None:
        """Graceful stop (SIGTERM: Faust commits and leaves the group), then kill."""
        if not self.alive:
            return
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """Crash it: SIGKILL, no commit, no goodbye to the group."""
        if self.alive:
            assert self.process is not None
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def wait_until_processing(
    client: GatewayClient,
    timeout: float = 90.0,
    workers: Sequence[WorkerProcess] = (),
    interrupted: Callable[[], bool] = lambda: False,
) -> str:
    """Send a canary run and wait for its post-compaction abort; returns the run id.

    ``interrupted`` (the demo's Ctrl-C) is asked every second: True ends the wait with
    KeyboardInterrupt.

    Fails early with the worker's exit code when a watched worker process dies meanwhile.
    """
    run = client.start_run(CANARY_AGENT, run_id=f"canary-{uuid.uuid4().hex[:12]}")
    run.compaction()
    for _ in range(3):
        # Published as is, never through before_tool: a gateway client with an in-time wait
        # budget would otherwise wait for a worker that is not ready yet, call by call.
        run.emit(ToolCall, tool_name="canary_probe", args_json=json.dumps({"probe": True}))
        run.after_tool("canary_probe", {"probe": True}, result={"status": "same"})
    run.end("canary")
    deadline = time.monotonic() + timeout
    while True:
        if interrupted():
            raise KeyboardInterrupt
        for worker in workers:
            if not worker.alive:
                code = worker.process.returncode if worker.process else None
                raise RuntimeError(f"worker exited (code {code}); see {worker.log_path}")
        try:
            client.wait_for(
                run.run_id,
                lambda decisions: any(d.action is Action.ABORT for d in decisions),
                timeout=min(1.0, max(deadline - time.monotonic(), 0.01)),
            )
            return run.run_id
        except TimeoutError:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"worker did not process a canary run in {timeout}s") from None
