"""A crashed agent ends the worker process, even when Faust's own stop hangs.

Faust stops the worker when an agent crashes, but that stop can wait forever on the final
offset commit through the consumer thread (faust-streaming issue #324: the worker "stays in
Stopping state indefinitely"; seen here in about one crash in six). A live process that
guards nothing is worse than a dead one its supervisor restarts, so a crash arms a deadline:
if the process is still up when it passes, it exits with status 1. Offsets that were not
committed are read again by the next worker (at-least-once), as after a SIGKILL.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger("loopguard.worker")

CRASH_EXIT_STATUS = 1


class CrashExit:
    """Arms, once, a timer that ends the process ``grace_seconds`` after an agent crashed."""

    def __init__(self, grace_seconds: float, exit: Callable[[int], Any] = os._exit) -> None:
        self.grace_seconds = grace_seconds
        self.exit = exit
        self.timer: threading.Timer | None = None
        self.lock = threading.Lock()

    def arm(self, reason: str) -> None:
        with self.lock:
            if self.timer is not None:
                return
            self.timer = threading.Timer(self.grace_seconds, self.fire, args=(reason,))
            self.timer.daemon = True
            self.timer.name = "loopguard-crash-exit"
            self.timer.start()

    def fire(self, reason: str) -> None:
        log.error(
            "%s; the worker did not stop within %.0f s, exiting with status %d",
            reason,
            self.grace_seconds,
            CRASH_EXIT_STATUS,
        )
        for handler in logging.getLogger().handlers:
            handler.flush()
        sys.stderr.flush()
        self.exit(CRASH_EXIT_STATUS)

    def guard(
        self, name: str, agent: Callable[[Any], Awaitable[None]]
    ) -> Callable[[Any], Awaitable[None]]:
        """``agent`` as a Faust agent body that arms the deadline when it raises."""

        @functools.wraps(agent)
        async def guarded(stream: Any) -> None:
            try:
                await agent(stream)
            except Exception as exc:  # CancelledError is a BaseException: a normal stop
                self.arm(f"agent {name} crashed: {exc!r}")
                raise

        return guarded
