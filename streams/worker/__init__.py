"""The Faust adapter, and nothing else: the app and its agents built by one composition root
(:mod:`bootstrap`), the runs table, the per-batch checkpoint step (:mod:`checkpoint`), the
exactly-once commits and the other patches Faust needs, the state codec Faust calls, batch
sends and the crash exit.

Everything that touches Faust lives here (the web views register on Faust's web server, in
:mod:`streams.web`); the per-event work it drives is plain code in :mod:`streams.service`.
May import every layer below it and the settings.
"""
