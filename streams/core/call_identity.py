"""A call's identity for the repetition detectors (issue 44): its args without the execution
knobs that change how a call runs, not what it does.

An agent stuck on a failing command often re-runs it with ``pty`` on, then off, a longer
``timeout``, another ``yieldMs``: every call then looks new to exact args hashing and the loop
only ever draws a warning. So, unless ``deviations.ignoreExecutionKnobs`` is off (the
reference hashes the args as they are), these args are left out of a call's signature:

- ``exec``: ``background``, ``pty``, ``timeout``, ``timeoutSeconds`` (its newer name),
  ``title`` (a display label) and ``yieldMs``, as OpenClaw's exec schema names them. Knobs
  that can change the command's result stay in: ``workdir`` (a command's relative paths and
  project), ``env``, ``elevated`` (its permissions), ``host``, ``node``, ``security``, ``ask``.
  Only ``workdir``'s spelling is normalised: ``""``, ``"."`` and ``"./"`` are the default
  directory (as none given), ``"src/"``, ``"./src"`` and ``"src//"`` are ``"src"``.
- ``process``: ``timeout`` (how long a poll waits for output).

``perTool.<tool>.ignoredArgs`` adds paths per tool (the syntax of ``volatileFields``), whatever
``compat`` says: an operator's own list. What a knob changes still shows in the outcome: the
detectors block only repeats whose outcomes are identical too.
"""

from __future__ import annotations

from typing import Any

from streams.core.deviations import RAW_CALL_ARGS
from streams.core.volatile import VolatileFields

# OpenClaw's exec and process schemas (src/agents/bash-tools.schemas.ts), the args that only
# change how the call runs. Documented in docs/reference.md ("What a call is").
BUILTIN_IGNORED_ARGS: dict[str, tuple[str, ...]] = {
    "exec": ("background", "pty", "timeout", "timeoutSeconds", "title", "yieldMs"),
    "process": ("timeout",),
}
_BUILTIN_FIELDS = {tool: VolatileFields(paths) for tool, paths in BUILTIN_IGNORED_ARGS.items()}
WORKDIR = "workdir"


def same_directory(path: str) -> str:
    """One spelling per directory: empty and ``.`` segments and trailing slashes dropped
    (``..`` kept: through a symbolic link it is not the parent). ``""`` is the default."""
    if "/" not in path and path != ".":
        return path
    parts = [part for part in path.split("/") if part and part != "."]
    root = "/" if path.startswith("/") else ""
    return root + "/".join(parts) if parts or root else ""


def _exec_workdir(params: dict[str, Any]) -> dict[str, Any]:
    workdir = params.get(WORKDIR)
    if not isinstance(workdir, str):
        return params
    normal = same_directory(workdir)
    if normal == workdir and normal:
        return params
    out = {key: value for key, value in params.items() if key != WORKDIR}
    if normal:
        out[WORKDIR] = normal
    return out


def identity_params(
    tool_name: str, params: Any, rules: int, fields: VolatileFields | None = None
) -> Any:
    """``params`` as the call's identity: the built-in knobs left out (unless ``rules`` has
    ``RAW_CALL_ARGS``), then ``fields`` (``perTool.<tool>.ignoredArgs``). Containers on a
    stripped path are copied, never changed."""
    if not rules & RAW_CALL_ARGS:
        builtin = _BUILTIN_FIELDS.get(tool_name)
        if builtin is not None and isinstance(params, dict):
            params = builtin.strip(params)
            if tool_name == "exec":
                params = _exec_workdir(params)
    if fields is not None:
        params = fields.strip(params)
    return params


def ignored_args(
    tool_name: str, params: Any, rules: int, fields: VolatileFields | None = None
) -> list[str]:
    """The ignored paths that ``params`` holds, sorted (for a decision's reason: asked only
    when a detector fires)."""
    paths: set[str] = set()
    if not rules & RAW_CALL_ARGS:
        paths.update(BUILTIN_IGNORED_ARGS.get(tool_name, ()))
    if fields is not None:
        paths.update(fields.paths)
    if not isinstance(params, dict | list):
        return []
    return sorted(path for path in paths if VolatileFields([path]).strip(params) is not params)
