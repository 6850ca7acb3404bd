"""The load generator's configuration, read from the environment (prefix DEXP_)."""

from __future__ import annotations

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from clients.coordinator import coordinator_urls
from clients.secret_files import SecretFileSettings


class LoadSettings(SecretFileSettings):
    model_config = SettingsConfigDict(env_prefix="DEXP_", extra="ignore")

    # one URL, or several comma-separated (clients/coordinator.py)
    coordinator_url: str = "http://127.0.0.1:8000"
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_cluster: bool = Field(
        False,
        description="DEXP_REDIS_URL is a node of a Redis Cluster (any node: the client discovers "
        "the others): use the cluster client",
    )
    experiment: str = "demo"
    problem: str = "feraud-1"  # a named problem of common.environments; `means` overrides its arms
    means: str = ""  # e.g. "0.7,0.5,0.3"
    rewards: str = ""  # bernoulli | gaussian:SIGMA (default: the problem's)
    drift: str = ""  # per-arm drift of the means per activation, e.g. "0,-1e-5,-1e-5"
    activation: str = (
        ""  # uniform | groups:P:Q | power:ALPHA:GAMMA | zipf:S (default: the problem's)
    )
    seed: int | None = None
    rate: float = Field(0.0, ge=0, description="activations per second; 0: as fast as it goes")
    visits_per_user: int | None = Field(
        None,
        ge=0,
        description="how often one simulated user (an agent) may be activated: 0 no limit; unset: "
        "an ldp experiment's reports_per_agent B (one visit, one report), no limit otherwise. "
        "Capped, activations go to users with visits left, drawn from the activation "
        "distribution over those; when none is left the run ends as a budget run",
    )
    budget: int = Field(50_000_000, ge=1, description="most activations before giving up")
    max_seconds: float = Field(3600.0, gt=0, description="most wall time before giving up")
    batch: int = Field(500, ge=1, le=100_000)
    max_backlog: int = Field(20_000, ge=1, description="activations in flight before it waits")
    agent_wait_seconds: float = Field(120.0, ge=0, description="how long to wait for M agents")
    settle_seconds: float = Field(2.0, ge=0, description="enrollment quiet time before starting")
    unreachable_seconds: float = Field(
        60.0,
        gt=0,
        description="how long the coordinator or Redis may be unreachable before it gives up",
    )
    stall_seconds: float = Field(
        30.0,
        gt=0,
        description="no activation consumed for this long while some are pending: the run has "
        "stalled; it stops, says what it sees, and exits with status 5",
    )
    lease_seconds: float = Field(
        5.0,
        ge=0.2,
        le=300,
        description="TTL of the lease that makes this run the experiment's one load generator: "
        "renewed while it runs; another generator waits this long (plus a second) for it to "
        "expire before it gives up with exit status 6",
    )
    json_output: bool = Field(False, description="print the summary as one JSON object")

    @field_validator("coordinator_url")
    @classmethod
    def _coordinator_urls(cls, value: str) -> str:
        """Each URL checked (a bad one named), each once, comma-separated."""
        return ",".join(coordinator_urls(value))
