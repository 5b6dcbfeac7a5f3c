"""Dev tools: the embedded tansu broker, a worker subprocess, and the demo that runs them end to
end.

May import every layer below the CLI.
"""
