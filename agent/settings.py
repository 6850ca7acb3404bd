"""The agent service's configuration, read from the environment."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class AgentSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DEXP_", extra="ignore")

    coordinator_url: str = "http://127.0.0.1:8000"
    redis_url: str = "redis://127.0.0.1:6379/0"
    # Enrollment. Tickets (one per agent, issued by an admin: `dexp tickets issue`) are the
    # production way; the shared secret is open enrollment (development), used only when no ticket
    # is configured.
    tickets: str = Field("", description="tickets separated by commas, whitespace or newlines")
    tickets_file: str | None = Field(
        None, description="one ticket per line; blank lines and '#' comments ignored"
    )
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
    reconcile_seconds: float = Field(
        30.0, gt=0, description="period (staggered per agent) of the check of its own votes"
    )
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

    @property
    def uses_tickets(self) -> bool:
        """A ticket source is configured: enroll with tickets, never with the shared secret (an
        empty or used-up file must not fall back silently to open enrollment)."""
        return bool(self.tickets.strip()) or bool(self.tickets_file)

    def ticket_list(self) -> list[str]:
        """DEXP_TICKETS then DEXP_TICKETS_FILE's tickets, in order, each once."""
        found = parse_tickets(self.tickets)
        if self.tickets_file:
            found += read_tickets_file(self.tickets_file)
        return list(dict.fromkeys(found))


def parse_tickets(text: str) -> list[str]:
    """Tickets separated by commas, whitespace or newlines."""
    return [t for t in re.split(r"[,\s]+", text) if t]


def read_tickets_file(path: str | Path) -> list[str]:
    """One ticket per line; blank lines and lines starting with '#' are ignored."""
    lines = (line.strip() for line in Path(path).read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]
