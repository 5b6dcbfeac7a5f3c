"""Trajectory importers: public agent trajectories (OpenHands, SWE-agent, mini-swe-agent, Claude
Code, OpenClaw) as loopguard events, one run per trajectory, with each run's outcome label.

Each format module reads its files into :class:`~streams.importers.runs.ImportedRun`; the tool
calls are mapped to OpenClaw's tools and result shapes (:mod:`streams.importers.openclaw_shapes`)
so loopguard's rules judge them as they judge OpenClaw's; :mod:`streams.importers.run_events`
turns a run into events. docs/importing.md has the mapping per format.
"""
