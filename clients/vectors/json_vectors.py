"""The ``gateway_json`` cases of clients/vectors/python.json: values a gateway serialises as a
tool call's args or a result, with the text Python writes for each (``json.dumps(value,
ensure_ascii=False)``), tagged so floats, big ints and key order reach the other client exactly.
"""

from __future__ import annotations

import json
import math
import random
import struct
from typing import Any

#: What a tool's result is when the host vetoed the call as a loop (an event's result too).
LOOP_VETO_RESULT = {"details": {"status": "blocked", "deniedReason": "tool-loop"}}


def tag(value: Any) -> Any:
    """A Python JSON value as a tagged tree the JS side rebuilds exactly."""
    if value is None:
        return {"null": None}
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": str(value)}
    if isinstance(value, float):
        return {"float": repr(value)}
    if isinstance(value, str):
        return {"str": value}
    if isinstance(value, list | tuple):
        return {"list": [tag(v) for v in value]}
    if isinstance(value, dict):
        return {"dict": [[k, tag(v)] for k, v in value.items()]}
    raise TypeError(type(value))


def dumps(value: Any) -> str:
    """What the gateway client writes for args/results."""
    return json.dumps(value, ensure_ascii=False)


def js_float(x: float) -> bool:
    """Finite and non-zero, and a JS client writes it as a float too (not integral below 1e21)."""
    return math.isfinite(x) and x != 0 and not (x == int(x) and abs(x) < 1e21)


def gateway_json_cases() -> list[dict[str, Any]]:
    """Values a gateway serialises (args/results), with Python's text and any JS difference."""
    cases: list[dict[str, Any]] = [
        {"name": "command", "value": {"command": "make test", "cwd": "/repo"}},
        {
            "name": "nested",
            "value": {"a": [1, 2, {"b": None, "c": True, "d": False}], "e": {}, "f": []},
        },
        {"name": "unicode", "value": {"text": "naïve café 日本語 🦀", "rtl": "שלום"}},
        {
            "name": "escapes",
            "value": (
                'quote " backslash \\ slash / nl \n cr \r tab \t bs \b ff \f'
                " nul \x00 us \x1f del \x7f ls \u2028 ps \u2029"
            ),
        },
        {"name": "ints", "value": [0, 1, -1, 2**31, -(2**31) - 1, 2**53 - 1, -(2**53 - 1)]},
        {"name": "big_ints", "value": [2**53 + 1, 2**63, -(2**64) - 7, 10**30]},
        {
            "name": "floats",
            "value": [
                0.1,
                -2.5,
                1e-5,
                0.0001,
                1.5e300,
                5e-324,
                123456789.125,
                2.5e-10,
                3.141592653589793,
                1e21,
                1.5e21,
                1e22,
                1.7976931348623157e308,
                4503599627370495.5,
            ],
        },
        {
            "name": "integral_floats_below_1e21",
            "value": [1e16, 1.1e16, 9999999999999998.0, 2.0**60, 1e20],
            "ts_expected": (
                "[10000000000000000, 11000000000000000, 9999999999999998,"
                " 1152921504606846976, 100000000000000000000]"
            ),
            "why": "a JS number with no fraction below 1e21 is written as an int",
        },
        {"name": "non_finite", "value": [math.nan, math.inf, -math.inf]},
        {"name": "empty_containers", "value": [[], {}, "", [[]], {"": {}}]},
        {"name": "null", "value": None},
        {"name": "bare_string", "value": "just text"},
        {"name": "true", "value": True},
        {"name": "veto", "value": LOOP_VETO_RESULT},
        {
            "name": "float_integral",
            "value": {"n": 1.0, "m": -0.0, "k": 1e15},
            "ts_expected": '{"n": 1, "m": 0, "k": 1000000000000000}',
            "why": "JS numbers cannot tell a float 1.0 from an int 1",
        },
        {
            "name": "integer_like_keys",
            "value": {"b": 1, "10": 2, "a": 3, "2": 4},
            "ts_expected": '{"2": 4, "10": 2, "b": 1, "a": 3}',
            "why": "JS objects order integer-like keys first, ascending",
        },
    ]
    rng = random.Random(20260101)
    floats = []
    while len(floats) < 300:
        bits = rng.getrandbits(64)
        x = struct.unpack("<d", struct.pack("<Q", bits))[0]
        if js_float(x):
            floats.append(x)
    for power in range(-330, 310, 7):
        x = rng.random() * 10.0**power
        if js_float(x):
            floats.append(x)
    cases.append({"name": "random_floats", "value": floats})
    for case in cases:
        case["python"] = dumps(case["value"])
        case["value"] = tag(case["value"])
    return cases
