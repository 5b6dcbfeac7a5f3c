"""The worker's Prometheus metrics and the secrets hidden from what it shows (redaction.py);
imports nothing of loopguard's, so every layer may count and redact."""
