"""A run's state at rest: its versioned binary changelog form and when it may leave memory.

May import streams.core only; no Kafka, Faust or SQL.
"""
