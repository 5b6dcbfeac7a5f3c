"""The agent id of readiness test loops (``wait_until_processing`` sends them): one name,
importable without the gateway client, so ``loopguard runs`` hides them cheaply."""

CANARY_AGENT = "loopguard-canary"
