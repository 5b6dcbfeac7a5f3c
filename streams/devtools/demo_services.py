"""The processes ``loopguard demo`` starts, and the guarantee that none outlives it unasked.

The broker and the worker run in sessions of their own (a terminal's Ctrl-C reaches only the
demo), so the demo must stop them itself on every way out: an error, Ctrl-C at any point, a
SIGTERM, Ctrl-C again while it is stopping them (then they are killed at once), and, on Linux,
the demo being killed outright (the kernel sends them SIGTERM: ``PR_SET_PDEATHSIG``).

``--keep-running`` is the one way they stay: their pids go to ``loopguard-data/demo.pid``,
and ``loopguard demo --stop`` (from the same folder) stops exactly those processes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

DATA = Path("loopguard-data")
PIDFILE = DATA / "demo.pid"
STOP_TIMEOUT = 20.0  # seconds a process gets to stop after SIGTERM before SIGKILL


def parent_death_signal() -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the kernel send the child SIGTERM when the demo dies (Linux;
    None elsewhere, where the demo's own clean-up is all there is)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1

    def arm() -> None:
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)

    return arm


def _signal_group(pid: int, sig: int) -> None:
    """``sig`` to the process group a demo child leads (its own session), else to the pid."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


@dataclass
class StopRequest:
    """What the demo's signal handler saw; the body checks it between steps. The handler
    never raises into whatever the main thread runs: a KeyboardInterrupt raised inside
    kafka-python's I/O loop (a client connecting) is caught there as a task's error and
    leaves the client waiting forever, so the demo hung on Ctrl-C (2 of 3 runs under load)."""

    signals: int = 0
    stopping: bool = False

    def requested(self) -> bool:
        return self.signals > 0

    def check(self) -> None:
        if self.signals:
            raise KeyboardInterrupt


@contextlib.contextmanager
def stopped_on_exit(processes: list[Any], kept: Callable[[], bool]) -> Iterator[StopRequest]:
    """Run the demo's body; on the way out stop ``processes`` (objects with ``process`` and
    ``stop()``, in order) unless ``kept()`` says they stay.

    The first Ctrl-C, SIGTERM or SIGHUP ends the body at its next step (its
    :meth:`StopRequest.check` raises KeyboardInterrupt there); any further one, or one while
    the processes are being stopped, kills them at once and never interrupts the clean-up.
    While they stop, Kafka client errors (the demo gateway's, as its broker goes) are not
    news: they stay out of the output."""
    state = StopRequest()

    def kill_now() -> None:
        for item in processes:
            if getattr(item, "process", None) is not None:
                _signal_group(item.process.pid, signal.SIGKILL)

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        state.signals += 1
        # From the first stop request on, the body's Kafka clients lose their broker (killed
        # at once on a second Ctrl-C) while a thread still reads from them: their errors are
        # not news (a traceback showed at CI, both when the body stopped and on Ctrl-C twice).
        logging.getLogger("kafka").setLevel(logging.CRITICAL)
        if (state.signals > 1 or state.stopping) and not kept():
            kill_now()

    watched = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, on_signal) for sig in watched}
    try:
        yield state
    finally:
        state.stopping = True
        logging.getLogger("kafka").setLevel(logging.CRITICAL)
        try:
            if not kept():
                for item in processes:
                    with contextlib.suppress(Exception):
                        item.stop()
                kill_now()  # whatever a failed stop() left behind
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


# -- what --keep-running leaves ------------------------------------------------------------


@dataclass(frozen=True)
class LeftRunning:
    """The pidfile's content: what a kept-running demo left, and what names each process."""

    pids: dict[str, int]  # "worker"/"broker" -> pid
    marks: dict[str, str]  # the same names -> a string its command line contains
    broker_url: str
    status_url: str

    def save(self, path: Path = PIDFILE) -> None:
        path.write_text(json.dumps(self.__dict__, indent=2) + "\n")

    @classmethod
    def load(cls, path: Path = PIDFILE) -> LeftRunning | None:
        try:
            return cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def alive(self) -> dict[str, int]:
        """The processes that still run and are still ours (a reused pid is someone else's)."""
        return {name: pid for name, pid in self.pids.items() if _is_running(pid, self.marks[name])}


def _is_running(pid: int, mark: str) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        try:
            os.kill(pid, 0)  # no /proc (macOS): trust the pid
        except (ProcessLookupError, PermissionError):
            return False
        return True
    stat = Path(f"/proc/{pid}/stat").read_text()
    if stat.rsplit(")", 1)[-1].split()[0] == "Z":  # exited, not yet reaped
        return False
    return mark.encode() in cmdline


def stop_left_running(path: Path = PIDFILE) -> tuple[int, str]:
    """``loopguard demo --stop``: (exit code, the line to print)."""
    left = LeftRunning.load(path)
    if left is None:
        return 1, f"nothing to stop: no {path} here (run it from the demo's folder)"
    alive = left.alive()
    for name in ("worker", "broker"):  # the worker first: it leaves its group cleanly
        if name in alive:
            _signal_group(alive[name], signal.SIGTERM)
            if not _wait_gone(alive[name], left.marks[name], STOP_TIMEOUT):
                _signal_group(alive[name], signal.SIGKILL)
                _wait_gone(alive[name], left.marks[name], 5.0)
    path.unlink(missing_ok=True)
    if not alive:
        return 0, "nothing was running any more; removed the demo's pidfile"
    stopped = ", ".join(f"{name} (pid {pid})" for name, pid in alive.items())
    return 0, f"stopped the demo's {stopped}"


def _wait_gone(pid: int, mark: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _is_running(pid, mark):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
