"""The coordinator's configuration, read from the environment (prefix DEXP_)."""

from __future__ import annotations

from functools import lru_cache

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DEXP_", extra="ignore")

    redis_url: str = "redis://127.0.0.1:6379/0"
    admin_token: str = Field("dev-admin-token", min_length=8)
    enrollment_secret: str = Field("dev-enrollment-secret", min_length=8)
    # The experiment created at start-up when it does not exist (empty: none).
    experiment: str = "demo"
    arms: str = "A,B,C,D,E,F,G,H,I,J"
    algorithm: str = "de"
    subroutine: str = "ser3"
    epsilon: float = 0.25
    delta: float = 0.05
    eta: float = 0.9
    xi: float = 0.0
    dp_epsilon: float = 0.1
    beta: float = 0.5
    phi: float = 0.0
    every_arm: bool = False
    sigma: float | None = None  # reward scale for Gaussian rewards; unset: rewards in [0, 1]
    log_level: str = "info"


@lru_cache
def get_settings() -> Settings:
    return Settings()
