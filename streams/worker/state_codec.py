"""Faust codec for the per-run state kept in the ``runs`` table.

The table holds live :class:`RunState` objects in memory; only the changelog sees bytes, in
the compact binary form of :mod:`streams.state.state_format` (the state is written once per
run per batch, so its size is the changelog's volume and its encoding is on the hot path).
Reading takes that form and the JSON one earlier versions wrote, so a changelog written
before the change still recovers.
"""

from __future__ import annotations

from typing import Any

from faust.serializers import codecs

from streams.state import state_format

CODEC_NAME = "loopguard_runstate"


class RunStateCodec(codecs.Codec):
    def _dumps(self, obj: Any) -> bytes:
        return state_format.encode(obj)

    def _loads(self, s: bytes) -> Any:
        state = state_format.decode(s)
        state.written = s  # a read state's rollback point: what it was read from
        return state


def register() -> None:
    codecs.register(CODEC_NAME, RunStateCodec())
