"""The detection-quality benchmark (issue 38): imported agent trajectories replayed through
loopguard's core and through the peers' published loop rules, scored against the runs'
outcomes and a reader's stuck labels. ``bench/quality_bench.py`` is its command line."""
