"""The service layer: an events-topic message in, its run's new state and decisions out, per
event and per batch, with the per-agent config; no Faust, no Kafka, so it is tested without a
broker.

May import streams.core, streams.wire and streams.state.
"""
