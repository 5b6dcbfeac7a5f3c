"""Block/abort notices posted to webhook receivers: the notifier and one queue per receiver.

May import the audit trail (its outbox), core, observability and settings.
"""
