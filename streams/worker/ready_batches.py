"""A stream's events in batches, each handed over as soon as the stream has nothing more queued.

Faust's consumer delivers each fetched record as an event into the agent's channel queue (its
conductor: decoding, tracking); iterating the stream then takes them out one at a time, each
through Faust's per-event path (a loop turn, the processors, sensors, the current event).
That per-event path cost 45 of the 60 µs per event of an agent that only took its events in
(``bench/throughput_bench.py --only faustconsume``, against the same agent draining the queue
with this function's loop, 2026-12-06). :func:`take_ready` takes the events straight off the
channel's queue instead: every event already queued joins the batch (at most ``max_``; at
most ``within`` seconds of taking), and the batch is handed over once the queue is empty:
alone, an event is guarded at once; under load, whatever queued up while the previous batch
was guarded and committed becomes the next batch.

What Faust's stream does per event that the guard needs is done here: an event of an older
consumer generation (delivered before a rebalance) or taken while flow control is suspended is
dropped unacked, as the stream drops it; an event of an acking topic is tracked by the
consumer (``track_message``) so a rebalance or a stop waits for its ack. Acks are the
caller's: the guarding agent acks a batch's events once its records are with the producer,
before it commits them (:func:`streams.worker.exactly_once.commit_batch`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from faust.types import EventT


async def take_ready(stream: Any, max_: int, within: float) -> AsyncIterator[list[Any]]:
    """Yield lists of at most ``max_`` events (``faust.EventT``) of ``stream``'s channel, each
    as soon as no more are queued (or ``within`` seconds after its first); the caller acks
    them. An error thrown into the channel is raised here; the end Faust throws into a
    stopping agent's channel (StopAsyncIteration) ends the batches, as it ends the stream."""
    app, loop = stream.app, asyncio.get_running_loop()
    queue = stream.channel.queue
    while True:
        try:
            taken = [await queue.get()]
        except StopAsyncIteration:  # Faust ends a stopping agent's channel with it
            return
        ended = False
        deadline = loop.time() + within
        while len(taken) < max_ and not queue.empty() and loop.time() < deadline:
            try:
                taken.append(queue.get_nowait())
            except StopAsyncIteration:
                ended = True
                break
        batch = live_events(app, taken)
        if batch:
            yield batch
        if ended:
            return


def live_events(app: Any, values: list[Any]) -> list[Any]:
    """The events of ``values`` the stream would hand on, tracked as it would track them."""
    generation = app.consumer_generation_id
    if not app.flow_control.is_active():
        return []  # suspended for a rebalance: the stream would skip every one
    consumer, acking = app.consumer, app.topics.acking_topics
    live = []
    for value in values:
        if not isinstance(value, EventT):
            continue  # not a consumed record: a topic channel's queue holds none
        message = value.message
        if message.generation_id != generation:
            continue  # delivered before a rebalance: its partition may be another's now
        if message.topic in acking and not message.tracked:
            message.tracked = True
            consumer.track_message(message)
        live.append(value)
    return live
