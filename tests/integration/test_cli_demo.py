"""``loopguard demo`` leaves nothing running unless asked: Ctrl-C while it starts and Ctrl-C
(twice) while it stops end every process it started; ``--keep-running`` serves the status page
at the URL it prints and ``loopguard demo --stop``, as printed, ends both processes.

A process the demo started is found by its working directory (the test's folder), so nothing
depends on the demo reporting its own children."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from services import chosen_brokers

from streams.cli.main import build_parser

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif("tansu" not in chosen_brokers(), reason="the demo runs on tansu"),
]

LOOPGUARD = str(Path(sys.executable).parent / "loopguard")
DEMO_TIMEOUT = 300.0
STOP_TIMEOUT = 90.0  # after Ctrl-C: a worker's stop takes up to 20 s before it is killed


def processes_in(folder: Path) -> list[int]:
    """Pids of the live processes (not zombies) whose working directory is ``folder``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if Path(os.readlink(entry / "cwd")) != folder:
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if state != "Z":
            found.append(int(entry.name))
    return found


def wait_until(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.1)


class Demo:
    """``loopguard demo`` in ``folder``, read line by line as it prints."""

    def __init__(self, folder: Path, *args: str) -> None:
        self.process = subprocess.Popen(
            [LOOPGUARD, "demo", *args],
            cwd=folder,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []

    def read_until(self, prefix: str) -> str:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))
            if line.startswith(prefix):
                return line
        raise AssertionError(f"the demo ended before {prefix!r}:\n" + "\n".join(self.lines))

    def finish(self, timeout: float = DEMO_TIMEOUT) -> tuple[int, str, str]:
        try:
            out, err = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:  # where it hangs: the demo dumps its threads
            self.process.send_signal(signal.SIGUSR1)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=5)
            self.process.kill()
            out, err = self.process.communicate()
            raise AssertionError(
                f"the demo did not end in {timeout:.0f} s:\n{err[-20000:]}"
            ) from None
        return self.process.returncode, "\n".join([*self.lines, out]), err


def mine(folder: Path, demo: Demo) -> list[int]:
    return [pid for pid in processes_in(folder) if pid != demo.process.pid]


@pytest.mark.parametrize(
    "after",
    ["  broker ", "  worker ", "== run pingpong-"],
    ids=["broker started", "worker starting", "during a run"],
)
def test_ctrl_c_while_the_demo_runs_leaves_nothing(tmp_path: Path, after: str) -> None:
    demo = Demo(tmp_path)
    demo.read_until(after)
    assert mine(tmp_path, demo), "the demo's broker should be running"
    demo.process.send_signal(signal.SIGINT)
    code, _, err = demo.finish(timeout=STOP_TIMEOUT)
    assert code == 130 and "Traceback" not in err, err
    wait_until(lambda: not processes_in(tmp_path), "the demo's processes to end")


def test_ctrl_c_twice_while_the_demo_stops_leaves_nothing(tmp_path: Path) -> None:
    demo = Demo(tmp_path)
    demo.read_until("query the audit trail")  # the runs are done; the demo is about to stop
    started = mine(tmp_path, demo)
    assert len(started) >= 2, started  # the broker and the worker
    demo.process.send_signal(signal.SIGINT)
    demo.process.send_signal(signal.SIGINT)
    code, _, err = demo.finish(timeout=STOP_TIMEOUT)
    assert code in (0, 130) and "Traceback" not in err, err
    wait_until(lambda: not processes_in(tmp_path), "the demo's processes to end")


def test_keep_running_serves_the_status_page_and_stop_ends_it(tmp_path: Path) -> None:
    demo = Demo(tmp_path, "--keep-running")
    code, out, err = demo.finish()
    assert code == 0, out + err
    status_url = re.search(r"^  status   (http://\S+/status)$", out, re.MULTILINE)
    stop = re.search(r"^stop both: (.+) demo --stop \(from this folder\)$", out, re.MULTILINE)
    assert status_url and stop, out
    assert stop.group(1) == LOOPGUARD
    another = re.search(r"^another worker on it \(yours to stop with Ctrl-C\): (.+)$", out, re.M)
    assert another, out
    # the worker takes signed events only: its command names the demo's keys file first
    keys, *command = shlex.split(another.group(1))
    name, _, keys_file = keys.partition("=")
    assert name == "LOOPGUARD_GATEWAY_KEYS" and (tmp_path / keys_file).is_file(), keys
    assert command[0] == LOOPGUARD
    parsed = build_parser().parse_args(command[1:])
    assert (parsed.command, parsed.broker_profile) == ("worker", "tansu")
    # and an operator's release is signed with the same file's operator key
    release = re.search(
        r"^release a blocked run \(signed with the file's operator key\): (.+)$", out, re.M
    )
    assert release, out
    assert shlex.split(release.group(1))[:3] == [keys, LOOPGUARD, "release"]
    left = processes_in(tmp_path)
    assert len(left) >= 2, left
    try:
        with urllib.request.urlopen(status_url.group(1), timeout=10) as page:
            assert page.status == 200
            assert 'id="db-state">ok<' in page.read().decode()
        # The printed export line is all `loopguard tail` needs: no --broker flag.
        broker = re.search(r"^  broker   (kafka://127\.0\.0\.1:\d+) \(tansu", out, re.M)
        exports = re.search(
            r"^  export (LOOPGUARD_BROKER=\S+ LOOPGUARD_BROKER_PROFILE=tansu)$", out, re.M
        )
        assert broker and exports, out
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPGUARD_")}
        env.update(pair.split("=", 1) for pair in shlex.split(exports.group(1)))
        assert env["LOOPGUARD_BROKER"] == broker.group(1)
        assert re.search(rf"^  {re.escape(LOOPGUARD)} tail$", out, re.M), out
        tail = subprocess.run(
            [LOOPGUARD, "tail", "--from-beginning", "--max", "1", "--timeout", "60", "--json"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert tail.returncode == 0, tail.stderr
        assert json.loads(tail.stdout.splitlines()[0])["action"] in ("warn", "block", "abort")
        # A second demo in the same folder refuses while the first one's processes run.
        done = subprocess.run(
            [LOOPGUARD, "demo"], cwd=tmp_path, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 1
        assert done.stderr.startswith("loopguard demo: a demo left running here (")
    finally:
        done = subprocess.run(
            [LOOPGUARD, "demo", "--stop"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(
        r"stopped the demo's worker \(pid \d+\), broker \(pid \d+\)\n", done.stdout
    ), done.stdout
    wait_until(lambda: not processes_in(tmp_path), "the kept demo's processes to end")
    assert not (tmp_path / "loopguard-data" / "demo.pid").exists()


def test_a_killed_demo_takes_its_processes_with_it(tmp_path: Path) -> None:
    """SIGKILL leaves the demo no clean-up: the kernel ends its children (PR_SET_PDEATHSIG)."""
    demo = Demo(tmp_path)
    demo.read_until("  worker ")
    assert len(mine(tmp_path, demo)) >= 2  # the broker and the worker
    demo.process.kill()
    demo.finish()
    wait_until(lambda: not processes_in(tmp_path), "the killed demo's processes to end")
