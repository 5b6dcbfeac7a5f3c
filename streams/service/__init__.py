"""The service layer: every pipeline of the worker as plain functions over messages, with no
Faust and no Kafka, so it is tested without a broker: per batch, messages in; records (one
type, :mod:`records`), state writes and offsets out. Guarding (:mod:`batch` over the
:class:`~streams.service.processor.EventProcessor`), loops between agents
(:mod:`agent_cycles`), loop incidents (:mod:`incidents`); the per-agent config.

May import streams.core, streams.wire and streams.state.
"""
