"""Benchmarks that print figures (docs/benchmarks.md). Run from the repository root as
``python -m bench.<name>`` or, the same, ``python bench/<name>.py``: each script there is a
launcher, and the work is in :mod:`bench.lab` (the broker and core benchmarks and what they
share) and :mod:`bench.quality` (detection quality on real trajectories).

May import streams and the tests' Apache Kafka cluster tool (tests/kafka_cluster); nothing
under streams imports bench.
"""
