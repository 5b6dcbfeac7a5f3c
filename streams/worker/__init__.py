"""The Faust worker: app and agents built by one composition root (bootstrap), Faust patches, the
state codec, the audit writer and the web views.

May import core, wire, kafka, audit and settings; nothing above it imports Faust except through
here.
"""
