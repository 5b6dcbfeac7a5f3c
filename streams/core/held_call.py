"""A blocked call the reference records only if its block is not enforced (issue 38).

OpenClaw's before_tool_call hook (``runBeforeToolCallHook``) runs the loop check and, on a
critical verdict, returns the block before ``recordToolCall``: a vetoed call never takes a
slot in the window. A call that runs anyway (``mode: "observe"``, a gateway that fails open
or ignores the block) has passed that point in the reference, so it is recorded at call time
like any call that runs, result or not. loopguard learns which from what follows: a gateway
that enforces a block publishes the loop veto as the call's result right after the call
(``GatewayRun.before_tool``, the TypeScript client's ``beforeTool``). So with
``deviations.vetoIsOutcome`` off (compat), a blocked call is held until the run's next
event and takes its slot then, in the place it had, unless that event is its veto.
"""

from __future__ import annotations

from typing import Any

from streams.core.events import AgentEvent, ToolResult
from streams.core.hashing import result_outcome


class HeldCall:
    """What the window needs of a blocked call (``RunHistory.append_call``'s arguments)."""

    __slots__ = ("tool_name", "sig", "tool_call_id", "known_poll", "action")

    def __init__(
        self,
        tool_name: str,
        sig: str,
        tool_call_id: str | None,
        known_poll: bool,
        action: str | None,
    ) -> None:
        self.tool_name = tool_name
        self.sig = sig
        self.tool_call_id = tool_call_id
        self.known_poll = known_poll
        self.action = action

    def vetoed_by(self, event: AgentEvent, rules: int) -> bool:
        """Whether ``event`` is this call's loop veto: a result of the same tool and call id
        whose outcome is the veto (``rules``: the config's hashing switches)."""
        if not isinstance(event, ToolResult) or event.tool_name != self.tool_name:
            return False
        if (event.tool_call_id or None) != (self.tool_call_id or None):
            return False
        outcome = result_outcome(self.tool_name, self.action, event.result_json, event.error, rules)
        return outcome.loop_veto

    def to_list(self) -> list[Any]:
        return [self.tool_name, self.sig, self.tool_call_id, self.known_poll, self.action]

    @classmethod
    def from_list(cls, row: list[Any]) -> HeldCall:
        tool_name, sig, tool_call_id, known_poll, action = row
        return cls(tool_name, sig, tool_call_id, known_poll, action)
