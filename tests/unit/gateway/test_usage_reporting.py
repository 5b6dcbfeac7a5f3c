"""The Python gateway client sends a model turn's usage with the run's next tool call or its
end (issue 28), summed when several turns were reported in between."""

from __future__ import annotations

from typing import Any

from streams.core.events import AgentEvent, RunEnded, ToolCall, ToolResult
from streams.gateway.client import GatewayRun


class Allowing:
    """The slice of GatewayClient a GatewayRun uses: it allows every call and keeps events."""

    gateway_id = "gw-py"

    def __init__(self) -> None:
        self.published: list[AgentEvent] = []

    def publish(self, event: AgentEvent) -> None:
        self.published.append(event)

    def flush(self) -> None:
        pass

    def take_verdict(self, *args: Any) -> Any:
        class Allowed:
            allowed = True

        return Allowed()


def usage_of(event: AgentEvent) -> tuple[Any, Any, Any]:
    return (
        getattr(event, "input_tokens", "-"),
        getattr(event, "output_tokens", "-"),
        getattr(event, "cost_usd", "-"),
    )


def test_reported_turns_go_out_with_the_next_call_then_the_end() -> None:
    client = Allowing()
    run = GatewayRun(client, "run-1", "agent-1")  # type: ignore[arg-type]
    run.report_usage(1_000, 20, 0.01)
    run.report_usage(-5, 3, float("nan"))  # bad values count nothing
    run.before_tool("exec", {"cmd": "ls"}, "c1")
    run.after_tool("exec", {"cmd": "ls"}, result="x", tool_call_id="c1")
    run.before_tool("exec", {"cmd": "ls"}, "c2", input_tokens=7)
    run.before_tool("exec", {"cmd": "pwd"}, "c3")  # a parallel call of the same turn
    run.end(input_tokens=3, output_tokens=4, cost_usd=0.5)
    kinds = [type(e) for e in client.published]
    assert kinds == [ToolCall, ToolResult, ToolCall, ToolCall, RunEnded]
    assert [usage_of(e) for e in client.published] == [
        (1_000, 23, 0.01),
        ("-", "-", "-"),
        (7, 0, None),
        (None, None, None),
        (3, 4, 0.5),
    ]
