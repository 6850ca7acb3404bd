"""The activation message the load generator sends an agent: the activation count and the rewards.

Bernoulli rewards travel as one byte per arm ("0110..."), others as comma-separated decimals.
Pure encoding; the transport (a Redis stream per agent) is the services' business.
"""

from __future__ import annotations

import numpy as np


def encode_rewards(rewards: np.ndarray, bounded: bool) -> list[bytes]:
    """One encoded row per activation: rewards has shape (activations, arms)."""
    if bounded:
        codes = (rewards.astype(np.uint8) + ord("0")).tobytes()
        width = rewards.shape[1]
        return [codes[i * width : (i + 1) * width] for i in range(rewards.shape[0])]
    return [",".join(f"{x:.5g}" for x in row).encode() for row in rewards]


def decode_rewards(data: bytes | str) -> np.ndarray:
    raw = data.encode() if isinstance(data, str) else data
    if b"," in raw:
        return np.array([float(x) for x in raw.split(b",")])
    return np.frombuffer(raw, dtype=np.uint8).astype(float) - 48.0
