"""``loopguard demo``: the embedded default end to end, with a gateway that gets caught looping.

Starts the tansu broker (memory storage), a SQLite audit trail, one worker, then plays six
agent runs through the gateway client: normal work, a ping-pong loop (warned, blocked, then
aborted), a loop that survives a context-overflow compaction (aborted with
``compaction_loop_persisted``), and one run for each failure rule: different calls all
failing (``consecutive_errors``), the same call failing alike (``error_repeat``) and
compaction after compaction with no progress (``compaction_storm``).

The output is the same on every run: the gateway enforces in time (before each tool call it
waits until the worker has processed the run so far, with a generous budget), so the block and
the abort land on exactly the cycles the pure detector core says; each run's decisions are
printed under its heading once the worker has processed all of that run's events; no timings
are printed. Run ids are fresh on every invocation (a short random tag), so re-running the demo
against the same audit trail adds rows instead of dropping them as duplicates.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import sys
import textwrap
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from streams.audit.database import migrate
from streams.audit.store import AuditStore
from streams.core.engine import LoopGuard
from streams.core.events import Action, Decision
from streams.core.fleet import fleet_from_document
from streams.devtools.embedded_broker import EmbeddedBroker
from streams.devtools.worker_process import CANARY_AGENT, WorkerProcess, wait_until_processing
from streams.gateway.client import GatewayClient, GatewayRun, RunAborted
from streams.kafka.topics import ensure_topics
from streams.settings import DEFAULT_DB_URL, Settings, redact_url

DATA = Path("loopguard-data")
CONFIG_FILE = DATA / "demo-config.json"
DEMO_CONFIG = {"tools": {"loopDetection": {"enabled": True}}}
# The gateway waits this long for the worker's verdict before each tool call. Generous: the
# demo shows what loopguard decides, never what a slow machine lets through.
WAIT_BUDGET_MS = 30_000
AUDIT_TIMEOUT = 30.0  # seconds to wait for the worker's audit rows
WIDTH = 100  # printed lines are at most this wide (reasons are shortened at a word)
INDENT = " " * 11  # continuation lines, under the value column


def _say(text: str = "") -> None:
    print(text, flush=True)


# -- one agent run through the gateway -------------------------------------------------------


@dataclass
class Played:
    """One run as the demo gateway plays it, and what the gateway did besides publishing."""

    run: GatewayRun
    calls: int = 0  # tool calls the gateway published (ran or refused)
    refused: int = 0  # ... that the gateway refused (blocked by loopguard)
    stopped_by: Decision | None = None  # the abort the gateway stopped the run on
    notes: list[tuple[int, str]] = field(default_factory=list)  # (seq, gateway line)

    def cycle(self, tool: str, args: dict, result: dict | None, error: str | None = None) -> bool:
        """One tool cycle as a gateway runs it (the tool returns ``result`` or fails with
        ``error``); False when loopguard blocked the call."""
        verdict = self.run.before_tool(tool, args)  # raises RunAborted
        self.calls += 1
        if verdict.allowed:
            self.run.after_tool(tool, args, result=result, error=error)
            return True
        self.refused += 1
        # before_tool published the call and, as its outcome, the veto: the call is seq - 1.
        why = "blocked by loopguard" if verdict.blocked_by is not None else verdict.reason
        self.notes.append((self.run.seq - 1, f"gateway refused {tool}: {why}"))
        return False

    def note(self, text: str) -> None:
        self.notes.append((self.run.seq, text))


def normal_work(play: Played) -> None:
    for step in range(8):
        play.cycle("read_file", {"path": f"src/module_{step}.py"}, {"text": f"code {step}"})
    play.cycle("exec", {"command": "pytest"}, {"details": {"status": "completed", "exitCode": 0}})


def ping_pong(play: Played) -> None:
    build_failed = {
        "details": {
            "status": "failed",
            "exitCode": 2,
            "aggregated": "error: missing config key 'db'",
            "durationMs": 1234,
        }
    }
    for step in range(60):
        if step % 2 == 0:
            play.cycle("read_file", {"path": "config.yaml"}, {"text": "db: null"})
        else:
            play.cycle("exec", {"command": "make build"}, build_failed)


def compaction_loop(play: Played) -> None:
    for step in range(3):
        play.cycle("web_search", {"q": f"topic {step}"}, {"text": f"results {step}"})
    play.run.compaction("context_overflow")
    play.note("context overflow: the runner compacts the context and retries")
    for _ in range(5):
        play.cycle("web_fetch", {"url": "https://example.invalid/a"}, {"error": "timeout"})


def failing_tools(play: Played) -> None:
    """Every call different, every one failing: no repeat detector sees a loop here."""
    for step in range(20):
        region = f"eu-{step % 4 + 1}"
        if step % 2 == 0:
            play.cycle(
                "exec",
                {"command": f"deploy --region {region} --try {step}"},
                None,
                error=f"exec failed: region {region} rejected the credentials",
            )
        else:
            play.cycle(
                "http_request",
                {"url": f"https://{region}.example.invalid/health"},
                None,
                error="connect ECONNREFUSED",
            )


def same_failure(play: Played) -> None:
    """The same call failing with the same error, retried unchanged."""
    play.cycle("read_file", {"path": "deploy.yaml"}, {"text": "target: prod"})
    for _ in range(8):
        play.cycle(
            "git_push",
            {"remote": "origin", "branch": "main"},
            None,
            error="rejected: non-fast-forward",
        )


def compaction_storm(play: Played) -> None:
    """Compaction after compaction, each retry redoing calls it had already made."""
    search = ("web_search", {"q": "quarterly report"}, {"text": "3 results"})
    fetch = ("web_fetch", {"url": "https://example.invalid/report"}, {"text": "page 1"})
    play.cycle(*search)
    play.cycle(*fetch)
    for step in range(6):
        play.run.compaction("context_overflow")
        play.note("context overflow: the runner compacts the context and retries")
        play.cycle(*(search if step % 2 else fetch))


@dataclass(frozen=True)
class Scenario:
    name: str  # run id prefix
    agent: str
    title: str
    play: Callable[[Played], None]


SCENARIOS = (
    Scenario("normal", "coder", "ordinary work, no loop", normal_work),
    Scenario(
        "pingpong", "coder", "the agent alternates two calls that make no progress", ping_pong
    ),
    Scenario(
        "compact",
        "researcher",
        "context overflow, compaction, then the same call again",
        compaction_loop,
    ),
    Scenario("failing", "ops", "every call different, every one failing", failing_tools),
    Scenario("retry", "ops", "the same call failing with the same error", same_failure),
    Scenario("storm", "researcher", "compaction after compaction, no progress", compaction_storm),
)


def _settle(client: GatewayClient, run: GatewayRun) -> bool:
    """Wait until the worker has processed every event the run published; False on timeout.

    An aborted run is settled once its abort is in: decisions of a run come in order on one
    control partition, and the gateway publishes nothing after an abort."""
    try:
        return not client.take_verdict(run.run_id, run.seq).timed_out
    except RunAborted:
        return True


# -- printing ------------------------------------------------------------------------------


def _reason(decision: Decision) -> str:
    """The reason without a leading copy of the error code (printed beside it already)."""
    reason = decision.reason
    code = decision.error_code
    if code and reason.startswith(f"{code}:"):
        reason = reason[len(code) + 1 :].lstrip()
    return reason


def _decision_lines(decision: Decision, stopped: bool) -> list[str]:
    head = (
        f"  seq {decision.seq:>3}  {decision.action.value.upper():<5}  "
        f"{decision.detector} (count {decision.count})"
    )
    if decision.action is not Action.ABORT:
        room = max(WIDTH - len(head) - 2, 20)
        return [f"{head}: {textwrap.shorten(_reason(decision), room, placeholder=' ...')}"]
    # An abort ends the run: its reason, in full, is what the gateway reports.
    code = f": {decision.error_code}" if decision.error_code else ""
    wrapped = textwrap.wrap(
        _reason(decision), WIDTH, initial_indent=INDENT, subsequent_indent=INDENT
    )
    then = [f"{INDENT}-> the gateway stopped the run"] if stopped else []
    return [f"{head}{code}", *wrapped, *then]


def _run_lines(played: Played, decisions: list[Decision]) -> list[str]:
    """Decisions and gateway notes of one run, in the run's event order."""
    stopped_id = played.stopped_by.decision_id if played.stopped_by else None
    entries: list[tuple[int, int, list[str]]] = [
        (d.seq, 1, _decision_lines(d, d.decision_id == stopped_id)) for d in decisions
    ]
    entries += [(seq, 0, [f"  seq {seq:>3}  {text}"]) for seq, text in played.notes]
    lines = [line for _, _, group in sorted(entries, key=lambda e: e[:2]) for line in group]
    return lines or ["  no decisions"]


def _counts(decisions: list[Decision]) -> str:
    counts = Counter(d.action for d in decisions)
    parts = [
        f"{counts[a]} {a.value}" for a in (Action.WARN, Action.BLOCK, Action.ABORT) if counts[a]
    ]
    return ", ".join(parts) or "no decisions"


def _config_lines(config_path: Path) -> list[str]:
    cfg = fleet_from_document(DEMO_CONFIG).for_agent("*")
    text = (
        f"{json.dumps(DEMO_CONFIG)} turns on the loop detectors (off by default): "
        f"warn at {cfg.warning_threshold} repeats, block at {cfg.critical_threshold}, abort "
        f"at block {cfg.abort_after_blocks}; the post-compaction guard (on by default) aborts "
        f"a call that repeats {cfg.compaction_window_size} times after a compaction"
    )
    return [
        f"  config   {config_path}",
        *textwrap.wrap(text, WIDTH, initial_indent=INDENT, subsequent_indent=INDENT),
    ]


def _loopguard_command() -> list[str]:
    """How to run this very loopguard: the script beside the running interpreter.

    After ``.venv/bin/pip install -e .`` nothing puts ``.venv/bin`` on PATH, so a bare
    ``loopguard`` would not be found; the absolute path works from any folder."""
    script = Path(sys.executable).parent / "loopguard"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "streams.cli.main"]


def _shell(args: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in args)


# -- the demo ------------------------------------------------------------------------------


def run_demo(db_url: str, keep_running: bool = False) -> int:
    tag = uuid.uuid4().hex[:6]  # fresh run ids on every invocation
    DATA.mkdir(exist_ok=True)
    CONFIG_FILE.write_text(json.dumps(DEMO_CONFIG, indent=2) + "\n")
    # Neither the topics created below nor the demo's own run of the detector core (its check
    # of the worker's decisions) is news to a demo user.
    for name in ("loopguard.topics", "loopguard.compaction"):
        logging.getLogger(name).setLevel(logging.WARNING)
    if "LOOPGUARD_CLIENT_LOGLEVEL" not in os.environ:
        # kafka-python's own diagnostic of a slow step in its I/O loop: client internals.
        logging.getLogger("kafka.net.selector").setLevel(logging.ERROR)

    _say("loopguard demo: an embedded broker, an audit trail, one worker and a demo gateway")
    for line in _config_lines(CONFIG_FILE):
        _say(line)
    broker = EmbeddedBroker(log_path=DATA / "tansu.log").start()
    _say("  broker   tansu, embedded, memory storage (its topics go when the demo ends)")
    migrate(db_url)
    _say(f"  audit    {redact_url(db_url)}")
    settings = Settings.for_profile("tansu", broker=broker.url, partitions=4)
    ensure_topics(settings)
    worker = WorkerProcess(
        broker.url,
        db_url,
        profile="tansu",
        log_path=DATA / "worker.log",
        config_file=str(CONFIG_FILE),
        partitions=4,
        env={"LOOPGUARD_SESSION_TIMEOUT": "2", "LOOPGUARD_HEARTBEAT_INTERVAL": "0.5"},
    ).start()
    _say(f"  worker   1 process, log {DATA / 'worker.log'}")
    client = GatewayClient(
        broker.bootstrap, gateway_id="demo-gw", wait_budget_ms=WAIT_BUDGET_MS, fail_mode="closed"
    )
    try:
        wait_until_processing(client, workers=[worker])
        _say(
            f"  ready    a readiness run (agent {CANARY_AGENT}) came back aborted; "
            "the audit trail lists it too"
        )
        _say(
            f"  gateway  before each tool call, waits (up to {WAIT_BUDGET_MS // 1000} s) "
            "until the worker has seen the run so far"
        )
        played = [_play(client, worker, scenario, tag) for scenario in SCENARIOS]
        ok = _summary(client, played, db_url)
        _hint(played, db_url, broker if keep_running else None)
        if keep_running:
            assert broker.process is not None and worker.process is not None
            _say(
                f"\nleft running (stop both with: kill {worker.process.pid} {broker.process.pid}):"
            )
            _say(f"  broker   {broker.url} (tansu, pid {broker.process.pid})")
            _say(f"  worker   pid {worker.process.pid}, log {DATA / 'worker.log'}")
        return 0 if ok else 1
    finally:
        client.close()
        if not keep_running:
            worker.stop()
            broker.stop()


def _play(client: GatewayClient, worker: WorkerProcess, scenario: Scenario, tag: str) -> Played:
    run = client.start_run(scenario.agent, run_id=f"{scenario.name}-{tag}")
    _say(f"\n== run {run.run_id} (agent {scenario.agent}): {scenario.title} ==")
    played = Played(run)
    try:
        scenario.play(played)
        run.end()
    except RunAborted as aborted:
        played.stopped_by = aborted.decision
        client.flush()
    if not _settle(client, run):
        alive = "is running" if worker.alive else "has exited"
        raise RuntimeError(
            f"the worker did not process run {run.run_id} in {WAIT_BUDGET_MS // 1000} s "
            f"(it {alive}; see {worker.log_path})"
        )
    for line in _run_lines(played, client.decisions(run.run_id)):
        _say(line)
    return played


def _audited(db_url: str, run_ids: list[str], expected: int) -> int:
    """Audit rows of these runs, once the worker has written ``expected`` (or time is up)."""
    deadline = time.monotonic() + AUDIT_TIMEOUT
    with AuditStore(db_url) as store:
        while True:
            count = sum(len(store.history(rid)) for rid in run_ids)
            if count >= expected or time.monotonic() > deadline:
                return count
            time.sleep(0.1)


def _summary(client: GatewayClient, played: list[Played], db_url: str) -> bool:
    _say("\n== summary ==")
    core = LoopGuard(fleet_from_document(DEMO_CONFIG))
    received: list[Decision] = []
    expected: list[Decision] = []
    for play in played:
        run_id = play.run.run_id
        decisions = client.decisions(run_id)
        received += decisions
        expected += core.process_all(play.run.events)
        refused = f" ({play.refused} refused)" if play.refused else ""
        stopped = f", stopped before call {play.calls + 1}" if play.stopped_by else ""
        _say(f"  {run_id:<16} {play.calls:>2} tool calls{refused}{stopped}: {_counts(decisions)}")
    same = [(d.decision_id, d.reason) for d in received] == [
        (d.decision_id, d.reason) for d in expected
    ]
    if same:
        _say(f"  {len(received)} decisions: what the detector core decides on these events")
    else:
        _say(f"  {len(received)} decisions ({_counts(received)}), but the detector core decides")
        _say(f"  {len(expected)} ({_counts(expected)}) on these events: see {DATA / 'worker.log'}")
    run_ids = [play.run.run_id for play in played]
    audited = _audited(db_url, run_ids, len(received))
    _say(f"  {audited} rows for these runs in the audit trail")
    return same and audited == len(received) and client.wait_timeouts == 0


def _hint(played: list[Played], db_url: str, broker: EmbeddedBroker | None) -> None:
    loopguard = _loopguard_command()
    db = [] if db_url == os.environ.get("LOOPGUARD_DB_URL", DEFAULT_DB_URL) else ["--db", db_url]
    looped = next((p.run.run_id for p in played if p.stopped_by), played[-1].run.run_id)
    _say("\nquery the audit trail (from this folder):")
    _say(f"  {_shell([*loopguard, 'history', looped, *db])}")
    _say(f"  {_shell([*loopguard, 'runs', *db])}")
    if broker is not None:
        _say("replay the runs' events through the detector core and compare with the trail:")
        replay = [*loopguard, "replay", "--broker", broker.url, "--config", str(CONFIG_FILE)]
        _say(f"  {_shell([*replay, *db])}")
