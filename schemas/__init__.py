"""Avro schemas of loopguard's topics (shipped as package data)."""
