"""The worker's Prometheus metrics; imports nothing of loopguard's, so every layer may count."""
