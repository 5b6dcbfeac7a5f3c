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
import secrets
import shlex
import sys
import textwrap
import time
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

from streams.audit.database import migrate
from streams.audit.store import AuditStore
from streams.core.engine import LoopGuard
from streams.core.events import Action, Decision
from streams.core.fleet import fleet_from_document
from streams.devtools.demo_cost import play_loop_cost
from streams.devtools.demo_incident import play_incident
from streams.devtools.demo_runs import (
    INCIDENT_SETTINGS,
    SCENARIOS,
    TRIANGLE,
    TRIANGLE_ROUNDS,
    TRIANGLE_TITLE,
    Played,
    Scenario,
    triangle_round,
)
from streams.devtools.demo_services import DATA, PIDFILE, LeftRunning, stopped_on_exit
from streams.devtools.embedded_broker import EmbeddedBroker, free_port, port_in_use
from streams.devtools.worker_process import CANARY_AGENT, WorkerProcess, wait_until_processing
from streams.gateway.client import GatewayClient, GatewayRun, RunAborted
from streams.kafka.topics import ensure_topics
from streams.replay.agent_cycles import with_agent_cycles
from streams.replay.compare import replay_events
from streams.settings import DEFAULT_DB_URL, PROFILES, Settings, redact_url

CONFIG_FILE = DATA / "demo-config.json"
KEYS_FILE = DATA / "gateway-keys.json"  # issue 40: the demo gateway's signing key
DEMO_GATEWAY = "demo-gw"
DEMO_CONFIG = {"tools": {"loopDetection": {"enabled": True, "incidents": INCIDENT_SETTINGS}}}
# The gateway waits this long for the worker's verdict before each tool call. Generous: the
# demo shows what loopguard decides, never what a slow machine lets through.
WAIT_BUDGET_MS = 30_000
AUDIT_TIMEOUT = 30.0  # seconds to wait for the worker's audit rows
WIDTH = 100  # printed lines are at most this wide (reasons are shortened at a word)
INDENT = " " * 11  # continuation lines, under the value column


def _say(text: str = "") -> None:
    print(text, flush=True)


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
    # The error code, unless it only repeats the detector's name (compaction_storm).
    code = decision.error_code
    code = f": {code}" if code and code != decision.detector else ""
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


DEFAULT_WEB_PORT = 6066


def check_db_url(db_url: str) -> str | None:
    """Why ``db_url`` cannot hold the demo's audit trail, or None; checked before anything
    starts, so a typo costs no broker."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        backend = make_url(db_url).get_backend_name()
    except ArgumentError:
        return f"--db {redact_url(db_url)} is not a database URL (e.g. sqlite:///audit.db)"
    if backend not in ("sqlite", "postgresql"):
        return f"--db {redact_url(db_url)}: {backend} is not supported (sqlite or postgresql)"
    return None


def run_demo(db_url: str, keep_running: bool = False, web_port: int | None = None) -> int:
    """Start everything, play the six runs, print what loopguard decided; exit code 0 when
    the worker decided what the detector core decides and the trail has every decision."""
    problem = check_db_url(db_url)
    if problem is not None:
        print(f"loopguard demo: {problem}", file=sys.stderr)
        return 1
    DATA.mkdir(exist_ok=True)
    left = LeftRunning.load()
    if left is not None and left.alive():
        print(
            f"loopguard demo: a demo left running here ({left.status_url}); stop it first "
            f"with: {_shell([*_loopguard_command(), 'demo', '--stop'])}",
            file=sys.stderr,
        )
        return 1
    PIDFILE.unlink(missing_ok=True)
    if keep_running and web_port is None:
        taken = port_in_use("127.0.0.1", DEFAULT_WEB_PORT)
        web_port = free_port() if taken else DEFAULT_WEB_PORT
    tag = uuid.uuid4().hex[:6]  # fresh run ids on every invocation
    CONFIG_FILE.write_text(json.dumps(DEMO_CONFIG, indent=2) + "\n")
    demo_key = write_demo_keys(KEYS_FILE)
    for log in ("tansu.log", "worker.log"):  # one demo's logs, not every demo's since
        (DATA / log).write_bytes(b"")
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
    broker = EmbeddedBroker(log_path=DATA / "tansu.log", die_with_parent=not keep_running)
    worker = WorkerProcess(
        "",
        db_url,
        profile="tansu",
        log_path=DATA / "worker.log",
        config_file=str(CONFIG_FILE),
        partitions=4,
        web_port=web_port if keep_running else None,
        env={
            "LOOPGUARD_SESSION_TIMEOUT": "2",
            "LOOPGUARD_HEARTBEAT_INTERVAL": "0.5",
            "LOOPGUARD_GATEWAY_KEYS": str(KEYS_FILE),  # signed events only (issue 40)
        },
        die_with_parent=not keep_running,
    )
    client: GatewayClient | None = None
    kept = False
    with stopped_on_exit([worker, broker], kept=lambda: kept) as stop:
        try:
            migrate(db_url)
            broker.start()
            stop.check()
            _say("  broker   tansu, embedded, memory storage (its topics go when the demo ends)")
            _say(f"  audit    {redact_url(db_url)}")
            ensure_topics(Settings.for_profile("tansu", broker=broker.url, partitions=4))
            worker.broker = broker.url
            worker.start()
            stop.check()
            _say(f"  worker   1 process, log {DATA / 'worker.log'}")
            client = GatewayClient(
                broker.bootstrap,
                gateway_id=DEMO_GATEWAY,
                signing_keys=demo_key,
                wait_budget_ms=WAIT_BUDGET_MS,
                fail_mode="closed",
                # tansu holds a fetch for its whole wait, even when decisions arrive
                fetch_max_wait_ms=PROFILES["tansu"].fetch_max_wait_ms,
            )
            stop.check()
            wait_until_processing(client, workers=[worker], interrupted=stop.requested)
            stop.check()
            _say(
                f"  ready    the worker caught a test loop (agent {CANARY_AGENT}; "
                "`loopguard runs --all` lists it)"
            )
            _say(
                f"  gateway  before each tool call, waits (up to {WAIT_BUDGET_MS // 1000} s) "
                "until the worker has seen the run so far"
            )
            played: list[Played] = []
            for scenario in SCENARIOS:
                played.append(_play(client, worker, scenario, tag))
                stop.check()
            played += _play_triangle(client, tag)
            stop.check()
            ok = _summary(client, played, db_url)
            stop.check()
            ok = play_incident(client, tag, db_url, _say) and ok  # issue 28, after the summary
            stop.check()
            ok = play_loop_cost(client, tag, db_url, _say) and ok  # issue 28: what loops cost
            stop.check()
            _hint(played, db_url, broker if keep_running else None)
            if keep_running:
                kept = _leave_running(broker, worker)
            return 0 if ok and (kept or not keep_running) else 1
        finally:
            if client is not None:
                client.close()


def _leave_running(broker: EmbeddedBroker, worker: WorkerProcess) -> bool:
    """Write the pidfile and say how to reach and stop what stays; False (and everything is
    stopped) when the status page does not answer."""
    assert broker.process is not None and worker.process is not None
    status = f"http://127.0.0.1:{worker.web_port}/status"
    if not _page_answers(status, worker):
        _say(f"\nthe status page at {status} did not answer; see {worker.log_path}")
        return False
    LeftRunning(
        pids={"worker": worker.process.pid, "broker": broker.process.pid},
        marks={"worker": "streams.cli.main", "broker": "tansu"},
        broker_url=broker.url,
        status_url=status,
    ).save()
    _say("\nleft running:")
    _say(f"  status   {status}")
    _say(f"  broker   {broker.url} (tansu, pid {broker.process.pid})")
    _say(f"  worker   pid {worker.process.pid}, log {DATA / 'worker.log'}")
    # Its port is not Kafka's 9092, where every command looks by default: they all read
    # LOOPGUARD_BROKER (and the worker LOOPGUARD_BROKER_PROFILE), and so can a gateway.
    _say("point loopguard's commands (and your gateways) at this broker:")
    _say(f"  {broker_exports(broker.url)}")
    _say(f"  {_shell([*_loopguard_command(), 'tail'])}")
    another = [*_loopguard_command(), "worker", "--broker", broker.url, "--broker-profile", "tansu"]
    another += ["--config", str(CONFIG_FILE), "--db", worker.db_url]
    keys = f"LOOPGUARD_GATEWAY_KEYS={shlex.quote(str(KEYS_FILE))}"
    _say(f"another worker on it (yours to stop with Ctrl-C): {keys} {_shell(another)}")
    _say(
        f"the worker takes signed events only: gateways sign with a key of {KEYS_FILE} "
        f"(gateway id {DEMO_GATEWAY}: LOOPGUARD_GATEWAY_KEY=demo:<its secret there>)"
    )
    release = [*_loopguard_command(), "release", "RUN", "--reason", "WHY"]
    _say(f"release a blocked run (signed with the file's operator key): {keys} {_shell(release)}")
    _say(f"stop both: {_shell([*_loopguard_command(), 'demo', '--stop'])} (from this folder)")
    return True


def write_demo_keys(path: Path) -> dict[str, str]:
    """A fresh signing key for the demo gateway, and one for its operator (``loopguard
    release`` and ``abort`` sign with it when LOOPGUARD_GATEWAY_KEYS names the file: without
    it the worker would refuse them), in a keys file only this user can read; the gateway's
    own key ({key id: secret})."""
    key = {"demo": secrets.token_hex(32)}
    operator = {"demo-operator": secrets.token_hex(32)}
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(json.dumps({"gateways": {DEMO_GATEWAY: key}, "operators": operator}) + "\n")
    return key


def broker_exports(url: str) -> str:
    """The shell line that makes every ``loopguard`` command use the demo's broker."""
    return f"export LOOPGUARD_BROKER={shlex.quote(url)} LOOPGUARD_BROKER_PROFILE=tansu"


def _page_answers(url: str, worker: WorkerProcess, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while worker.alive and time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return True
        except OSError:
            time.sleep(0.2)
    return False


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


def _play_triangle(client: GatewayClient, tag: str) -> list[Played]:
    """Three runs of three agents sending the same question round (issue 28): each run looks
    healthy on its own; the worker sees the cycle, warns, then blocks the next send."""
    plays = [Played(client.start_run(agent, run_id=f"{agent}-{tag}")) for agent in TRIANGLE]
    _say(f"\n== runs {', '.join(p.run.run_id for p in plays)}: {TRIANGLE_TITLE} ==")

    def taken_in(play: Played) -> None:  # the next agent answers once the worker has the send
        client.wait_processed(play.run.run_id, play.run.seq, timeout=WAIT_BUDGET_MS / 1000)

    def cycle_decisions(decisions: list[Decision]) -> int:
        return sum(d.detector == "agent_cycle" for d in decisions)

    # From warnAfter rounds on, each round with no progress brings the runs a decision.
    warn_after = fleet_from_document(DEMO_CONFIG).for_agent(TRIANGLE[0]).agent_cycles.warn_after
    first = plays[0].run.run_id
    for number in range(1, TRIANGLE_ROUNDS + 1):
        if not triangle_round(plays, taken_in):
            break
        if number >= warn_after:  # let it in before the next round's first send
            wanted = number - warn_after + 1
            client.wait_for(first, lambda ds, n=wanted: cycle_decisions(ds) >= n, timeout=30)
    for play in plays:
        play.run.end()
        _say(f"  {play.run.run_id}:")
        for line in _run_lines(play, client.decisions(play.run.run_id)):
            _say(f"  {line}")
    return plays


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
    core = with_agent_cycles(LoopGuard(fleet_from_document(DEMO_CONFIG)))
    replayed = replay_events(core, [event for play in played for event in play.run.events])
    received: list[Decision] = []
    expected: list[Decision] = []
    for play in played:
        run_id = play.run.run_id
        decisions = client.decisions(run_id)
        received += decisions
        expected += sorted(replayed[run_id].decisions, key=lambda d: d.seq)
        refused = f" ({play.refused} refused)" if play.refused else ""
        stopped = f", stopped at seq {play.stopped_by.seq}" if play.stopped_by else ""
        _say(f"  {run_id:<16} {play.calls:>2} tool calls{refused}{stopped}: {_counts(decisions)}")
    same = sorted((d.decision_id, d.reason) for d in received) == sorted(
        (d.decision_id, d.reason) for d in expected
    )
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
