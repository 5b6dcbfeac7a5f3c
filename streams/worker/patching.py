"""How a method of faust-streaming, aiokafka or mode is replaced: each replacement declared once,
beside its code, as a :class:`Patch` (what it replaces, the upstream source it was written
against, the upstream behaviour it fixes, the test that fails without it), and installed only
through :func:`replace`, which refuses a method some other code replaced already.

The inventory of every patch, in the order the composition root installs them, is
:mod:`streams.worker.faust_layer`.
"""

from __future__ import annotations

import hashlib
import inspect
from dataclasses import dataclass
from typing import Any


class PatchError(RuntimeError):
    """A method is about to be replaced twice (two patches, or another library's)."""


@dataclass(frozen=True)
class Patch:
    """One replaced method. ``upstream`` is the method as the pinned release has it (read when
    the patch's module is imported, before anything is installed), ``fingerprint`` its
    source's (:func:`source_fingerprint`) when the patch was written."""

    owner: type
    attribute: str
    upstream: Any
    fingerprint: str
    fixes: str  # the upstream behaviour it fixes: the issue, or how it was reproduced
    proof: str  # the test that fails without it (path::name)

    @property
    def name(self) -> str:
        return f"{self.owner.__name__}.{self.attribute}"

    @property
    def library(self) -> str:
        return self.owner.__module__.split(".")[0]


@dataclass(frozen=True)
class Reliance:
    """An upstream method a patch relies on without replacing it (fenced all the same)."""

    name: str
    upstream: Any
    fingerprint: str


# patch name -> the replacement installed for it (so installing the same patch again, a test
# or a second app in one process, is no second patch)
installed: dict[str, Any] = {}


def source_fingerprint(function: Any) -> str:
    """The first 16 hex digits of sha256 over ``function``'s source."""
    function = getattr(function, "fun", function)  # mode's decorators keep the body in .fun
    return hashlib.sha256(inspect.getsource(function).encode()).hexdigest()[:16]


def replace(patch: Patch, replacement: Any) -> None:
    """Put ``replacement`` where ``patch`` says; :class:`PatchError` when the method is neither
    the upstream one nor this patch's own earlier replacement."""
    current = getattr(patch.owner, patch.attribute)
    if current is not patch.upstream and current is not installed.get(patch.name):
        raise PatchError(f"{patch.name} is replaced already by {current!r}: one patch per method")
    setattr(patch.owner, patch.attribute, replacement)
    installed[patch.name] = replacement
