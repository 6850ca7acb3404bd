"""The agent service's configuration, read from the environment."""

from __future__ import annotations

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class AgentSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DEXP_", extra="ignore")

    coordinator_url: str = "http://127.0.0.1:8000"
    redis_url: str = "redis://127.0.0.1:6379/0"
    enrollment_secret: str = "dev-enrollment-secret"
    experiment: str = "demo"
    agents_per_replica: int = Field(
        1,
        ge=1,
        le=10_000,
        validation_alias=AliasChoices("AGENTS_PER_REPLICA", "DEXP_AGENTS_PER_REPLICA"),
    )
    seed: int | None = None  # None: fresh entropy
    batch: int = Field(200, ge=1, description="activations read per stream per XREADGROUP")
    poll_seconds: float = Field(2.0, gt=0, description="fallback refresh of the global set")
    retry_max_seconds: float = Field(5.0, gt=0, description="cap of the vote retry back-off")
    # Where this process keeps its agents' credentials and vote records (agent/state.py), so that a
    # restart re-uses the same agents; unset: every start enrolls new agents. One per process.
    state_dir: str | None = None
    state_fsync: bool = Field(
        False, description="fsync every vote record too (credentials are always fsynced)"
    )
    redis_retry_max_seconds: float = Field(
        2.0, gt=0, description="cap of the back-off while Redis is unreachable"
    )
    log_level: str = "info"
