"""The bytes of a run's state on the changelog: a compact, versioned binary form of
:meth:`RunState.to_dict`, and the JSON form earlier versions wrote.

Every event a run takes writes its whole state to the changelog (coalesced per run per batch),
so the state's size is the changelog's volume. The JSON form spelt every digest as hex text
(``"read_file:<64 hex>"`` for a signature, 64 hex for a result) and every record as a JSON
array: about 180 bytes a call. Version 2 keeps the same values and nothing else:

* ``b"\\xc1\\x02"`` then one MessagePack array. 0xC1 is the one byte MessagePack never uses
  and no JSON text starts with, so the first byte tells the forms apart;
* digests as 32 raw bytes: a record's signature (always ``<its tool>:<64 hex>``) as the
  digest alone, a result hash (``<64 hex>`` or ``error:<64 hex>``) as the digest and two
  flag bits; anything else (a loop-veto outcome, a value from an older or odder writer)
  stays text, so decoding gives back the exact string;
* a record's position implied (positions in the window are contiguous, ending at
  ``next_index - 1``), tool names once per state with a byte per record pointing at them,
  the two flags and which optional fields follow in one byte per record;
* the recent decisions (redelivery needs them verbatim, reasons and all) as rows deflated
  with a dictionary of the detectors' sentences (:mod:`streams.state.recent_format`);
* the compaction guard as nil while it is idle (no compaction seen), which most runs are.

Version 3 (this one) differs from version 2 in those last two points and in ``error_streak``
being a scalar; version 2 bytes, already on changelogs, still load. A run that reported
token usage (issue 28) appends its ``usage`` to the scalars: states without it are byte for
byte what they were, and a worker from before it reads one with it (it stops at the scalars it
knows and the run's usage starts again from nothing there).

Decoding rebuilds the :meth:`RunState.to_dict` form and hands it to
:meth:`RunState.from_dict`, so derived values are recomputed exactly as after a JSON load.
Fields are listed in one place, :data:`SCALARS` below; a key of ``to_dict`` this module does
not know (a field added to the core later) is carried by name in a trailing map, so a new
field survives the changelog before anyone lists it here. A state the binary form cannot hold
(an unexpected value type) is written as JSON, which the decoder still reads.
"""

from __future__ import annotations

import array
import copy
import json
import logging
import sys
import zlib
from typing import Any, ClassVar

import msgpack
import orjson

from streams.core.run_state import RunState
from streams.state import recent_format

log = logging.getLogger("loopguard.state")

MAGIC = 0xC1  # never used by MessagePack, never the first byte of JSON text
VERSION = 3
HEADER = bytes((MAGIC, VERSION))
READABLE = (2, VERSION)  # 2: recent decisions as zlib'd maps, the guard always a map

# to_dict keys written positionally, in this order. Append new ones at the end (a reader of
# an older payload gets fewer and falls back on from_dict's defaults); never reorder.
SCALARS: tuple[str, ...] = (
    "run_id",
    "agent_id",
    "gateway_id",
    "last_seq",
    "status",
    "blocks",
    "last_event_time",
    "last_seq_time",
    "history_size",
    "next_index",
    "stats",
    "guard",
    "waiting",
    "error_streak",
    "usage",  # optional (issue 28): only runs that reported usage have it; always last
)
# Trailing SCALARS a state may lack: written only when present, so a state without them
# (most runs, and every state written before them) reads as before.
OPTIONAL_TAIL = ("usage",)
_REQUIRED = SCALARS[: len(SCALARS) - len(OPTIONAL_TAIL)]
# to_dict keys with a form of their own below.
STRUCTURED = ("history", "recent")
KNOWN = frozenset(SCALARS) | frozenset(STRUCTURED)

_packer_options: dict[str, Any] = {"use_bin_type": True, "unicode_errors": "surrogatepass"}
# One packer for the process (building one per call costs more than packing a state); the
# worker encodes on its event loop's thread only, and pack() leaves it reset for the next.
_packer = msgpack.Packer(**_packer_options)
_unpacker_options: dict[str, Any] = {
    "raw": False,
    "unicode_errors": "surrogatepass",
    "strict_map_key": False,
    "use_list": True,
}


def _pack(value: Any) -> bytes:
    try:
        return _packer.pack(value)
    except BaseException:
        _packer.reset()  # a failed pack leaves partial output in the buffer
        raise


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, **_unpacker_options)


class StateFormatError(ValueError):
    """Bytes that are neither form of a run's state."""


# -- history -------------------------------------------------------------------------------
#
# A history is written as columns, each built by one pass in C where it can be (map, join,
# bytes.fromhex over the whole window): a per-record loop in Python would cost more than all
# the rest of the encoding. Signature and result digests go into one blob, each distinct
# digest once: a looping run repeats a few calls and results, so it then writes a small
# table of digests and a column of references to them. A column whose values are all absent
# (no actions, no missing tools, nothing pending) is written as nil.

# CallRecord.primary(): index, tool_name, sig, tool_call_id, known_poll, action,
# result_hash, unknown_tool, pending. Rows of another length (a field added to the core)
# send the state out as JSON until this module learns them.
RECORD_FIELDS = 9
ERROR_PREFIX = "error:"
# What a result hash is, one byte per record.
NO_RESULT, DIGEST, ERROR_DIGEST, TEXT = 0, 1, 2, 3
_LITTLE = sys.byteorder == "little"


def _result_kind(value: str | None) -> int:
    if value is None:
        return NO_RESULT
    if len(value) == 64:
        return DIGEST
    if len(value) == 70 and value.startswith(ERROR_PREFIX):
        return ERROR_DIGEST
    return TEXT


def _hex_blob(parts: list[str]) -> bytes | None:
    """The bytes that 64-character lowercase hex parts spell, or None if any is not one."""
    spelled = "".join(parts)
    if len(spelled) != 64 * len(parts):
        return None
    try:
        blob = bytes.fromhex(spelled)
    except ValueError:
        return None
    # fromhex also takes upper case and spaces: only text that is exactly its bytes' hex is
    # stored as bytes, so decoding gives back the very same string.
    return blob if blob.hex() == spelled else None


def _width(count: int) -> str:
    """The array type of references into a table of ``count`` entries."""
    return "B" if count <= 0x100 else "H" if count <= 0x10000 else "I"


def pack_refs(refs: Any, count: int) -> bytes:
    """References into a table of ``count`` entries, as little-endian integers just wide
    enough (one byte each for the usual window)."""
    column = array.array(_width(count), refs)
    if not _LITTLE:
        column.byteswap()
    return column.tobytes()


def unpack_refs(data: bytes, count: int) -> array.array[int]:
    column = array.array(_width(count))
    if len(data) % column.itemsize:
        raise StateFormatError("a reference column cut short")
    column.frombytes(data)
    if not _LITTLE:
        column.byteswap()
    return column


def _flags(values: tuple[Any, ...]) -> bytes | None:
    """A column of booleans: nil when all are False, else one byte each."""
    if True not in values:
        return None
    return bytes(values)


def _optional(values: tuple[Any, ...]) -> list[Any] | None:
    """A column of optional values: nil when all are absent."""
    return None if values.count(None) == len(values) else list(values)


def pack_history(rows: list[list[Any]], next_index: int) -> list[Any] | None:
    """The columns of :meth:`RunHistory.to_list` rows, or None when the rows are not of the
    shape this version holds exactly (the state then goes out as JSON)."""
    size = len(rows)
    if not size:
        return []
    if any(len(row) != RECORD_FIELDS for row in rows):
        return None
    indexes, names, sigs, call_ids, polls, actions, results, unknowns, pendings = zip(
        *rows, strict=True
    )
    if indexes != tuple(range(next_index - size, next_index)):
        return None  # positions are implied: contiguous, ending at next_index - 1
    if not {type(v) for v in polls + pendings} <= {bool}:
        return None
    tools = list(dict.fromkeys(names))
    if not all(type(name) is str for name in tools):
        return None
    prefixes = [f"{name}:" for name in names]
    if not all(map(str.startswith, sigs, prefixes)):  # type: ignore[arg-type]
        return None
    parts = list(map(str.removeprefix, sigs, prefixes))  # type: ignore[arg-type]
    kinds = bytes(map(_result_kind, results))
    parts += [
        value if kind == DIGEST else value[6:]
        for value, kind in zip(results, kinds, strict=True)
        if kind in (DIGEST, ERROR_DIGEST)
    ]
    table = {part: i for i, part in enumerate(dict.fromkeys(parts))}
    blob = _hex_blob(list(table))
    if blob is None:
        return None
    refs = None  # every digest different: the blob is the column itself
    if len(table) < len(parts):
        refs = pack_refs(map(table.__getitem__, parts), len(table))
    tool_ids = {name: i for i, name in enumerate(tools)}
    return [
        tools,
        pack_refs(map(tool_ids.__getitem__, names), len(tools)),
        blob,
        refs,
        kinds,
        [value for value, kind in zip(results, kinds, strict=True) if kind == TEXT],
        _optional(call_ids),
        _optional(actions),
        _optional(unknowns),
        _flags(polls),
        _flags(pendings),
    ]


def unpack_history(packed: list[Any], next_index: int) -> list[list[Any]]:
    """The :meth:`RunHistory.to_list` rows back from :func:`pack_history`."""
    if not packed:
        return []
    tools, tool_refs, blob, refs, kinds, texts, call_ids, actions, unknowns, polls, pendings = (
        packed
    )
    size = len(kinds)
    if len(blob) % 32:
        raise StateFormatError("a digest cut short")
    table = [blob[at : at + 32].hex() for at in range(0, len(blob), 32)]
    digests = table if refs is None else [table[i] for i in unpack_refs(refs, len(table))]
    names = [tools[i] for i in unpack_refs(tool_refs, len(tools))]
    if len(names) != size:
        raise StateFormatError("history columns of different lengths")
    sigs = [f"{name}:{digest}" for name, digest in zip(names, digests, strict=False)]
    results: list[str | None] = []
    digest_at, text_at = size, 0
    for kind in kinds:
        if kind == NO_RESULT:
            results.append(None)
        elif kind == TEXT:
            results.append(texts[text_at])
            text_at += 1
        else:
            digest = digests[digest_at]
            digest_at += 1
            results.append(digest if kind == DIGEST else ERROR_PREFIX + digest)
    if digest_at != len(digests) or text_at != len(texts):
        raise StateFormatError("history values left over")
    absent = [None] * size
    columns = zip(
        range(next_index - size, next_index),
        names,
        sigs,
        call_ids or absent,
        [bool(v) for v in polls] if polls else [False] * size,
        actions or absent,
        results,
        unknowns or absent,
        [bool(v) for v in pendings] if pendings else [False] * size,
        strict=True,
    )
    return [list(row) for row in columns]


# -- the state -----------------------------------------------------------------------------


# A compaction guard that has seen no compaction (PostCompactionGuard.to_dict), written as nil.
IDLE_GUARD: dict[str, Any] = {"remaining": 0, "window": 0, "counts": {}}
GUARD_AT = SCALARS.index("guard")


def encode_dict(data: dict[str, Any]) -> bytes | None:
    """Version 3 bytes of a :meth:`RunState.to_dict` form, or None if it cannot hold it."""
    recent = packed_recent(data)
    if isinstance(recent, bool):  # False: the rows cannot hold them
        return None
    return encode_with_recent(data, recent)


def packed_recent(data: dict[str, Any]) -> bytes | None | bool:
    """The recent decisions of a :meth:`RunState.to_dict` form as version 3 writes them
    (:func:`recent_format.pack_recent`): None for none, False when the rows cannot hold them."""
    return recent_format.pack_recent(data.get("recent") or [], data, _pack)


def encode_with_recent(data: dict[str, Any], recent: bytes | None) -> bytes | None:
    """Version 3 bytes of a :meth:`RunState.to_dict` form whose recent decisions are already
    packed (:func:`packed_recent`; ``data["recent"]`` is not read), or None if it cannot hold
    it."""
    history = pack_history(data["history"], data["next_index"])
    if history is None:
        return None
    scalars = [data[key] for key in _REQUIRED]
    for key in OPTIONAL_TAIL:
        if key not in data:
            break
        scalars.append(data[key])
    if scalars[GUARD_AT] is None:
        return None  # nil means idle
    if scalars[GUARD_AT] == IDLE_GUARD:
        scalars[GUARD_AT] = None
    extra = {key: value for key, value in data.items() if key not in KNOWN}
    body = [scalars, history, recent, extra or None]
    try:
        return HEADER + _pack(body)
    except (TypeError, ValueError, OverflowError):  # an int past 64 bits, an odd type
        return None


def decode_dict(payload: bytes) -> dict[str, Any]:
    """The :meth:`RunState.to_dict` form of either version's bytes."""
    if payload[:1] != HEADER[:1]:
        return _decode_json(payload)
    version = payload[1] if len(payload) > 1 else None
    if version not in READABLE:
        if version is not None and version > VERSION:
            raise StateFormatError(f"run state format version {version} is newer than this worker")
        raise StateFormatError(f"run state format version {version} is not one this worker reads")
    try:
        scalars, history, recent, extra = _unpack(payload[2:])
        data: dict[str, Any] = dict(zip(SCALARS, scalars, strict=False))
        if "guard" in data and data["guard"] is None:
            data["guard"] = copy.deepcopy(IDLE_GUARD)  # the caller's to change
        data["history"] = unpack_history(history, data["next_index"])
        if version == 2:
            data["recent"] = recent_format.unpack_recent_v2(recent, _unpack)
        else:
            data["recent"] = recent_format.unpack_recent(recent, data, _unpack)
    except (ValueError, zlib.error, msgpack.UnpackException) as exc:
        raise StateFormatError(f"undecodable run state: {exc}") from exc
    if extra:
        data.update(extra)
    return data


def _decode_json(payload: bytes) -> dict[str, Any]:
    """Version 1: JSON of to_dict (orjson wrote it; the standard library took the rest)."""
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError:
        return json.loads(payload)


def encode_json(data: dict[str, Any]) -> bytes:
    """Version 1 bytes, for the states the binary form cannot hold (still read by every
    version)."""
    try:
        return orjson.dumps(data)
    except (TypeError, orjson.JSONEncodeError):
        text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
        return text.encode("utf-8", "surrogatepass")


class JsonFallbacks:
    """States written as JSON because the binary form could not hold them (the first is
    logged: it means this module has something to learn)."""

    count: ClassVar[int] = 0


def encode(state: RunState) -> bytes:
    """A run's state as changelog bytes: version 2, or JSON when version 2 cannot hold it."""
    data = state.to_dict()
    payload = encode_dict(data)
    if payload is not None:
        return payload
    JsonFallbacks.count += 1
    if JsonFallbacks.count == 1:
        log.warning("run %s: state written as JSON (the binary form cannot hold it)", state.run_id)
    return encode_json(data)


def decode(payload: bytes) -> RunState:
    return RunState.from_dict(decode_dict(payload))
