"""Query strings of the HTTP views, validated: bad input is a 400 with one line, not a 500."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlencode

from streams.audit.canary import CANARY_AGENT
from streams.audit.queries import ACTION_ORDER, Filters

RUNS_PARAMS = ("agent", "gateway", "detector", "severity", "since", "until", "limit")
STATUS_PARAMS = (
    "agent",
    "detector",
    "tool",
    "action",
    "window",
    "since",
    "until",
    "limit",
    "refresh",
    "testloops",
)
SEVERITIES = ("warning", "critical")
DEFAULT_LIMIT = 50  # as `loopguard runs`
MAX_LIMIT = 10_000
STATUS_LIMIT = 100
DEFAULT_REFRESH = 30
#: The latest time a ``since``/``until`` may name: 9999-12-31T23:59:59.999Z, the end of what
#: a datetime (and so the page's chart and timestamps) can show. Beyond it: 400, not a 500.
MAX_EPOCH_MS = 253_402_300_799_999
SHOWN_CHARS = 40  # of a bad value, in the one-line error
#: The status page's time filter: label, span in ms (None: everything in the trail).
WINDOWS: dict[str, int | None] = {
    "15m": 15 * 60_000,
    "1h": 3_600_000,
    "6h": 6 * 3_600_000,
    "24h": 24 * 3_600_000,
    "7d": 7 * 86_400_000,
    "30d": 30 * 86_400_000,
    "all": None,
}
DEFAULT_WINDOW = "24h"


class BadRequest(ValueError):
    pass


def summary_dict(summary: Any, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    """One ``RunSummary`` exactly as ``loopguard runs --json`` prints it, its usage included
    (``null`` when its gateway reports none, issue 28)."""
    return {**summary.to_dict(), "usage": usage}


def _shown(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}... ({len(text)} chars)"


def _int_param(query: Any, name: str, default: int | None, low: int, high: int) -> Any:
    text = query.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:  # also a number too long to read (Python's int digits limit)
        raise BadRequest(f"{name}: expected a whole number, got {_shown(text)!r}") from None
    if value < low or value > high:
        raise BadRequest(f"{name}: must be between {low} and {high}, got {_shown(str(value))}")
    return value


def _time_param(query: Any, name: str) -> int | None:
    """An epoch-ms bound (``since``/``until``): 0 up to :data:`MAX_EPOCH_MS`."""
    return _int_param(query, name, None, 0, MAX_EPOCH_MS)


def _check_known(query: Any, known: tuple[str, ...]) -> None:
    unknown = sorted(set(query) - set(known))
    if unknown:
        raise BadRequest(f"unknown query parameter {unknown[0]!r} (known: {', '.join(known)})")


def runs_filters(query: Any) -> dict[str, Any]:
    """``/runs`` query string → ``AuditStore.runs`` keyword arguments (400 on bad input)."""
    _check_known(query, RUNS_PARAMS)
    severity = query.get("severity") or None
    if severity is not None and severity not in SEVERITIES:
        raise BadRequest(f"severity: expected one of {', '.join(SEVERITIES)}, got {severity!r}")
    return {
        "agent": query.get("agent") or None,
        "gateway": query.get("gateway") or None,
        "detector": query.get("detector") or None,
        "severity": severity,
        "since_ms": _time_param(query, "since"),
        "until_ms": _time_param(query, "until"),
        "limit": _int_param(query, "limit", DEFAULT_LIMIT, 0, MAX_LIMIT),
    }


@dataclass(frozen=True)
class StatusQuery:
    """The status page's parameters, validated; ``params()`` rebuilds its query string."""

    agent: str | None = None
    detector: str | None = None
    tool: str | None = None
    action: str | None = None
    window: str = DEFAULT_WINDOW
    since: int | None = None  # epoch ms; with ``until``, overrides ``window``
    until: int | None = None
    limit: int = STATUS_LIMIT
    refresh: int = DEFAULT_REFRESH
    testloops: int = 0  # 1: also the test loops of CANARY_AGENT (hidden as `loopguard runs` does)

    @property
    def custom_range(self) -> bool:
        return self.since is not None or self.until is not None

    @property
    def hidden_agents(self) -> tuple[str, ...]:
        """Agents whose decisions the page leaves out: the test loops, unless asked for (by
        ``testloops=1`` or an agent filter that names their agent), as ``loopguard runs``."""
        return () if self.testloops or self.agent == CANARY_AGENT else (CANARY_AGENT,)

    def filters(self, now_ms: int) -> Filters:
        since, until = self.since, self.until
        if not self.custom_range:
            span = WINDOWS[self.window]
            since = None if span is None else now_ms - span
        return Filters(
            agent=self.agent,
            detector=self.detector,
            tool=self.tool,
            min_action=self.action,
            since_ms=since,
            until_ms=until,
            exclude_agents=self.hidden_agents,
        )

    def params(self, **changes: Any) -> dict[str, str]:
        """Non-default parameters (after ``changes``), for links that keep the other filters."""
        values = {**asdict(self), **changes}
        if values["since"] is not None or values["until"] is not None:
            values["window"] = DEFAULT_WINDOW
        defaults = asdict(StatusQuery())
        return {
            name: str(value)
            for name, value in values.items()
            if value is not None and value != defaults[name]
        }

    def href(self, path: str = "/status", **changes: Any) -> str:
        query = urlencode(self.params(**changes))
        return f"{path}?{query}" if query else path


def status_query(query: Any) -> StatusQuery:
    """``/status`` query string → :class:`StatusQuery` (400 on bad input; "" means any)."""
    _check_known(query, STATUS_PARAMS)
    action = query.get("action") or None
    if action is not None and action not in ACTION_ORDER:
        raise BadRequest(f"action: expected one of {', '.join(ACTION_ORDER)}, got {action!r}")
    window = query.get("window") or DEFAULT_WINDOW
    if window not in WINDOWS:
        raise BadRequest(f"window: expected one of {', '.join(WINDOWS)}, got {window!r}")
    since = _time_param(query, "since")
    until = _time_param(query, "until")
    if since is not None and until is not None and until <= since:
        raise BadRequest("until: must be after since")
    return StatusQuery(
        agent=query.get("agent") or None,
        detector=query.get("detector") or None,
        tool=query.get("tool") or None,
        action=action,
        window=window,
        since=since,
        until=until,
        limit=_int_param(query, "limit", STATUS_LIMIT, 1, 1000),
        refresh=_int_param(query, "refresh", DEFAULT_REFRESH, 0, 3600),
        testloops=_int_param(query, "testloops", 0, 0, 1),
    )
