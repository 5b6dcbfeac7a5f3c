"""Issue 43 in the REAL OpenClaw, against a real worker: an agent whose loopguard config says
``warnings: "model"`` hears the warning in the tool result it sees (the plugin appends the
decision's note through OpenClaw's tool-result middleware), and a blocked call's result the
model sees is the note too. The harness, fixtures and checks are test_openclaw_plugin's: one
headless agent turn (``openclaw agent --local``) whose scripted model repeats one ``read``.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_openclaw_plugin import (  # noqa: F401 (openclaw_runtime: the session fixture)
    FAST_LOOP,
    Turn,
    audit_until,
    check,
    openclaw_runtime,
    sqlite_only,
    start_pipeline,
)

from streams.core.events import Action
from streams.core.model_notes import MODEL_NOTE

pytestmark = pytest.mark.integration

HEARD = {"tools": {"loopDetection": {**FAST_LOOP["tools"]["loopDetection"], "warnings": "model"}}}
NOTE_START = "[loopguard] You have called read with the same arguments"


@sqlite_only
def test_the_agent_hears_the_warning_in_its_tool_result(
    openclaw_runtime: dict[str, Any],  # noqa: F811
    pipeline_factory: Any,
    migrated_db_url: str,
) -> None:
    pipeline = start_pipeline(pipeline_factory, migrated_db_url, HEARD)
    turn = Turn(pipeline, "local", ["--max-tool-calls", "30"])
    run_id = turn.run_id()
    seen = turn["toolResultsSeenByModel"]
    trace = turn["trace"]

    def in_openclaw() -> None:
        assert turn["plugin"]["connected"], "the plugin never connected to the broker"
        notes = [r for r in trace if r.get("event") == "model_note"]
        assert notes, "no note was attached to a tool result"
        assert all(r["note"].startswith(NOTE_START) for r in notes), notes
        # What the model got back: the file's content, then the warning, worded for it
        content = "hello from the loop"
        read_with_note = [t for t in seen if t.startswith(content) and NOTE_START in t]
        assert len(read_with_note) == len(notes), seen
        assert "first noticed at " in read_with_note[0], read_with_note[0]
        # a blocked call's result is the block's note, not the generic refusal
        blocked = [t for t in seen if not t.startswith(content)]
        assert blocked and all(NOTE_START in t for t in blocked), seen
        assert not any("loopguard blocked this call" in t for t in seen), seen
        reasons = turn["toolCalls"]["blockReasons"]
        assert reasons and all(r.startswith(NOTE_START) for r in reasons), reasons
        assert "loopguard refused this call: it did not run." in reasons[0], reasons

    check(turn, in_openclaw)
    rows = audit_until(pipeline, run_id, lambda ds: any(d.action is Action.ABORT for d in ds))

    def in_loopguard() -> None:
        # the worker worded every decision it recorded, and the note the model heard is one
        assert rows and all(d.extra.get(MODEL_NOTE, "").startswith(NOTE_START) for d in rows)
        heard = {r["note"] for r in trace if r.get("event") == "model_note"}
        assert heard <= {d.extra[MODEL_NOTE] for d in rows if d.action is Action.WARN}, heard

    check(turn, in_loopguard)
    print(f"openclaw turn with notes: {turn.seconds:.0f} s, {turn['toolCalls']}")
