"""The signature of a delivery: HMAC-SHA256 under the webhook's secret of '<timestamp>.<body>'.

The timestamp (unix seconds, X-Dexp-Timestamp) is inside the signed string, so a receiver that
refuses old timestamps refuses a replayed delivery too (docs/WEBHOOKS.md has the check)."""

from __future__ import annotations

import hashlib
import hmac
import secrets

SIGNATURE_HEADER = "X-Dexp-Signature"
TIMESTAMP_HEADER = "X-Dexp-Timestamp"
SECRET_BYTES = 32


def new_secret() -> str:
    """32 random bytes, hex: shown once in the creation's answer, kept in Redis to sign."""
    return secrets.token_hex(SECRET_BYTES)


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The value of X-Dexp-Signature: 'sha256=' and the hex HMAC of '<timestamp>.' + body."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def valid(secret: str, timestamp: str, body: bytes, header: str) -> bool:
    """Whether `header` is the signature of `body` at `timestamp` (constant time)."""
    if not timestamp.isdigit():
        return False
    return hmac.compare_digest(signature(secret, int(timestamp), body), header)
