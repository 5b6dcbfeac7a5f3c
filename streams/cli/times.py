"""Human times for ``--since``/``--until``: one parser for every command that takes a time.

Operators type what they read in logs and dashboards: a duration back from now (``30m``,
``1h``, ``2d``), an ISO date or date-time (``2026-12-04``, ``2026-12-04T10:00``,
``2026-12-04 10:00:00+01:00``; no zone means UTC, as the audit trail stores epoch ms in UTC),
or epoch milliseconds as the trail and the events hold them. Everything becomes epoch ms.
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime

TIME_HELP = (
    "a duration back from now (30s, 15m, 1h, 2d, 1w), an ISO date or date-time "
    "(2026-12-04, 2026-12-04T10:00; UTC unless it names a zone) or epoch milliseconds"
)
_UNIT_MS = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")


def parse_time(text: str, now_ms: int | None = None) -> int:
    """``text`` as epoch milliseconds; ValueError with what was expected otherwise."""
    value = text.strip()
    now = int(time.time() * 1000) if now_ms is None else now_ms
    duration = _DURATION.match(value.lower())
    if duration:
        return now - int(float(duration.group(1)) * _UNIT_MS[duration.group(2)])
    if value.isdigit():  # epoch ms, as the trail and the events hold times
        return int(value)
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is not a time: expected {TIME_HELP}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


def time_arg(now_ms: Callable[[], int] | None = None) -> Callable[[str], int]:
    """An argparse ``type`` for a time flag: refuses a bad time with argparse's usage error."""

    def parse(text: str) -> int:
        try:
            return parse_time(text, now_ms() if now_ms is not None else None)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def add_time_range_args(parser: argparse.ArgumentParser, what: str) -> None:
    """``--since`` (inclusive) and ``--until`` (exclusive) over ``what``'s time."""
    parser.add_argument(
        "--since",
        type=time_arg(),
        metavar="TIME",
        help=f"only {what} at or after TIME: {TIME_HELP}",
    )
    parser.add_argument(
        "--until",
        type=time_arg(),
        metavar="TIME",
        help=f"only {what} before TIME (same forms as --since)",
    )


def format_ms(epoch_ms: int | None) -> str:
    """Epoch ms as a UTC date-time a person reads (``2026-12-04 10:00:03Z``), ``-`` for None."""
    if epoch_ms is None:
        return "-"
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%SZ")
