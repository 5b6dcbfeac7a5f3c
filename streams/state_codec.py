"""Faust codec for the per-run state kept in the ``runs`` table.

The table holds live :class:`RunState` objects in memory; only the changelog sees bytes:
canonical JSON of :meth:`RunState.to_dict`, from which a restarted worker rebuilds the state
(derived streaks included) exactly as it was.
"""

from __future__ import annotations

import json
from typing import Any

from faust.serializers import codecs

from streams.run_state import RunState

CODEC_NAME = "loopguard_runstate"


class RunStateCodec(codecs.Codec):
    def _dumps(self, obj: Any) -> bytes:
        text = json.dumps(obj.to_dict(), separators=(",", ":"), ensure_ascii=False)
        return text.encode("utf-8", "surrogatepass")

    def _loads(self, s: bytes) -> Any:
        return RunState.from_dict(json.loads(s))


def register() -> None:
    codecs.register(CODEC_NAME, RunStateCodec())
