"""The pure detector core: events, config, hashing, history, detectors, the post-compaction guard,
run state and the engine over many runs.

Imports nothing of loopguard's other layers and no Kafka, Faust, SQL or web library; compiled by
mypyc when LOOPGUARD_COMPILE=1.
"""
