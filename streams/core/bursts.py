"""Bursts (loopguard extension, issue 44): the parallel calls of one assistant turn judged as
a set.

One model message can ask for a hundred calls at once (openclaw sessions show 127 ``web_fetch``
calls cycling over three URLs, A, B, C, A, B, C…, cut off by the output limit). Identical calls
then never come more than two in a row, a window of 30 holds ten of each, and their results
only arrive after the calls, so no streak of the other rules grows inside the burst. Gateways
that know the turn put its id on each call (``ToolCall.turn_id``); this rule counts, per turn,
how often each call was already made in it:

- the turn's **repeats** are its earlier calls that repeated a call made before them in the
  same turn; a call that repeats one of its turn is warned from ``burstRepeat.warningThreshold``
  repeats and blocked from ``criticalThreshold``,
- but only while the repeats are the same few calls made many times: at least
  ``repeatsPerCall`` repeats for each call that was repeated. A turn reading 20 different files
  repeats nothing; one that read ten files twice each (repeats 10, ten calls repeated) is a
  glitch, not a loop.

Results, when they are known by the time of the next call (a gateway running the turn's calls
one after the other), count too: a call whose results in the turn differ (a tool that answers
anew each time, an image generator) is not repeating itself, so its repeats are forgiven; a
decision says when the repeats' results were identical. Counts follow the detectors'
convention: earlier calls only, the current one never included. Calls without a turn id leave
all this alone (today's verdicts).
"""

from __future__ import annotations

from typing import Any

from streams.core.config import LoopDetectionConfig
from streams.core.detectors import CRITICAL, WARNING, CurrentCall, Detection
from streams.core.progress import describe_call

# Distinct calls remembered per turn; later new ones only count as calls (never repeated).
MAX_TURN_CALLS = 256
# A key keeps the tool and 16 hex digits of the args digest (a signature is "<tool>:<64 hex>"):
# the turn's memory is written with the run's state on every event, and 64 bits tell a turn's
# few hundred calls apart.
DIGEST_KEPT = 48


def turn_key(sig: str) -> str:
    return sig[:-DIGEST_KEPT] if len(sig) > DIGEST_KEPT else sig


class TurnCall:
    """One distinct call of the turn: how often it was made, and its results so far."""

    __slots__ = ("count", "result", "answered", "varied")

    def __init__(
        self, count: int = 1, result: str = "", answered: int = 0, varied: bool = False
    ) -> None:
        self.count = count
        self.result = result  # the last 16 hex digits of its first result's hash
        self.answered = answered  # results seen (loop vetoes and empty answers not counted)
        self.varied = varied  # a result differed from the first: its repeats are forgiven

    def to_list(self) -> list[Any]:
        return [self.count, self.result, self.answered, self.varied]


class TurnCalls:
    """The current turn of a run: its id and its distinct calls (a new turn id replaces it)."""

    __slots__ = ("turn_id", "calls", "repeats", "repeated")

    def __init__(self) -> None:
        self.turn_id: str | None = None
        self.calls: dict[str, TurnCall] = {}
        self.repeats = 0  # repeats of calls whose results never differed
        self.repeated = 0  # of those calls, the ones made at least twice

    def judge(
        self,
        hit: Detection | None,
        turn_id: str,
        call: CurrentCall,
        args_json: str | None,
        cfg: LoopDetectionConfig,
    ) -> Detection | None:
        """The earlier rules' finding ``hit`` with this rule after them (a critical of theirs
        wins over a warning, never over a critical); the call then counts in its turn."""
        if cfg.enabled is not True or not cfg.detectors.burst_repeat:
            return hit
        if turn_id != self.turn_id:
            self.turn_id = turn_id
            self.calls = {}
            self.repeats = self.repeated = 0
        key = turn_key(call.sig)
        earlier = self.calls.get(key)
        found = None
        if earlier is not None and (hit is None or hit.level != CRITICAL):
            found = self._burst(earlier, call, args_json, cfg)
        self._count(key, earlier)
        if found is None or (hit is not None and found.level != CRITICAL):
            return hit
        return found

    def _burst(
        self, earlier: TurnCall, call: CurrentCall, args_json: str | None, cfg: LoopDetectionConfig
    ) -> Detection | None:
        repeats, repeated = self.repeats, self.repeated
        if earlier.varied or repeats < cfg.burst_repeat_warning:
            return None
        if repeats < cfg.burst_repeats_per_call * repeated:
            return None  # many calls, each repeated once or twice: no loop
        what = describe_call(call.tool_name, args_json)
        calls = f"the same {repeated} call{'s' if repeated != 1 else ''}"
        made = f"{what} made {earlier.count} time{'s' if earlier.count != 1 else ''} already"
        same = ", with identical results" if earlier.answered >= 2 else ""
        if repeats >= cfg.burst_repeat_critical:
            return Detection(
                CRITICAL,
                "burst_repeat",
                repeats,
                f"CRITICAL: one assistant turn repeated {calls} {repeats} times ({made}"
                f"{same}). Session execution blocked: stop repeating these calls and answer "
                "with what their first results said.",
            )
        return Detection(
            WARNING,
            "burst_repeat",
            repeats,
            f"WARNING: one assistant turn has repeated {calls} {repeats} times ({made}"
            f"{same}). Identical calls give nothing new: make each call once.",
        )

    def _count(self, key: str, earlier: TurnCall | None) -> None:
        if earlier is None:
            if len(self.calls) < MAX_TURN_CALLS:
                self.calls[key] = TurnCall()
            return
        earlier.count += 1
        if not earlier.varied:
            self.repeats += 1
            if earlier.count == 2:
                self.repeated += 1

    def answer(self, sig: str, result_hash: str) -> None:
        """A result of a call of the turn (a loop veto or an empty answer is none): a result
        unlike the call's first one forgives its repeats."""
        if self.turn_id is None:
            return
        entry = self.calls.get(turn_key(sig))
        if entry is None:
            return
        digest = result_hash[-16:]
        entry.answered += 1
        if entry.answered == 1:
            entry.result = digest
        elif digest != entry.result and not entry.varied:
            entry.varied = True
            self.repeats -= entry.count - 1
            if entry.count >= 2:
                self.repeated -= 1

    # -- persistence (only while a turn is known: runs without turn ids store nothing) ----

    def to_list(self) -> list[Any]:
        return [self.turn_id, [[key, *entry.to_list()] for key, entry in self.calls.items()]]

    @classmethod
    def from_list(cls, data: list[Any]) -> TurnCalls:
        turn = cls()
        turn.turn_id = data[0]
        for key, count, result, answered, varied in data[1]:
            entry = TurnCall(int(count), str(result), int(answered), bool(varied))
            turn.calls[key] = entry
            if not entry.varied and entry.count >= 2:
                turn.repeats += entry.count - 1
                turn.repeated += 1
        return turn
