"""Thin Kafka helpers on kafka-python: topic layout and creation, the one group-less topic reader,
the schemas topic and the config topic.

May import streams.core, streams.wire and streams.settings.
"""
