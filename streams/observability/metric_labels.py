"""Label values of the worker's metrics: bounded, so a misbehaving fleet cannot create
unbounded series, and short kinds for dead letters.

``agent``, ``tool`` and ``gateway`` come from the events, so each keeps at most
``max_label_values`` distinct values (first come, first kept); the rest are counted under
``"_other"``. That bounds the series a misbehaving fleet can create.
"""

from __future__ import annotations

import re
import threading
from typing import Any

OTHER = "_other"
DEFAULT_MAX_LABEL_VALUES = 500
UNKNOWN = "unknown"


def dead_letter_kind(error: str | BaseException) -> str:
    """A short, bounded label for why a message was parked.

    A codec exception gives its class in snake case without ``Error``
    (``PayloadTooLargeError`` → ``payload_too_large``); a plain string is the processor's
    refusal of a decoded event (``invalid_event``), unless it already is a short label.
    """
    if isinstance(error, BaseException):
        name = type(error).__name__.removesuffix("Error") or type(error).__name__
        return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
    if re.fullmatch(r"[a-z][a-z0-9_]{0,39}", error):
        return error
    return "invalid_event"


class BoundedLabels:
    """Keeps at most ``limit`` distinct label values; later newcomers map to ``_other``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, value: Any) -> str:
        text = str(value) if value not in (None, "") else UNKNOWN
        if text in self._seen:
            return text
        with self._lock:
            if len(self._seen) < self.limit:
                self._seen.add(text)
                return text
        return OTHER
