"""The demo's six agent runs, as a gateway plays them: what each run's agent does, call by call.

Kept apart from :mod:`streams.devtools.demo` (which starts the services and prints) so a run can
be read as the story it tells: normal work, a ping-pong loop, a loop that survives a
compaction, and one run for each failure rule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from streams.core.events import Decision
from streams.gateway.client import GatewayRun

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


# -- loops between agents (issue 28) ----------------------------------------------------------

TRIANGLE = ("planner", "researcher", "reviewer")  # planner -> researcher -> reviewer -> planner
TRIANGLE_TITLE = "three agents pass the same question round with sessions_send, no progress"
TRIANGLE_MESSAGE = "Can you double-check the Q3 numbers before we publish?"
TRIANGLE_ROUNDS = 8  # at most; the default agentCycles blocks the fifth round's sends


def triangle_round(plays: list[Played], wait: Callable[[Played], None]) -> bool:
    """One round of the triangle: each agent forwards the same question to the next one
    (OpenClaw's ``sessions_send`` to ``agent:<id>:main``); ``wait(play)`` lets the worker
    take a send in before the next agent answers it. False once a send was refused."""
    for index, play in enumerate(plays):
        target = plays[(index + 1) % len(plays)].run.agent_id
        args = {"sessionKey": f"agent:{target}:main", "message": TRIANGLE_MESSAGE}
        if not play.cycle("sessions_send", args, {"status": "ok", "reply": "Passing it on."}):
            return False
        wait(play)
    return True


# -- a loop incident across several runs (issue 28) -------------------------------------------

INCIDENT_AGENTS = ("support", "billing", "ops")
INCIDENT_RUNS = 6
INCIDENT_TITLE = "six runs of three agents retry a payments API that is down"
# 3 runs of 3 agents in one minute: the six runs are one incident even when a minute ends
# while they play (the window holding three of them opens it, the next one continues it).
INCIDENT_SETTINGS = {"enabled": True, "windowSeconds": 60, "minRuns": 3, "minAgents": 3}


def upstream_outage(play: Played, number: int) -> None:
    """The payments API answers 503 whatever is asked; the agent retries the same call, and
    each run's error names its own request id (one signature once normalised)."""
    args = {"url": "https://payments.example.invalid/v2/charges", "order": f"A-{number}"}
    error = f"payments API returned 503 Service Unavailable (request req_{7000 + number})"
    for _ in range(6):
        play.cycle("http_request", args, None, error=error)


# -- a run's loop cost (issue 28) ---------------------------------------------------------------

LOOP_COST_TITLE = "a run's loop cost: the agent polls a finished process, 12k tokens a turn"
# One model turn of the polling agent: its context (read) and its short answer (written).
LOOP_COST_TURN = (12_000, 150, 0.0375)


def polling_loop(play: Played) -> None:
    """openclaw#16808's shape: the agent polls the same background process over and over and
    every poll is a model turn re-reading its whole context; the gateway reports each turn's
    usage with the call it led to."""
    args = {"action": "poll", "sessionId": "deploy-42"}
    for _ in range(40):  # the default config aborts it at its 30th identical poll
        play.run.report_usage(*LOOP_COST_TURN)
        play.cycle("process", args, {"details": {"status": "completed", "exitCode": 0}})
