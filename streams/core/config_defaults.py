"""The defaults of a ``tools.loopDetection`` block and the field lists its validation and its
version hash go by (config.py merges, validates and resolves blocks with them).
"""

from __future__ import annotations

from typing import Any

from streams.core.deviations import LOOPGUARD

# Field name -> default, exactly as the spec's table. ``enabled`` is tri-state (unset is not
# false: the post-compaction guard runs unless ``enabled`` is explicitly false).
DEFAULTS: dict[str, Any] = {
    "enabled": None,
    "historySize": 30,
    "warningThreshold": 10,
    "criticalThreshold": 20,
    "unknownToolThreshold": 10,
    "globalCircuitBreakerThreshold": 30,
    "detectors": {
        "genericRepeat": True,
        "knownPollNoProgress": True,
        "pingPong": True,
        # loopguard extensions (issue 17), on with the others:
        "consecutiveErrors": True,
        "errorRepeat": True,
        "compactionStorm": True,  # issue 29: the storm rule's own switch
        # issue 38 (progress.py): loops whose rounds hold other calls
        "unchangedOutcome": True,
        "repeatedCycle": True,
        # issue 44 (bursts.py): one assistant turn's parallel calls judged as a set
        "burstRepeat": True,
        # issue 44 (session_failures.py): the same failure run after run of a session
        "errorAcrossRuns": True,
    },
    # loopguard extension: ``stormThreshold`` compaction retries in a row with no progress
    # between them abort the run (compaction_storm).
    "postCompactionGuard": {"windowSize": 3, "stormThreshold": 3},
    # loopguard extension: blocks the gateway obeyed and the agent kept looping through
    # before the run is aborted (the reference never escalated a block).
    "abortAfterBlocks": 3,
    # loopguard extensions (issue 17): failed calls in a row whatever the tool, and the same
    # call failing with the same error.
    "consecutiveErrors": {"warningThreshold": 5, "criticalThreshold": 10},
    # 4 since issue 38: on real agent runs a 4th identical retry of a failing edit was
    # followed by a fix on the agent's own (docs/detection-quality.md).
    "errorRepeatThreshold": 4,
    # loopguard extensions (issue 38, progress.py): the same call's identical outcomes in a
    # row, whatever calls come between; a 3- or 4-call cycle's identical rounds. Chosen on
    # real agent runs (docs/detection-quality.md).
    "unchangedOutcome": {"warningThreshold": 5, "criticalThreshold": 8},
    "repeatedCycle": {"warningThreshold": 3, "criticalThreshold": 4},
    # loopguard extension (issue 44, bursts.py): the repeats of one assistant turn's calls
    # (calls made again in the same turn), counted while they are at least
    # ``repeatsPerCall`` per repeated call; a burst cycling over 3 URLs is blocked at its
    # 20th call, a turn reading 20 different files never.
    "burstRepeat": {"warningThreshold": 8, "criticalThreshold": 16, "repeatsPerCall": 2},
    # loopguard extension (issue 44, session_failures.py): in session scope, the same call
    # failing the same way in this many runs of the session in a row (the 56-run failing
    # heartbeat is blocked at its 6th run).
    "errorAcrossRuns": {"warningThreshold": 3, "criticalThreshold": 5},
    # loopguard extension (issue 17): "observe" records and publishes every decision with
    # enforced false, so gateways log it and never block (shadow mode); "enforce" obeys it.
    "mode": "enforce",
    # loopguard extension (issue 17): "session" carries a loop's counts over to a new run of
    # the same session (a compaction can start one), except runs started by these triggers.
    "scope": "run",
    "sessionFreshTriggers": ["heartbeat", "cron"],
    # issue 44: a run that begins more than this long after its session's previous run's last
    # event starts fresh too (a schedule or a pause, not a continuation); 0: any gap carries.
    # Unset: SESSION_GAP_SECONDS, or 0 under compat "openclaw".
    "sessionGapSeconds": None,
    # issue 29 (deviations.py): "openclaw" switches every deviation from the reference off;
    # ``deviations`` switches them one by one (an unset switch follows ``compat``).
    "compat": LOOPGUARD,
    "deviations": {},
    # issue 43 (model_notes.py): "model" puts a note worded for the model on each of the
    # agent's decisions, which gateways attach to the next tool result the model sees and
    # use as a block's refusal text; "log" (the default) only logs warnings.
    "warnings": "log",
    # issue 43 (loop_spend.py): abort a run whose tokens spent while looping (from the first
    # warning of its current loop) exceed this; unset: no budget.
    "maxLoopTokens": None,
    # issue 43 (hold.py): "hold" has the gateway hold a blocked call up to
    # holdTimeoutSeconds for an operator's release or abort, then do holdDefault.
    "onBlock": "refuse",
    "holdTimeoutSeconds": 300,
    "holdDefault": "refuse",
}
ENFORCE, OBSERVE = "enforce", "observe"
MODES = (ENFORCE, OBSERVE)
WARNINGS_TO = ("log", "model")
ON_BLOCK = ("refuse", "hold")
HOLD_DEFAULTS = ("refuse", "abort", "release")
SCOPES = ("run", "session")
# Fields added after config versions were first recorded: left out of the version while at
# their default, so a config that does not use them keeps the version it always had.
VERSIONED_WHEN_SET = (
    "scope",
    "sessionFreshTriggers",
    "unchangedOutcome",
    "repeatedCycle",
    "errorAcrossRuns",
    "sessionGapSeconds",
    "burstRepeat",
    "warnings",
    "maxLoopTokens",
    "onBlock",
    "holdTimeoutSeconds",
    "holdDefault",
)
# loopguard's detectors added after versions were recorded: in the version only when off.
VERSIONED_WHEN_OFF = (
    "compactionStorm",
    "unchangedOutcome",
    "repeatedCycle",
    "errorAcrossRuns",
    "burstRepeat",
)
# sessionGapSeconds unset: a heartbeat every 30 minutes or an hourly check starts fresh even
# when its RunStarted names no trigger, while a compaction's new run (seconds later) carries.
SESSION_GAP_SECONDS = 600
INT_FIELDS = (
    "historySize",
    "warningThreshold",
    "criticalThreshold",
    "unknownToolThreshold",
    "globalCircuitBreakerThreshold",
    "abortAfterBlocks",
    "errorRepeatThreshold",
)
# Nested objects whose every field is a whole number >= 1.
INT_BLOCKS = (
    "postCompactionGuard",
    "consecutiveErrors",
    "unchangedOutcome",
    "repeatedCycle",
    "errorAcrossRuns",
    "burstRepeat",
)
MAX_HISTORY_SIZE = 100_000
