"""The recent decisions inside a run's changelog state (:mod:`streams.state.state_format`).

A run keeps its latest decisions verbatim (a redelivered event gets the very same ones back),
so a looping run's state carries a few sentences of reason text each time it is written.

* Version 2 wrote them as MessagePack maps, zlib-compressed (still read).
* Version 3 writes each decision as a row of :data:`DECISION_FIELDS` (no key names), leaves
  out what the state already says (its run, agent and gateway ids; the seq it is kept under),
  and deflates the rows with a preset dictionary, :data:`REASON_DICTIONARY`: the detectors'
  sentences, so even the first decision of a run costs its numbers, not its words.

The dictionary is part of the format: bytes written with it can only be read with it, so it
never changes. A later wording of the core's reasons compresses a little worse, nothing more;
a new dictionary needs a new format version.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

# The state's own MessagePack calls (streams.state.state_format), so both parts of a state
# are packed and read with the same options.
Pack = Callable[[Any], bytes]
Unpack = Callable[[bytes], Any]

# Decision.to_dict keys written positionally, in this order. Append new ones at the end
# (an older row has fewer); never reorder. Keys not listed follow in a trailing map.
DECISION_FIELDS: tuple[str, ...] = (
    "run_id",
    "agent_id",
    "gateway_id",
    "seq",
    "event_time",
    "action",
    "detector",
    "severity",
    "count",
    "tool_name",
    "reason",
    "args_hash",
    "result_hash",
    "paired_tool_name",
    "error_code",
    "config_version",
    "extra",
)
KNOWN_FIELDS = frozenset(DECISION_FIELDS)
# Fields a row leaves out (nil) when they equal the state's own value.
IMPLIED = ("run_id", "agent_id", "gateway_id")

# Never change (see above). The detectors' sentences as worded when version 3 was written,
# then the words that fill a decision's other fields.
REASON_DICTIONARY = (
    b"WARNING: You have called  times with identical arguments. If this is not making "
    b"progress, stop retrying and report the task as failed."
    b"WARNING: You are alternating between repeated tool-call patterns ( consecutive calls). "
    b"This looks like a ping-pong loop; stop retrying and report the task as failed."
    b"CRITICAL: Called  with identical arguments and identical outcomes  times. Session "
    b"execution blocked to prevent runaway loops."
    b"CRITICAL: You are alternating between repeated tool-call patterns ( consecutive calls) "
    b"with no progress. This appears to be a stuck ping-pong loop. Session execution blocked "
    b"to prevent resource waste."
    b"WARNING: You have called  times with identical arguments and no progress. Stop polling "
    b"and either (1) increase wait time between checks, or (2) report the task as failed if "
    b"the process is stuck."
    b"CRITICAL: Called  with identical arguments and no progress  times. This appears to be "
    b"a stuck polling loop. Session execution blocked to prevent resource waste."
    b" Blocked  times; aborting the run."
    b"Run was aborted by loopguard; no further tool calls are allowed."
    b"CRITICAL: your last  tool calls all failed. Session execution blocked: stop calling "
    b"tools and report what is failing."
    b"WARNING: your last  tool calls all failed. Stop and reconsider the approach, or report "
    b"the task as failed."
    b"compaction_loop_persisted:  produced the same call and result  times after compaction; "
    b"aborting the run."
    b"compaction_storm:  compaction retries in a row with no progress"
    b"CRITICAL: attempted unavailable tool  times. Stop retrying that missing tool and answer "
    b"without it."
    b"CRITICAL:  has repeated identical no-progress outcomes  times. Session execution "
    b"stopped by global circuit breaker to prevent runaway loops."
    b"global_circuit_breakerloop_persisted_after_blockgeneric_repeatping_pongknown_poll_no_"
    b"progressconsecutive_errorsunknown_tool_repeatcompaction_stormblocksabortwarncritical"
    b"warningblockread_fileexecprocessweb_fetchgrep"
)


def unpack_recent_v2(value: bytes | None, unpack: Unpack) -> list[Any]:
    if value is None:
        return []
    return unpack(zlib.decompress(value))


def _row(decision: dict[str, Any], seq: Any, owner: dict[str, Any]) -> list[Any] | None:
    """A decision's row, or None if it lacks a listed field or holds a nil where the row
    would leave one out (it could not be told from an implied value)."""
    if not decision.keys() >= KNOWN_FIELDS:
        return None
    row = [decision[name] for name in DECISION_FIELDS]
    for at, name in enumerate(IMPLIED):
        if row[at] is None:
            return None
        if row[at] == owner[name]:
            row[at] = None
    if row[3] is None:
        return None
    if row[3] == seq:
        row[3] = None
    extra = {key: value for key, value in decision.items() if key not in KNOWN_FIELDS}
    row.append(extra or None)
    return row


def pack_recent(recent: list[Any], owner: dict[str, Any], pack: Pack) -> bytes | None | bool:
    """Version 3 bytes of a state's ``recent`` list (``owner`` is the state's to_dict form),
    None when there is none, False when a decision does not fit the rows (the state then
    goes out as JSON)."""
    if not recent:
        return None
    groups: list[Any] = []
    for seq, decisions in recent:
        rows = [_row(decision, seq, owner) for decision in decisions]
        if None in rows:
            return False
        groups.append([seq, rows])
    deflate = zlib.compressobj(6, zlib.DEFLATED, -15, zdict=REASON_DICTIONARY)
    return deflate.compress(pack(groups)) + deflate.flush()


def unpack_recent(value: bytes | None, owner: dict[str, Any], unpack: Unpack) -> list[Any]:
    """The ``recent`` list back from :func:`pack_recent`, given the state's other fields."""
    if value is None:
        return []
    inflate = zlib.decompressobj(-15, zdict=REASON_DICTIONARY)
    groups = unpack(inflate.decompress(value) + inflate.flush())
    recent = []
    for seq, rows in groups:
        decisions = []
        for row in rows:
            *values, extra = row
            decision = dict(zip(DECISION_FIELDS, values, strict=False))
            for name in IMPLIED:
                if decision.get(name, "") is None:
                    decision[name] = owner[name]
            if decision.get("seq", 0) is None:
                decision["seq"] = seq
            if extra:
                decision.update(extra)
            decisions.append(decision)
        recent.append([seq, decisions])
    return recent
