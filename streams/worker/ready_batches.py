"""A stream's events in batches, each handed over as soon as the stream has nothing more queued.

Faust's ``Stream.take_events(max_, within)`` hands a batch over when it holds ``max_`` events
or when ``within`` has passed since the previous one: an event that arrives alone waits out
the rest of the window (20 ms, ``LOOPGUARD_BATCH_WINDOW_MS``) before it is guarded, though
nothing else was coming. :func:`take_ready` takes every event already delivered to the
stream's queue and hands the batch over once the queue is empty: alone, an event is guarded
at once; under load, whatever queued up while the previous batch was guarded and committed
becomes the next batch, so batches grow with the load as before. ``within`` still bounds how
long a batch keeps taking events that arrive while it fills.

Acks are the caller's, as with ``take_events`` (the stream's own acks are off): the guarding
agent acks a batch's events once its records are with the producer, before it commits them
(:func:`streams.worker.exactly_once.commit_batch`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any


async def take_ready(stream: Any, max_: int, within: float) -> AsyncIterator[list[Any]]:
    """Yield lists of at most ``max_`` events (``faust.EventT``) of ``stream``, each as soon
    as no more are queued (or ``within`` seconds after its first); the caller acks them."""
    loop = asyncio.get_running_loop()
    queue = stream.channel.queue
    buffer: list[Any] = []
    arrived = asyncio.Event()  # the buffer holds an event, or the stream ended
    room = asyncio.Event()  # cleared while the caller holds a batch or the buffer is full
    room.set()
    ended: list[BaseException | None] = []  # why the stream's iteration ended (None: it did)
    closed = False

    async def add_to_buffer(value: Any) -> Any:
        while not room.is_set():  # never more than max_, never into a batch being guarded
            await room.wait()
        if not closed:
            buffer.append(stream.current_event)
            arrived.set()
            if len(buffer) >= max_:
                room.clear()
        return value

    async def drain() -> None:
        """Run the stream; its processor (above) fills the buffer."""
        error: BaseException | None = None
        try:
            async for _ in stream:
                pass
        except asyncio.CancelledError:  # the stream stopped
            raise
        except BaseException as exc:  # handed to the caller, as take_events crashes the stream
            error = exc
            raise
        finally:
            ended.append(error)
            arrived.set()

    enable_acks = stream.enable_acks
    stream.enable_acks = False
    stream.add_processor(add_to_buffer)
    drainer = stream.add_future(drain())
    try:
        while True:
            await arrived.wait()
            if not buffer:
                if ended and ended[0] is not None:
                    raise ended[0]
                return
            # What the stream already holds joins the batch; nothing is waited for.
            deadline = loop.time() + within
            while len(buffer) < max_ and not queue.empty() and loop.time() < deadline:
                await asyncio.sleep(0)  # the drainer takes the next queued event
            batch = list(buffer)
            buffer.clear()
            arrived.clear()
            room.clear()
            try:
                yield batch
            finally:
                room.set()
    finally:
        closed = True
        room.set()
        stream.enable_acks = enable_acks
        drainer.cancel()
