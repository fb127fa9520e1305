"""The gate: agents that run elsewhere ask about a call, wait for its decision and report its outcome.

Also the coding CLIs' hooks (`/api/hooks/...`), which ask the same way in each CLI's own format.
"""
