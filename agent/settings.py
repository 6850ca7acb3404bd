"""The agent service's configuration, read from the environment."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import SettingsConfigDict

from clients.coordinator import coordinator_urls
from clients.secret_files import SecretFileSettings

EXPERIMENT_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")  # the coordinator's own rule for an id
EVERY_EXPERIMENT = "*"


class AgentSettings(SecretFileSettings):
    model_config = SettingsConfigDict(env_prefix="DEXP_", extra="ignore")

    coordinator_url: str = Field(
        "http://127.0.0.1:8000",
        description="the coordinator's URL, or several coordinators' URLs separated by commas "
        "(every one serves every request; the client spreads and fails over: "
        "clients/coordinator.py)",
    )
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_cluster: bool = Field(
        False,
        description="DEXP_REDIS_URL is a node of a Redis Cluster (any node: the client discovers "
        "the others): use the cluster client",
    )
    # Enrollment. Tickets (one per agent, issued by an admin: `dexp tickets issue`) are the
    # production way; the shared secret is open enrollment (development), used only when no ticket
    # is configured.
    tickets: str = Field(
        "",
        description="enrollment tickets separated by commas, whitespace or newlines; each names "
        "its experiment (ticket.<experiment>.<secret>), so one list may serve several experiments: "
        "an agent of experiment X takes a ticket of X",
    )
    tickets_file: str | None = Field(
        None,
        description="one ticket per line (blank lines and '#' comments ignored), read again "
        "whenever agents are still to enroll, so tickets appended later are used",
    )
    enrollment_secret: str = "dev-enrollment-secret"
    experiment: str = Field(
        "demo",
        description="the experiments this process hosts agents in: one id, a comma-separated list "
        "(`demo,checkout`; duplicates ignored), or `*` for every experiment the coordinator lists "
        "(checked every DEXP_DISCOVER_SECONDS: a new one gets its agents, a deleted one is "
        "dropped); ids match ^[A-Za-z0-9_-]{1,64}$",
    )
    discover_seconds: float = Field(
        5.0,
        gt=0,
        description="how often the process looks for experiments to join (`*`: the coordinator's "
        "list), and retries one it could not host yet (not created yet, out of tickets)",
    )
    agents_per_replica: int = Field(
        1,
        ge=1,
        le=10_000,
        validation_alias=AliasChoices("AGENTS_PER_REPLICA", "DEXP_AGENTS_PER_REPLICA"),
        description="agents hosted by one agent process in each of its experiments",
    )
    seed: int | None = None  # None: fresh entropy
    batch: int = Field(200, ge=1, description="activations read per stream per XREADGROUP")
    poll_seconds: float = Field(
        2.0,
        gt=0,
        description="how often an experiment's global set is polled (If-None-Match) while its "
        "event stream is not open (the primary path is the stream: agent/events.py)",
    )
    poll_rate: float = Field(
        10.0,
        gt=0,
        description="at most this many polls a second, every experiment of the process together: "
        "a process following many experiments without their event streams polls each one every "
        "max(DEXP_POLL_SECONDS, experiments / DEXP_POLL_RATE) seconds",
    )
    allocation_seconds: float = Field(
        1.0,
        gt=0,
        description="ldp: how often an experiment's document is read again (If-None-Match) for "
        "the allocation its agents draw arms from (it moves at publications, which the event "
        "stream does not announce)",
    )
    retry_max_seconds: float = Field(5.0, gt=0, description="cap of the vote retry back-off")
    reconcile_seconds: float = Field(
        30.0, gt=0, description="period (staggered per agent) of the check of its own votes"
    )
    state_dir: str | None = Field(
        None,
        description="where this process keeps its agents' credentials and vote records, every "
        "experiment's in the same directory (agent/state.py), so that a restart re-uses the same "
        "agents; unset: every start enrolls new agents. One directory per process",
    )
    state_fsync: bool = Field(
        False, description="fsync every vote record too (credentials are always fsynced)"
    )
    leave_on_stop: bool = Field(
        False,
        description="on SIGTERM or SIGINT, each hosted agent leaves its experiment (DELETE "
        "/v1/agents/me) and its saved state is removed, so that a host scaled down or stopped "
        "for good leaves no agent enrolled that nobody runs (compose turns it on); off: the "
        "agents stay enrolled for a restart to restore (DEXP_STATE_DIR on a volume that "
        "outlives the process). A crash leaves them enrolled either way",
    )
    redis_retry_max_seconds: float = Field(
        2.0, gt=0, description="cap of the back-off while Redis is unreachable"
    )
    log_level: str = Field(
        "info",
        description="the process's log level: info has a line per vote, settled message, report "
        "and rate-limited reset; warning keeps only what needs an operator (compose's default)",
    )
    status_seconds: float = Field(
        60.0,
        ge=0,
        description="how often the process logs one status line (activations, votes, discovery "
        "rounds, remaining arms) at info; 0: never",
    )

    @field_validator("coordinator_url")
    @classmethod
    def _coordinator_urls(cls, value: str) -> str:
        """Normalized: each URL once, comma-separated; a bad one is named."""
        return ",".join(coordinator_urls(value))

    @field_validator("experiment")
    @classmethod
    def _experiment_list(cls, value: str) -> str:
        """Normalized: the ids in order, each once, comma-separated; or `*` alone."""
        ids = [part.strip() for part in value.split(",")]
        if ids == [EVERY_EXPERIMENT]:
            return EVERY_EXPERIMENT
        if EVERY_EXPERIMENT in ids:
            raise ValueError("'*' (every experiment) cannot be combined with experiment ids")
        bad = next((i for i in ids if not EXPERIMENT_ID.fullmatch(i)), None)
        if bad is not None:
            raise ValueError(
                f"{bad!r} is not an experiment id (1 to 64 of A-Z a-z 0-9 _ -), in {value!r}"
            )
        return ",".join(dict.fromkeys(ids))

    @property
    def every_experiment(self) -> bool:
        """`*`: follow the coordinator's list of experiments instead of a fixed one."""
        return self.experiment == EVERY_EXPERIMENT

    @property
    def experiments(self) -> list[str]:
        """The fixed list of experiments (empty with `*`)."""
        return [] if self.every_experiment else self.experiment.split(",")

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


def ticket_experiment(ticket: str) -> str:
    """The experiment a ticket is for: tickets are 'ticket.<experiment>.<secret>' ('' if not)."""
    prefix, _, rest = ticket.partition(".")
    experiment, dot, secret = rest.partition(".")
    well_formed = prefix == "ticket" and dot and secret and "." not in secret
    return experiment if well_formed and EXPERIMENT_ID.fullmatch(experiment) else ""


def parse_tickets(text: str) -> list[str]:
    """Tickets separated by commas, whitespace or newlines."""
    return [t for t in re.split(r"[,\s]+", text) if t]


def read_tickets_file(path: str | Path) -> list[str]:
    """One ticket per line; blank lines and lines starting with '#' are ignored."""
    lines = (line.strip() for line in Path(path).read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]
