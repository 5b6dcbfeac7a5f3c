"""A run's bounded tool-call history, with the streaks every detector needs kept up to date
incrementally.

Each record carries the length of the patterns that end at it (identical-outcome streak of its
signature, unknown-tool streak, A/B alternation and where that alternation stops being stable),
derived from its predecessors when it is appended or gets its result. Asking for a streak is
then O(1) whatever ``historySize`` is; only a result that lands on an older call (parallel tool
calls) recomputes the records after it. Derived values are never persisted: :meth:`rebuild`
recomputes them from the primary fields, which is also how tests check the incremental path.
"""

from __future__ import annotations

from sys import intern
from typing import Any

from streams.core.hashing import CallInfo, Outcome


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


class PingPong:
    """An A/B alternation at the tail of the window (a slotted value, like hashing.Outcome)."""

    __slots__ = ("calls", "paired_tool_name", "paired_sig", "no_progress")

    def __init__(
        self,
        calls: int = 0,
        paired_tool_name: str = "",
        paired_sig: str = "",
        no_progress: bool = False,
    ) -> None:
        self.calls = calls  # length of the alternation, the expected next call included
        self.paired_tool_name = paired_tool_name
        self.paired_sig = paired_sig
        self.no_progress = no_progress

    def _values(self) -> tuple[int, str, str, bool]:
        return (self.calls, self.paired_tool_name, self.paired_sig, self.no_progress)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PingPong) and self._values() == other._values()

    def __repr__(self) -> str:
        return f"PingPong{self._values()!r}"


NO_PING_PONG = PingPong()


class RunHistory:
    """The last ``max_size`` calls of one run plus per-signature counters over that window."""

    __slots__ = ("max_size", "records", "next_index", "sig_last", "pending_by_sig", "pending_by_id")

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        # Oldest first. A list, not a deque: a deque allocates 64-slot blocks (760 bytes for a
        # window of 30), and trimming one record moves at most historySize pointers.
        self.records: list[CallRecord] = []
        self.next_index = 0
        # The newest record of each signature in the window, which carries the signature's
        # counters (CallRecord.sig_count, sig_results, latest_result).
        self.sig_last: dict[str, CallRecord] = {}
        self.pending_by_sig: dict[str, list[CallRecord]] = {}  # oldest first
        self.pending_by_id: dict[str, CallRecord] = {}

    # -- queries used by the detectors -------------------------------------------------

    def __len__(self) -> int:
        return len(self.records)

    def count(self, sig: str) -> int:
        """Calls with this signature in the window (generic-repeat warning count)."""
        head = self.sig_last.get(sig)
        return 0 if head is None else head.sig_count

    def latest_result(self, sig: str) -> CallRecord | None:
        """The newest call with this signature that has a result, if one is in the window."""
        head = self.sig_last.get(sig)
        return None if head is None else head.latest_result

    def no_progress_streak(self, sig: str) -> tuple[int, str | None]:
        """Newest-first run of identical outcomes of ``sig``, ignoring calls still pending."""
        head = self.sig_last.get(sig)
        if head is None:
            return 0, None
        latest = head.latest_result
        if latest is None:
            return 0, None
        run, results = latest.no_progress_run, head.sig_results
        return (run if run < results else results), latest.result_hash

    def unknown_tool_streak(self, tool_name: str) -> tuple[int, str | None]:
        """Trailing failures of ``tool_name`` that all name the same unavailable tool."""
        if not self.records:
            return 0, None
        newest = self.records[-1]
        if newest.tool_name != tool_name or newest.unknown_tool is None:
            return 0, None
        run, size = newest.unknown_run, len(self.records)
        return (run if run < size else size), newest.unknown_tool

    def ping_pong(self, current_sig: str) -> PingPong:
        """A/B alternation at the tail whose next expected call is ``current_sig``."""
        if len(self.records) < 2:
            return NO_PING_PONG
        newest = self.records[-1]
        tail, size = newest.alt_run, len(self.records)
        if size < tail:
            tail = size
        if tail < 2:
            return NO_PING_PONG
        other = self.records[-2]
        if current_sig != other.sig:
            return NO_PING_PONG
        start = newest.index - tail + 1
        return PingPong(
            calls=tail + 1,
            paired_tool_name=newest.tool_name,
            paired_sig=newest.sig,
            no_progress=newest.alt_break < start,
        )

    def latest_result_hash(self, sig: str) -> str | None:
        latest = self.latest_result(sig)
        return latest.result_hash if latest else None

    # -- updates ---------------------------------------------------------------------

    def append_call(
        self,
        tool_name: str,
        sig: str,
        tool_call_id: str | None,
        known_poll: bool,
        action: str | None,
    ) -> CallRecord:
        record = CallRecord(self.next_index, tool_name, sig, tool_call_id, known_poll, action)
        self._append(record)
        self._pend(record)
        return record

    def find_pending(self, tool_name: str, sig: str | None, tool_call_id: str | None):
        """The newest call still waiting for this result (by call id when given)."""
        if tool_call_id:
            record = self.pending_by_id.get(tool_call_id)
            if record and record.tool_name == tool_name and (sig is None or record.sig == sig):
                return record
            return None
        if sig is None:
            return None
        stack = self.pending_by_sig.get(sig)
        return stack[-1] if stack else None

    def find_call(self, tool_name: str, tool_call_id: str | None) -> CallRecord | None:
        """The newest call in the window with this id, answered or not (a linear scan, for
        the rare result that omits its args and whose call already has a result)."""
        if not tool_call_id:
            return None
        for record in reversed(self.records):
            if record.tool_call_id == tool_call_id and record.tool_name == tool_name:
                return record
        return None

    def attach_result(self, record: CallRecord, outcome: Outcome) -> None:
        """Give a pending call its outcome; a loop veto repeats the last outcome."""
        self._unpend(record)
        result_hash, unknown_tool = outcome.result_hash, outcome.unknown_tool
        if outcome.loop_veto:
            result_hash, unknown_tool = self._effective(record, outcome)
        record.result_hash, record.unknown_tool = result_hash, unknown_tool
        if result_hash is None:
            return
        head = self.sig_last[record.sig]
        head.sig_results += 1
        latest = head.latest_result
        if latest is None or latest.index < record.index:
            head.latest_result = record
        records = self.records
        if record is records[-1]:
            size = len(records)
            self._derive_record(
                record, records[-2] if size > 1 else None, records[-3] if size > 2 else None
            )
        else:  # an older call finished late: recompute what follows it
            self._rederive_from(record.index - self.records[0].index)

    def append_result(
        self,
        tool_name: str,
        sig: str,
        tool_call_id: str | None,
        known_poll: bool,
        action: str | None,
        outcome: Outcome,
    ) -> CallRecord:
        """A result whose call was never seen (or already trimmed) becomes its own record."""
        record = CallRecord(self.next_index, tool_name, sig, tool_call_id, known_poll, action)
        record.result_hash, record.unknown_tool = self._effective(record, outcome)
        self._append(record)
        if record.result_hash is not None:
            record.sig_results += 1  # the newest record of its signature: it holds the counters
            record.latest_result = record
            self._derive(len(self.records) - 1)
        return record

    def resize(self, max_size: int) -> None:
        self.max_size = max_size
        self._trim()

    # -- internals -------------------------------------------------------------------

    def _effective(self, record: CallRecord, outcome: Outcome) -> tuple[str | None, str | None]:
        """(result hash, unknown tool) to store; a loop veto repeats the last outcome.

        A block the gateway enforced is an outcome too, and no progress: it repeats the
        signature's last outcome (including the missing tool it named) so every streak keeps
        growing towards the breaker instead of resetting.
        """
        if not outcome.loop_veto:
            return outcome.result_hash, outcome.unknown_tool
        latest = self.latest_result(record.sig)
        if latest is None:  # first call of these args: repeat what the same tool last did
            latest = next(
                (
                    r
                    for r in reversed(self.records)
                    if r.tool_name == record.tool_name and r.result_hash is not None
                ),
                None,
            )
            if latest is None:
                return f"loop-veto:{record.sig}", None
            return f"loop-veto:{record.sig}", latest.unknown_tool
        return latest.result_hash, latest.unknown_tool

    def _append(self, record: CallRecord) -> None:
        self.next_index += 1
        sig = record.sig
        last = self.sig_last.get(sig)
        record.prev_same_sig = last
        if last is None:
            record.sig_count = 1
        else:  # the counters move to the new newest record
            record.sig_count = last.sig_count + 1
            record.sig_results = last.sig_results
            record.latest_result = last.latest_result
            last.latest_result = None  # only the newest holds one: nothing trimmed stays alive
        self.sig_last[sig] = record
        records = self.records
        records.append(record)
        size = len(records)
        self._derive_record(
            record, records[-2] if size > 1 else None, records[-3] if size > 2 else None
        )
        if size > self.max_size:
            self._trim()

    def _pend(self, record: CallRecord) -> None:
        record.pending = True
        stack = self.pending_by_sig.get(record.sig)
        if stack is None:
            self.pending_by_sig[record.sig] = [record]
        else:
            stack.append(record)
        if record.tool_call_id:
            self.pending_by_id[record.tool_call_id] = record

    def _unpend(self, record: CallRecord) -> None:
        if not record.pending:
            return
        record.pending = False
        record.call_args = None
        by_sig = self.pending_by_sig
        stack = by_sig[record.sig]
        if len(stack) == 1:  # the usual case: this call was the only one pending
            del by_sig[record.sig]
            if not by_sig:
                by_sig.clear()  # frees its table: a run with nothing pending keeps none
        else:
            if stack[-1] is record:
                stack.pop()
            else:
                stack.remove(record)
        call_id = record.tool_call_id
        by_id = self.pending_by_id
        if call_id and by_id.get(call_id) is record:
            del by_id[call_id]
            if not by_id:
                by_id.clear()

    def _trim(self) -> None:
        records = self.records
        excess = len(records) - self.max_size
        if excess <= 0:
            return
        trimmed = records[:excess]
        del records[:excess]
        for old in trimmed:
            head = self.sig_last[old.sig]
            head.sig_count -= 1
            if old.result_hash is not None:
                head.sig_results -= 1
                if head.latest_result is old:
                    head.latest_result = None
            if not head.sig_count:  # old was the signature's only record: it is the head
                del self.sig_last[old.sig]
                old.latest_result = None
            if old.pending:
                self._unpend(old)
            old.prev_same_sig = None  # cut the chain so trimmed records can be freed

    def _prev_with_result(self, record: CallRecord) -> CallRecord | None:
        first = self.records[0].index
        prev = record.prev_same_sig
        while prev is not None and prev.index >= first:
            if prev.result_hash is not None:
                return prev
            prev = prev.prev_same_sig
        return None

    def _derive(self, pos: int) -> None:
        """Compute the derived fields of ``records[pos]`` from the records before it."""
        records = self.records
        self._derive_record(
            records[pos],
            records[pos - 1] if pos > 0 else None,
            records[pos - 2] if pos > 1 else None,
        )

    def _derive_record(
        self, record: CallRecord, prev: CallRecord | None, before: CallRecord | None
    ) -> None:
        """Derived fields of ``record`` given the one (``prev``) and two before it."""
        has_result = record.result_hash is not None

        if has_result:
            earlier = self._prev_with_result(record)
            if earlier is not None and earlier.result_hash == record.result_hash:
                record.no_progress_run = earlier.no_progress_run + 1
            else:
                record.no_progress_run = 1
        else:
            record.no_progress_run = 0

        if record.unknown_tool is None:
            record.unknown_run = 0
        elif (
            prev is not None
            and prev.tool_name == record.tool_name
            and prev.unknown_tool == record.unknown_tool
        ):
            record.unknown_run = prev.unknown_run + 1
        else:
            record.unknown_run = 1

        if prev is None or prev.sig == record.sig:
            record.alt_run = 1
            record.alt_break = -1 if has_result else record.index
        elif before is not None and before.sig == record.sig:
            record.alt_run = prev.alt_run + 1
            brk = prev.alt_break
            if not has_result:
                brk = record.index
            elif before.result_hash != record.result_hash:
                brk = max(brk, before.index)
            record.alt_break = brk
        else:
            record.alt_run = 2
            brk = -1 if prev.result_hash is not None else prev.index
            record.alt_break = brk if has_result else record.index

    def _rederive_from(self, pos: int) -> None:
        for i in range(max(pos, 0), len(self.records)):
            self._derive(i)

    # -- persistence -----------------------------------------------------------------

    def to_list(self) -> list[list[Any]]:
        return [record.primary() for record in self.records]

    @classmethod
    def rebuild(cls, max_size: int, next_index: int, rows: list[list[Any]]) -> RunHistory:
        """Recreate a history (and every derived value) from :meth:`to_list` rows."""
        history = cls(max_size)
        for row in rows:
            index, tool_name, sig, call_id, known_poll, action, result_hash, unknown, pending = row
            record = CallRecord(index, tool_name, sig, call_id, known_poll, action)
            record.result_hash = result_hash
            record.unknown_tool = unknown
            history.next_index = index
            history._append(record)
            if pending:
                history._pend(record)
            elif result_hash is not None:
                record.sig_results += 1  # just appended: the newest record of its signature
                record.latest_result = record
        history.next_index = next_index
        return history
