"""Poison records of issue 40, shared by the unit and integration tests: bytes a hostile
gateway (or anyone who can write one record) puts on a topic, each of which used to end a
worker or a reader."""

from __future__ import annotations

import json

from streams.core.events import Action, Decision
from streams.wire.avro import encode_decision
from streams.wire.single_object import DEFAULT_MAX_MESSAGE_SIZE, own_codecs

DEEP = 50_000  # [[[...]]] 50,000 deep: 100 KB (RecursionError in json.loads)
DEEP_JSON = "[" * DEEP + "]" * DEEP


def decision(run_id: str = "poisoned", seq: int = 1, **changes: object) -> Decision:
    values: dict = {
        "run_id": run_id, "agent_id": "a", "gateway_id": "g", "seq": seq, "event_time": 1,
        "action": Action.WARN, "detector": "generic_repeat", "severity": "warning",
        "count": 3, "tool_name": "exec", "reason": "a poisoned decision",
    }  # fmt: skip
    values.update(changes)
    return Decision(**values)


def deep_extra_decision(run_id: str = "poisoned", seq: int = 1) -> bytes:
    """A Decision whose ``extra`` holds JSON nested DEEP levels (the encoder would refuse
    to write it: the datum is written as a hostile producer would)."""
    codec = own_codecs()["Decision"]
    datum = codec.decode(
        encode_decision(decision(run_id, seq, extra={"k": 1})), None, DEFAULT_MAX_MESSAGE_SIZE
    )
    datum["extra"] = {"k": DEEP_JSON}
    return codec.encode(datum, DEFAULT_MAX_MESSAGE_SIZE)


def deep_signal() -> bytes:
    """An incident signal (JSON) nested DEEP levels."""
    return ('{"tool":' + DEEP_JSON + "}").encode()


RECURSIVE_SCHEMA = json.dumps(
    {"type": "record", "name": "Nest", "fields": [{"name": "n", "type": ["null", "Nest"]}]}
)
EMPTY_ITEMS_SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Hollow",
        "fields": [{"name": "items", "type": {"type": "array", "items": "null"}}],
    }
)
