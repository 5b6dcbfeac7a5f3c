"""Recording one tool result of a run: matching it to its call, its outcome in the history,
the error streak, the session's failing calls, the whole-run outcome memory and the
post-compaction guard, which may abort the run.
"""

from __future__ import annotations

from streams.core.call_record import CallRecord
from streams.core.config import LoopDetectionConfig
from streams.core.decisions import compaction_loop_decision
from streams.core.events import Decision, ToolResult
from streams.core.failures import unmatched_error_streak
from streams.core.hashing import call_info, result_outcome, stripped_result_outcome
from streams.core.outcome_memory import CHANGING_TOOLS
from streams.core.outcomes import Outcome
from streams.core.run_data import ABORTED, RunData
from streams.core.session_failures import remembers_failures
from streams.core.streaks import previous_with_result


def on_result(run: RunData, event: ToolResult, cfg: LoopDetectionConfig) -> list[Decision]:
    """Record ``event`` in ``run``; the post-compaction guard's abort, if it sees a loop."""
    tool_name = event.tool_name
    rules, devs = cfg.hash_rules, cfg.deviations
    per_tool = cfg.per_tool  # perTool: one lookup, none at all when it is empty
    view = per_tool.get(tool_name) if per_tool else None
    ignored = None if view is None else view.ignored_args
    history = run.history
    if event.args_json is None and (
        devs.result_args_by_call_id if event.tool_call_id else devs.result_to_open_call
    ):
        # Results may omit args when they carry the call id: hash with what the call had.
        if event.tool_call_id:
            record = history.find_pending(tool_name, None, event.tool_call_id)
            call = record or history.find_call(tool_name, event.tool_call_id)
        else:  # neither args nor id: only the tool's newest open call can be meant
            record = call = history.newest_pending(tool_name)
            if call is None:  # it matches no call (failures.unmatched_error_streak)
                run.error_streak = unmatched_error_streak(run.error_streak, event, cfg)
                return []
        if call is not None:
            sig, known_poll, action = call.sig, call.known_poll, call.action or None
        else:  # the call is out of the window (or never seen): no args known
            info = call_info(tool_name, "{}", rules, ignored)
            sig, known_poll, action = info.sig, info.known_poll, info.action
    else:  # its own args (with those switches off: what it carries, maybe none)
        record = history.pending_by_id.get(event.tool_call_id or "")
        if (
            record is not None
            and (seen := record.call_args) is not None
            and record.tool_name == tool_name
            and seen[0] == event.args_json
        ):
            # The result echoes its call's args text: same text, same call_info, and
            # find_pending would return this very record.
            info = seen[1]
        else:
            info = call_info(tool_name, event.args_json, rules, ignored)
            record = history.find_pending(tool_name, info.sig, event.tool_call_id)
        sig, known_poll, action = info.sig, info.known_poll, info.action
    if view is None:
        outcome = result_outcome(tool_name, action, event.result_json, event.error, rules)
    elif view.volatile is None:  # its own hash_rules: statusResult (status_results.py)
        outcome = result_outcome(tool_name, action, event.result_json, event.error, view.hash_rules)
    else:
        outcome = stripped_result_outcome(
            tool_name, action, event.result_json, event.error, view.volatile, view.hash_rules
        )
    if outcome.result_hash is None and not (outcome.loop_veto and devs.veto_is_outcome):
        # No result and no error: nothing to compare, so, as in the reference, it is not
        # an outcome at all; the call stays open for a result that says something. The
        # same for a veto when it is no outcome (``deviations.vetoIsOutcome`` off).
        return []
    if not outcome.loop_veto:  # failures.next_error_streak, inlined (every result)
        if event.error is None:
            run.error_streak = 0
        elif view is None or "consecutiveErrors" not in view.exempt:
            # an exempt tool's failures leave the streak as it is (its successes end it)
            run.error_streak += 1
        if (event.error is not None or run.failing.entries) and remembers_failures(
            cfg if view is None else view
        ):  # the session's failing calls (session_failures.py)
            if event.error is None:
                run.failing.succeeded(sig)
            else:
                run.failing.failed(sig, event.error, run.run_id)
    if run.turn.turn_id is not None and outcome.result_hash and not outcome.loop_veto:
        run.turn.answer(sig, outcome.result_hash)  # a result of the turn's calls
    if record is not None:
        history.attach_result(record, outcome)
    else:
        record = history.append_result(
            tool_name,
            sig,
            event.tool_call_id,
            known_poll,
            action if isinstance(action, str) else None,
            outcome,
        )
    if not outcome.loop_veto and cfg.enabled is True:
        remember_outcome(run, record, tool_name, outcome, event.error, cfg)
    guard = run.guard
    if guard.compacted and not guard.progressed and not outcome.loop_veto:
        # compaction storm: an outcome unlike its call's previous one is progress
        guard.outcome(record.no_progress_run == 1)
    if not (guard.remaining and cfg.compaction_guard_on):  # guard.armed, inlined
        return []
    if view is not None and "postCompactionGuard" in view.exempt:
        return []  # the guard does not see an exempt tool's outcomes (nor spend its window)
    # The guard compares exact results (its rule: only identical results abort), not the
    # masked hash the rolling detectors use.
    loop = guard.observe(record.tool_name, record.sig, outcome.exact_hash or record.result_hash)
    if loop is None:
        return []
    run.status = ABORTED
    return [compaction_loop_decision(run.run_id, event, cfg, loop)]


def remember_outcome(
    run: RunData,
    record: CallRecord,
    tool_name: str,
    outcome: Outcome,
    error: str | None,
    cfg: LoopDetectionConfig,
) -> None:
    """Feed the whole-run memory of the rules that see progress (outcome_memory.py)."""
    memory = run.outcomes
    if error is None:
        memory.changed(tool_name)
    result_hash = outcome.result_hash
    if not cfg.detectors.unchanged_outcome or result_hash is None or outcome.empty:
        return
    if outcome.counters:  # a status report: its counters moved with the calls between
        return
    index, within = record.index, cfg.history_size
    if memory.streaks:
        memory.drop_stale(index, within)
    if memory.extend(record.sig, result_hash, index, within):
        return
    # The call's previous outcome, if still in the window: a record keeps its link to one that
    # has left the window since, and a state restored from the changelog has only the window,
    # so neither may start a streak from it.
    previous = previous_with_result(record, run.history.window_start)
    if (
        previous is not None
        and previous.result_hash == result_hash
        and index - previous.index <= within
    ):
        edits = run.history.changes_since(previous.index, CHANGING_TOOLS)
        memory.begin(record.sig, result_hash, previous.index, index, memory.changes - edits)
