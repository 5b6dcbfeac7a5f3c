"""Replay and export: read recorded events back (file or topic), run them through the pure core and
compare with the audit trail.

May import core, wire, kafka, audit and settings; not the worker.
"""
