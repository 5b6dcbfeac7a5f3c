"""Faust codec for the per-run state kept in the ``runs`` table.

The table holds live :class:`RunState` objects in memory; only the changelog sees bytes:
compact JSON of :meth:`RunState.to_dict`, from which a restarted worker rebuilds the state
(derived streaks included) exactly as it was. orjson writes and reads it (the state is
written once per run per batch, so this is on the hot path); the standard library takes
anything orjson refuses, and reads what either wrote.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from faust.serializers import codecs

from streams.core.run_state import RunState

CODEC_NAME = "loopguard_runstate"


class RunStateCodec(codecs.Codec):
    def _dumps(self, obj: Any) -> bytes:
        state = obj.to_dict()
        try:
            return orjson.dumps(state)
        except (TypeError, orjson.JSONEncodeError):
            text = json.dumps(state, separators=(",", ":"), ensure_ascii=False)
            return text.encode("utf-8", "surrogatepass")

    def _loads(self, s: bytes) -> Any:
        try:
            state = orjson.loads(s)
        except orjson.JSONDecodeError:
            state = json.loads(s)
        return RunState.from_dict(state)


def register() -> None:
    codecs.register(CODEC_NAME, RunStateCodec())
