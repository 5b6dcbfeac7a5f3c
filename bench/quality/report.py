"""The benchmark's table: one row per rule set, then which rule made each first stop, and the
runs stopped that should not have been (when few enough to list)."""

from __future__ import annotations

from typing import Any

from .corpus import CHARS_PER_TOKEN, RESOLVED, UNRESOLVED, Label, Run
from .scores import RowScore, Stop

LISTED = 8  # runs listed per row and kind of wrong stop (the JSON lists them all)


def tokens(n: int) -> str:
    for size, unit in ((1_000_000, "M"), (1_000, "k")):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


def tokens_cell(row: RowScore) -> str:
    if row.tokens_estimated and row.tokens_saved:
        return f"{tokens(row.tokens_saved)} + {tokens(row.tokens_estimated)} est."
    if row.tokens_estimated:
        return f"{tokens(row.tokens_estimated)} est."
    return tokens(row.tokens_saved)


def of(count: int, total: int) -> str:
    return f"{count}/{total}" if total else "-"


def delay(row: RowScore) -> str:
    if row.delay_median is None or row.delay_max is None:
        return "-"
    return f"{row.delay_median:+g} / {row.delay_max:+d}"


def columns(row: RowScore) -> list[str]:
    return [
        str(row.resolved["warn"]),
        str(row.resolved["block"]),
        str(row.resolved["abort"]),
        str(row.unresolved["block"]),
        str(row.unresolved["abort"]),
        of(row.stuck_stopped, row.stuck),
        delay(row),
        of(len(row.false_stops), row.not_stuck),
        str(row.calls_saved),
        tokens_cell(row),
    ]


GROUPS = (
    ("resolved runs", ("warned", "blocked", "aborted")),
    ("unresolved runs", ("blocked", "aborted")),
    ("labelled stuck", ("stopped", "delay med / max")),
    ("not stuck", ("stopped",)),
    ("stopping saved", ("calls", "tokens")),
)


def table(rows: list[RowScore]) -> list[str]:
    """Right-aligned cells under two header lines: column groups over column names."""
    names = [name for _, group in GROUPS for name in group]
    cells = [columns(row) for row in rows]
    widths = [max(len(name), *(len(c[i]) for c in cells)) for i, name in enumerate(names)]
    spans: list[tuple[str, int]] = []
    start = 0
    for title, group in GROUPS:
        end = start + len(group)
        span = sum(widths[start:end]) + 2 * (len(group) - 1)
        if len(title) > span:
            widths[end - 1] += len(title) - span
            span = len(title)
        spans.append((title, span))
        start = end
    first = max(len("rule set"), *(len(row.name) for row in rows))
    top = " " * first + "".join(f"  {title:^{span}}" for title, span in spans)
    head = f"{'rule set':<{first}}" + "".join(
        f"  {n:>{w}}" for n, w in zip(names, widths, strict=True)
    )
    body = [
        f"{row.name:<{first}}" + "".join(f"  {c:>{w}}" for c, w in zip(cell, widths, strict=True))
        for row, cell in zip(rows, cells, strict=True)
    ]
    return [top.rstrip(), head, "-" * len(head), *body]


def corpus_line(runs: dict[str, Run], labels: dict[str, Label]) -> str:
    outcomes = [run.outcome for run in runs.values()]
    calls = sum(run.calls for run in runs.values())
    resolved, unresolved = outcomes.count(RESOLVED), outcomes.count(UNRESOLVED)
    unknown = len(outcomes) - resolved - unresolved
    known = [label for run_id, label in labels.items() if run_id in runs]
    stuck = sum(label.stuck for label in known)
    return (
        f"{len(runs)} runs ({resolved} resolved, {unresolved} unresolved, {unknown} unknown), "
        f"{calls:,} tool calls; labels: {stuck} stuck, {len(known) - stuck} not stuck, "
        f"{len(runs) - len(known)} unlabelled"
    )


def stop_list(what: str, stops: list[Stop]) -> str:
    if len(stops) > LISTED:
        return f"    {what}: {len(stops)} runs (all in --json)"
    return f"    {what}: " + ", ".join(map(str, stops))


def details(rows: list[RowScore]) -> list[str]:
    """Per row: the rules that made first stops (runs; of them resolved, labelled stuck),
    then the resolved runs and the runs labelled not stuck that were stopped."""
    lines = ["first stops by rule (runs stopped; of them resolved / labelled stuck):"]
    for row in rows:
        counts = [
            f"{rule} {n} ({row.first_stops_resolved[rule]} / {row.first_stops_stuck[rule]})"
            for rule, n in row.first_stops.most_common()
        ]
        lines.append(f"  {row.name}: " + ("; ".join(counts) or "none"))
        if row.resolved_stops:
            lines.append(stop_list("resolved runs stopped", row.resolved_stops))
        if row.false_stops:
            lines.append(stop_list("labelled not stuck, stopped", row.false_stops))
    return lines


def notes(runs: dict[str, Run]) -> list[str]:
    with_usage = sum(run.has_usage for run in runs.values())
    return [
        "a stop is the first block or abort; its call is the first that would not have run "
        "(a stop after the last call counts, saving none); delay = that call - the label's "
        "from_call",
        "saved: calls from the stop on, in runs labelled stuck and in unresolved runs not "
        "labelled; tokens: the model's usage on the events "
        f"({with_usage} of {len(runs)} runs carry it), est. = characters of the calls' args "
        f"and results / {CHARS_PER_TOKEN}",
    ]


def report_lines(rows: list[RowScore], runs: dict[str, Run], labels: dict[str, Label]) -> list[str]:
    return [
        corpus_line(runs, labels),
        "",
        *table(rows),
        "",
        *notes(runs),
        "",
        *details(rows),
    ]


def report_dict(
    rows: list[RowScore], runs: dict[str, Run], labels: dict[str, Label], sources: list[str]
) -> dict[str, Any]:
    return {
        "corpus": sources,
        "summary": corpus_line(runs, labels),
        "token_estimate": f"characters of the calls' args and results / {CHARS_PER_TOKEN}",
        "rows": [row.to_dict() for row in rows],
    }
