"""A run's bounded tool-call history, with the streaks every detector needs kept up to date
incrementally.

Each record (streams.core.call_record) carries the length of the patterns that end at it
(identical-outcome streak of its signature, unknown-tool streak, A/B alternation and where that
alternation stops being stable), derived from its predecessors (streams.core.streaks) when it is
appended or gets its result. Asking for a streak is then O(1) whatever ``historySize`` is; only a
result that lands on an older call (parallel tool calls) recomputes the records after it. Derived
values are never persisted: :meth:`RunHistory.rebuild` recomputes them from the primary fields,
which is also how tests check the incremental path.
"""

from __future__ import annotations

from typing import Any

from streams.core.call_record import CallRecord
from streams.core.hashing import Outcome
from streams.core.ping_pong import NO_PING_PONG, PingPong
from streams.core.streaks import derive_streaks


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

    @property
    def window_start(self) -> int:
        """The index of the oldest call still in the window (the next index while it is
        empty): a record keeps its links to calls trimmed since, but no streak starts there."""
        records = self.records
        return records[0].index if records else self.next_index

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

    def changes_since(self, index: int, tools: frozenset[str]) -> int:
        """Successful calls of ``tools`` after the call at ``index`` in the window (the edits
        between two outcomes, for a decision's reason; asked only when a streak begins)."""
        changes = 0
        for record in reversed(self.records):
            if record.index <= index:
                break
            result = record.result_hash
            if record.tool_name in tools and result is not None and not result.startswith("error:"):
                changes += 1
        return changes

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

    def newest_pending(self, tool_name: str) -> CallRecord | None:
        """The newest call of ``tool_name`` still waiting for its result (a scan of the window,
        for the rare result that names neither its args nor its call id)."""
        for record in reversed(self.records):
            if record.pending and record.tool_name == tool_name:
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
            derive_streaks(
                record,
                records[-2] if size > 1 else None,
                records[-3] if size > 2 else None,
                self.window_start,
            )
        else:  # an older call finished late: recompute what follows it
            self._rederive_from(record.index - self.window_start)

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
        derive_streaks(
            record,
            records[-2] if size > 1 else None,
            records[-3] if size > 2 else None,
            self.window_start,
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

    def _derive(self, pos: int) -> None:
        """Compute the derived fields of ``records[pos]`` from the records before it."""
        records = self.records
        derive_streaks(
            records[pos],
            records[pos - 1] if pos > 0 else None,
            records[pos - 2] if pos > 1 else None,
            self.window_start,
        )

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
