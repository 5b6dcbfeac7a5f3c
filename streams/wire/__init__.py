"""The wire format: Avro single-object encoding of events, decisions, watermarks and dead letters,
and the schema registry that resolves writer schemas.

May import streams.core only.
"""
