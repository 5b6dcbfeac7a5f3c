"""The loopguard command line: worker, demo, queries, replay/export, config and migrate commands.

The top layer: may import any other; nothing imports it.
"""
