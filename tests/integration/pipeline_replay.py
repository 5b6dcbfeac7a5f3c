"""Shared by the pipeline tests that check a worker against replay (test_agent_cycles,
test_sessions): decisions in a comparable order, and ``loopguard replay`` run over a
pipeline's own topics, audit database and config file."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from services import Pipeline

from streams.cli.common import EXIT_OK
from streams.cli.main import main
from streams.core.events import Decision


def by_run_and_seq(decisions: Iterable[Decision]) -> list[dict[str, Any]]:
    """The decisions as dicts, ordered by run then sequence, to compare two sources."""
    return sorted((d.to_dict() for d in decisions), key=lambda d: (d["run_id"], d["seq"]))


def replay_pipeline(pipeline: Pipeline, capsys: Any, *options: str) -> dict[str, Any]:
    """``loopguard replay --json`` over the pipeline's events topic with its config and audit
    trail (``options`` added, e.g. ``--run ID``): its report, once it exited 0."""
    code = main(
        [
            "replay",
            "--broker",
            pipeline.broker.url,
            "--topic-prefix",
            pipeline.prefix,
            "--db",
            pipeline.db_url,
            "--config",
            str(pipeline.workdir / f"{pipeline.prefix}-config.json"),
            *options,
            "--json",
        ]
    )
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert code == EXIT_OK, report
    return report
