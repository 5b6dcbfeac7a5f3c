"""The agent id of readiness test loops (``wait_until_processing`` and the demo send them):
the trail's reports (``loopguard runs``, the status page) hide its runs unless asked. No
imports, so the CLI names it without loading SQLAlchemy."""

CANARY_AGENT = "loopguard-canary"
