"""loopguard: distributed tool-loop guard for AI agent fleets (Kafka + Faust + SQL audit trail)."""
