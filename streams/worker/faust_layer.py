"""The Faust layer: every method of faust-streaming and aiokafka loopguard replaces, in the order
the composition root (:func:`streams.worker.bootstrap.build_worker`) installs them, fenced by
version and source.

Each patch is declared once, beside its code, as a :class:`~streams.worker.patching.Patch`:
the method, the upstream source it was written against (a fingerprint), the upstream
behaviour it fixes, and the test that fails without it. :data:`INVENTORY` is all of them, in
installation order; docs/design.md ("Faust patches") lists the same, and
tests/unit/worker/test_faust_layer.py checks that the list, the code and that page agree and
that no method is replaced twice. What could be a subclass or a setting is one: the runs
table (:class:`~streams.worker.tables.RunsTable`), the shutdown deadline (the app's
``Worker`` setting, :func:`~streams.worker.shutdown.worker_with_deadline`).

Upgrading faust-streaming or aiokafka: a worker refuses to start (:func:`mismatches`) until
:data:`PATCHED_VERSION`, :data:`PATCHED_AIOKAFKA` and every fingerprint match. For each patch
whose fingerprint changed, read the new upstream source: if the behaviour it fixes is gone,
drop the patch (and see its proof test fail, or pass on the upstream code); if not, port the
patch, run its proof test and the integration tests named in docs/design.md, then record the
new fingerprint.
"""

from __future__ import annotations

import asyncio
import importlib.metadata

from streams.settings import Settings
from streams.worker import (
    audit_release,
    coordinator_retries,
    exactly_once,
    fast_failover,
    faust_patches,
)
from streams.worker.patching import Patch, Reliance, source_fingerprint

PATCHED_VERSION = "0.15.3"
PATCHED_AIOKAFKA = "0.14.0"

# Installation order: the consumer's fetch first, then recovery, the transactional sender,
# the hand-off, the exactly-once commits, and the stop (it needs the audit topics' names).
INVENTORY: tuple[Patch, ...] = (
    faust_patches.FETCH_WAIT,
    faust_patches.RECOVERY_COMPLETED,
    faust_patches.RESUME_STREAMS,
    faust_patches.TRUE_END,
    *fast_failover.PATCHES,
    *coordinator_retries.PATCHES,
    faust_patches.HANDOFF,
    *exactly_once.PATCHES,
    *audit_release.PATCHES,
)
RELIED_ON: tuple[Reliance, ...] = fast_failover.RELIED_ON


def install(settings: Settings, commit_barrier: asyncio.Lock) -> list[Patch]:
    """Install the patches ``settings`` call for, in :data:`INVENTORY`'s order; the ones
    installed. Refuses (StartupError, from the composition root) a Faust or aiokafka the
    patches were not written for."""
    faust_patches.set_fetch_max_wait(settings.fetch_max_wait_ms)
    # never lose events that arrive while a worker restores its tables
    faust_patches.ordered_recovery_resume()
    skipped = set()
    if settings.processing_guarantee == "at_least_once":
        faust_patches.read_changelogs_to_their_end(settings)  # not to the end tansu reports
    else:
        skipped.add(faust_patches.TRUE_END.name)
    fast_failover.fast_failover()  # a promoted standby reads on; recovery ends once read
    coordinator_retries.retry_cut_coordinator_lookups()  # a broker restart crashes no commit
    if settings.fast_handoff:
        faust_patches.fast_message_handoff()
    else:
        skipped.add(faust_patches.HANDOFF.name)
    # Exactly-once commits only between the guarding agent's batches, buffer flushed first
    # (with immediate control delivery, commits are settled off the agent's path instead).
    exactly_once.exactly_once_commits(
        commit_barrier,
        settings.transaction_retry_backoff_ms,
        between_batches=settings.control_delivery == "transactional",
    )
    # A stop or a rebalance never waits for the audit agents' database writes (issue 26).
    audit_release.audit_never_holds_a_stop({settings.topics.control, settings.topics.deadletter})
    return [patch for patch in INVENTORY if patch.name not in skipped]


def mismatches() -> list[str]:
    """Why the installed faust-streaming or aiokafka is not the one the patches fit (empty
    when it is)."""
    problems = []
    installed = importlib.metadata.version("faust-streaming")
    if installed != PATCHED_VERSION:
        problems.append(f"faust-streaming {installed} is installed, not {PATCHED_VERSION}")
    aiokafka = importlib.metadata.version("aiokafka")
    if aiokafka != PATCHED_AIOKAFKA:
        problems.append(f"aiokafka {aiokafka} is installed, not {PATCHED_AIOKAFKA}")
    fenced = [(p.name, p.upstream, p.fingerprint) for p in INVENTORY]
    fenced += [(r.name, r.upstream, r.fingerprint) for r in RELIED_ON]
    for name, upstream, expected in fenced:
        if source_fingerprint(upstream) != expected:
            problems.append(f"{name} differs from the source the patch was written against")
    return problems
