"""Webhooks: an experiment's decisions and resets POSTed, signed, to the URLs its operator gave
(docs/WEBHOOKS.md)."""
