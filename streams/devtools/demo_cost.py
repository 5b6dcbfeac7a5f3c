"""The demo's loop cost (issue 28): a polling run reports each model turn's tokens; the worker
keeps what it spent while looping and estimates what its abort saved."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from streams.audit.store import AuditStore
from streams.devtools.demo_runs import LOOP_COST_TITLE, Played, polling_loop
from streams.gateway.client import GatewayClient, RunAborted

COST_TIMEOUT = 30.0  # seconds to wait for the run's usage in the audit trail


def usage_of(
    db_url: str, run_id: str, final_seq: int, timeout: float = COST_TIMEOUT
) -> dict[str, Any] | None:
    """The run's stored usage once the trail holds its last event (``final_seq``, the run's
    end, which carries its last turn's usage): read any earlier and the figures depend on
    how far the audit writer had got (None after timeout)."""
    deadline = time.monotonic() + timeout
    with AuditStore(db_url) as store:
        while True:
            progress = store.run_progress(run_id)  # written with the usage, in one transaction
            if progress is not None and progress.last_seq >= final_seq:
                return store.run_usage([run_id]).get(run_id)
            if time.monotonic() > deadline:
                return None
            time.sleep(0.2)


def play_loop_cost(
    client: GatewayClient, tag: str, db_url: str, say: Callable[[str], None]
) -> bool:
    """Play the polling run and say what its loop cost and what its abort saved (the bounded
    estimate, issue 41: a run this fast would go on as long again, so whatever the machine's
    pace it is what the run spent by the abort); False when its usage never arrived."""
    run_id = f"cost-{tag}"
    say(f"\n== run {run_id}: {LOOP_COST_TITLE} ==")
    play = Played(client.start_run("ops", run_id=run_id))
    try:
        polling_loop(play)
        play.run.end()
    except RunAborted as aborted:
        play.stopped_by = aborted.decision
        play.run.end("aborted")
    stopped = f", aborted at seq {play.stopped_by.seq}" if play.stopped_by else ""
    say(f"  {play.calls} calls, {play.refused} refused{stopped}")
    usage = usage_of(db_url, run_id, play.run.seq)
    if usage is None:
        say(f"  no usage recorded within {COST_TIMEOUT:.0f} s: see the worker log")
        return False
    tokens = usage["input_tokens"] + usage["output_tokens"]
    say(f"  {tokens:,} tokens over {usage['tool_calls']} calls (${usage['cost_usd']:.2f})")
    say(
        f"  {usage['loop_tokens']:,} of them while looping (${usage['loop_cost_usd']:.2f}, "
        f"{usage['loop_calls']} calls after the first warning)"
    )
    say(
        f"  {usage['saved_tokens']:,} tokens saved by the abort (est.: as many calls again, "
        "at most what it spent)"
    )
    return True
