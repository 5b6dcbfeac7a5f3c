"""How the audit trail reports shadow mode (``mode: "observe"``, issue 17).

An observed run goes through the same state machine as an enforced one, so its progress
record says ``aborted`` once the core would have aborted it, although the gateway let it run
on. Every report of a run's status goes through :func:`reported_status`, so such a run reads
``aborted (observe only)`` unless one of its abort decisions was enforced.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Exists, exists, true
from sqlalchemy.orm import aliased

ABORTED = "aborted"
OBSERVED_ABORT = "aborted (observe only)"
OBSERVE_ONLY = "observe only"


def enforced_abort_exists(decision_rows: Any, run_id: Any) -> Exists:
    """SQL: the run (``run_id``, a column of the outer query) has an enforced abort decision
    in ``decision_rows`` (the decisions table's model), over all its decisions whatever a
    report filters."""
    d = aliased(decision_rows)
    return exists().where(d.run_id == run_id, d.action == "abort", d.enforced.is_(true()))


def reported_status(status: str | None, enforced_abort: bool) -> str | None:
    """A run's progress status as reports show it: an abort nobody enforced says so."""
    if status == ABORTED and not enforced_abort:
        return OBSERVED_ABORT
    return status
