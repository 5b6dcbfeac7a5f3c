"""Shared fixtures: databases (SQLite + PostgreSQL) and real services (tansu, workers)."""

pytest_plugins = ["db_fixtures", "services"]
