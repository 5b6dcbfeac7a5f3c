"""One call of a run's history window: its primary fields (persisted) and the streak fields
derived from the calls before it (streams.core.streaks), kept together for O(1) detector queries.
"""

from __future__ import annotations

from sys import intern
from typing import Any

from streams.core.hashing import CallInfo


class CallRecord:
    """One call of the window. A plain class with its own ``__init__`` rather than a
    dataclass: the same cost interpreted, and a native constructor in the mypyc build
    (setup.py), where a dataclass keeps its generated ``__init__`` in Python."""

    __slots__ = (
        *("index", "tool_name", "sig", "tool_call_id", "known_poll", "action"),
        *("result_hash", "unknown_tool", "pending", "call_args"),
        *("prev_same_sig", "no_progress_run", "unknown_run", "alt_run", "alt_break"),
        *("sig_count", "sig_results", "latest_result"),
    )

    def __init__(
        self,
        index: int,
        tool_name: str,
        sig: str,
        tool_call_id: str | None = None,
        known_poll: bool = False,
        action: str | None = None,
    ) -> None:
        self.index = index  # position in the run, contiguous within the window
        # Interned: every event decoded off the wire brings its own copy of the tool name (and
        # of the action); a window of 30 records would otherwise hold 30 copies of a few names.
        self.tool_name = intern(tool_name)
        self.sig = sig  # args hash: tool name + digest of canonical params
        self.tool_call_id = tool_call_id
        self.known_poll = known_poll
        # params["action"], needed to hash results that omit args
        self.action = intern(action) if type(action) is str else action
        self.result_hash: str | None = None
        self.unknown_tool: str | None = None
        self.pending = False  # waiting for its result
        # Transient, never persisted: the call's (args text, call_info) while it is pending,
        # so a result that echoes the same text skips hashing it again.
        self.call_args: tuple[str, CallInfo] | None = None
        # Derived, rebuilt on load:
        self.prev_same_sig: CallRecord | None = None
        self.no_progress_run = 0  # identical-outcome streak of this signature ending here
        self.unknown_run = 0  # same-unknown-tool failures ending here
        self.alt_run = 1  # length of the A/B alternation ending here
        self.alt_break = -1  # latest index that makes that alternation not a no-progress loop
        # Per signature, kept on its newest record in the window only (RunHistory.sig_last):
        # one dict per run instead of four with an entry per signature each.
        self.sig_count = 0  # records of the signature in the window
        self.sig_results = 0  # of those, the ones with a result
        self.latest_result: CallRecord | None = None  # the newest of those

    def __repr__(self) -> str:
        return f"CallRecord({', '.join(repr(value) for value in self.primary())})"

    def primary(self) -> list[Any]:
        return [
            self.index,
            self.tool_name,
            self.sig,
            self.tool_call_id,
            self.known_poll,
            self.action,
            self.result_hash,
            self.unknown_tool,
            self.pending,
        ]
