"""The coordinator's configuration, read from the environment (prefix DEXP_).

Secrets (the admin token, the enrollment secret, the Redis password inside DEXP_REDIS_URL) come
from the environment, or from files (DEXP_ADMIN_TOKEN_FILE=/run/secrets/...: Docker secrets,
clients/secret_files.py); the image holds none. The defaults below, and the development Redis
passwords of the compose and Swarm files (common/redis_acl.py), are development placeholders:
with DEXP_ENVIRONMENT=production the coordinator refuses to start while any of them is still in use,
or while a secret is shorter than MIN_SECRET_LENGTH characters.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict
from zxcvbn import zxcvbn

from clients.secret_files import SecretFileSettings
from common.algorithms import DEFAULTS
from common.redis_acl import USERS
from coordinator.cors import parse_origins
from coordinator.sdk import check_dir
from coordinator.throttle import failure_limit
from coordinator.webhooks.targets import AllowedHosts

# The development placeholders (also docker-compose.yml's defaults): refused in production.
DEV_ADMIN_TOKEN = "dev-admin-token"
DEV_ENROLLMENT_SECRET = "dev-enrollment-secret"
DEV_REDIS_PASSWORD = "dexp-dev-redis"  # the one password of Redis before it had a user per service
DEV_REDIS_PASSWORDS = {DEV_REDIS_PASSWORD} | {u.development_password for u in USERS.values()}
MIN_SECRET_LENGTH = 16
# A production secret must cost at least 10^16 guesses by zxcvbn's estimate (about 53 bits):
# "aaaaaaaaaaaaaaaa" and "passwordpassword" pass the length and fail this; 16 random characters
# pass it.
MIN_GUESSES_LOG10 = 16


class InsecureSettings(ValueError):
    """Production settings that still hold a development placeholder or a short secret."""


class Settings(SecretFileSettings):
    model_config = SettingsConfigDict(env_prefix="DEXP_", extra="ignore")

    environment: Literal["development", "production"] = "development"
    redis_url: str = "redis://127.0.0.1:6379/0"
    # DEXP_REDIS_URL is a node of a Redis Cluster (any node: the client discovers the others).
    redis_cluster: bool = False
    # A connection or a command that takes longer fails (503 with Retry-After): a hung Redis holds
    # a request this long at most, not for as long as it hangs.
    redis_timeout_seconds: float = Field(3.0, gt=0, le=60)
    admin_token: str = Field(DEV_ADMIN_TOKEN, min_length=8)
    enrollment_secret: str = Field(DEV_ENROLLMENT_SECRET, min_length=8)
    # The experiment created at start-up when it does not exist (empty: none); the fields from
    # `algorithm` to `tolerance` are common.algorithms.AlgorithmConfig's, read by name.
    experiment: str = "demo"
    arms: str = "A,B,C,D,E,F,G,H,I,J"
    # Their defaults are AlgorithmConfig's own (common.algorithms.DEFAULTS), written there once.
    algorithm: str = DEFAULTS.algorithm
    subroutine: str = DEFAULTS.subroutine
    epsilon: float = DEFAULTS.epsilon
    delta: float = DEFAULTS.delta
    eta: float = DEFAULTS.eta
    xi: float = DEFAULTS.xi
    dp_epsilon: float = DEFAULTS.dp_epsilon
    beta: float = DEFAULTS.beta
    phi: float = DEFAULTS.phi
    every_arm: bool = DEFAULTS.every_arm
    # f: Byzantine agents tolerated; the threshold is M + f
    tolerance: int = Field(DEFAULTS.tolerance, ge=0)
    # CDE: P, the hit-rate bound under a uniform prior over which arm is best;
    # e0 = log(P (K-1)/(1-P))
    privacy: float = DEFAULTS.privacy
    # LDP: B, the reports one device may send (unset: 1; refused for the other algorithms)
    reports_per_agent: int | None = Field(None, ge=1)
    sigma: float | None = None  # reward scale for Gaussian rewards; unset: rewards in [0, 1]
    rewards: str = "bounded"  # with sigma unset: bounded ([0, 1]) or bernoulli (0 or 1)
    # CDE: the agents the default experiment expects, from which its threshold is chosen (unset:
    # max_agents); not an AlgorithmConfig field
    agents: int | None = Field(None, ge=1)
    log_level: str = "info"
    host: str = "127.0.0.1"  # where uvicorn listens (coordinator/server.py)
    port: int = 8000
    # Abuse limits (0 turns a limit off). Votes are rare by design (at most K per agent and epoch),
    # so the vote rate is generous: it stops a runaway or hostile agent, not a working one.
    vote_rate: float = Field(20.0, ge=0)  # votes per second per agent, sustained
    vote_burst: int = Field(50, ge=1)  # votes per agent at once
    enroll_rate: float = Field(
        20.0, ge=0
    )  # enrollments per second per client address and experiment
    enroll_burst: int = Field(200, ge=1)
    max_agents: int = Field(10_000, ge=0)  # agents per experiment
    max_agents_per_client: int = Field(
        1_000, ge=0
    )  # agents one client address may enroll per experiment (open enrollment only)
    # Enrollment. Tickets (POST /v1/experiments/{id}/tickets) are the production way: one ticket,
    # one agent. Open enrollment lets anyone holding the shared enrollment secret enroll as many
    # agents as the per-client limits allow: a development convenience, on by default in
    # development and off in production unless set to true explicitly.
    open_enrollment: bool | None = None
    # An agent enrolled with a lease (`lease: true`: the agent service's) leaves once this long
    # passed without its host renewing it (killed, crashed, cut off: coordinator/leases.py); its
    # host renews every third of it. Devices enroll without one.
    agent_lease_seconds: float = Field(60.0, ge=1, le=86_400)
    max_tickets: int = Field(10_000, ge=1, le=100_000)  # tickets per request
    max_ticket_ttl_seconds: int = Field(30 * 86_400, ge=1)
    # The audit log of state-changing calls keeps about this many entries (XADD MAXLEN ~): the
    # oldest are trimmed past it, so that the log's memory is bounded.
    audit_max_entries: int = Field(100_000, ge=100, le=10_000_000)
    # DSER4 resets by agents (an admin's reset is never limited): per agent and per experiment.
    reset_rate: float = Field(0.1, ge=0)  # resets per second per agent, sustained
    reset_burst: int = Field(1, ge=1)
    experiment_reset_rate: float = Field(1.0, ge=0)  # resets per second per experiment
    experiment_reset_burst: int = Field(3, ge=1)
    # With a tolerance f > 0, a DSER4 reset needs f + 1 distinct agents' requests within this
    # window (f liars must not reset alone); with f = 0 any agent's request resets, as the papers'.
    reset_quorum_seconds: float = Field(60.0, gt=0, le=86_400)
    # What anyone reads of the votes is published in batches (coordinator/store/lua/publish.lua): once
    # this many counted messages (votes, reports that moved a count; never ignored ones) came since
    # the last publication, so that a reader who polls cannot time one device's vote; an
    # elimination or a newly settled agent (CE) at the next tick of the cadence even with fewer.
    publish_batch: int = Field(10, ge=1, le=10_000)
    publish_cadence_seconds: float = Field(5.0, ge=0, le=3_600)
    # The HTTP edge (coordinator/server.py, coordinator/edges.py).
    trusted_proxies: str = ""  # comma-separated addresses whose X-Forwarded-For is believed
    max_body_bytes: int = Field(65_536, ge=1024)  # larger bodies: 413, before any parsing
    header_timeout_seconds: float = Field(10.0, gt=0)  # a request's headers must arrive by then
    keep_alive_seconds: float = Field(5.0, gt=0)  # an idle keep-alive connection is closed
    # Linux's TCP_DEFER_ACCEPT on the listening socket (nginx's `listen ... deferred`): a connection
    # reaches the process only once its first bytes arrived, or after about this long; 0: at once
    defer_accept_seconds: int = Field(10, ge=0, le=600)
    # requests in flight at once (not connections: an idle one holds no place; streams have their
    # own bounds); beyond, a request waits in line (as many, 5 s at most), then 503 with Retry-After
    max_concurrency: int = Field(1_000, ge=1)
    # connections without a request in flight (not yet asked, or kept alive) one process keeps,
    # less the event streams open; beyond, the oldest is closed (fewer if the open-file limit
    # would not hold them)
    max_idle_connections: int = Field(20_000, ge=64)
    # connections one client address may hold at once (0: no bound); beyond, a new one is closed at
    # once, so that no single client fills max_concurrency (trusted proxies are exempt)
    max_connections_per_client: int = Field(200, ge=0)
    # a request's whole body must arrive within this time of its headers; else 408
    body_timeout_seconds: float = Field(10.0, gt=0)
    # failed credential checks (401) per client address, a moving window (coordinator/throttle.py);
    # beyond: 429 with Retry-After on the address's requests that carry a credential
    auth_failure_limit: str = "20/minute"

    @field_validator("auth_failure_limit")
    @classmethod
    def _auth_failure_limit(cls, value: str) -> str:
        try:
            failure_limit(value)
        except ValueError:
            raise ValueError(
                f"DEXP_AUTH_FAILURE_LIMIT: {value!r} is not a rate such as 20/minute"
            ) from None
        return value

    # The device path (coordinator/events.py, caching.py, compression.py, cors.py). Event streams
    # are long-lived connections outside max_concurrency, with bounds of their own: per process
    # (beyond: 503) and per client address (beyond: 429), both with Retry-After.
    max_subscribers: int = Field(10_000, ge=1)
    max_subscribers_per_client: int = Field(100, ge=1)
    sse_heartbeat_seconds: float = Field(
        15.0, gt=0, le=3600
    )  # a comment when nothing else was sent
    sse_retry_ms: int = Field(
        2_000, ge=0, le=3_600_000
    )  # the reconnection delay the stream suggests
    cache_max_age_seconds: int = Field(1, ge=0, le=86_400)  # Cache-Control of the cacheable reads
    gzip_min_bytes: int = Field(1_024, ge=0)  # bodies at least this long are gzipped (0: none)
    cors_origins: str = ""  # comma-separated origins allowed CORS on the device's routes; "*": any

    @field_validator("cors_origins")
    @classmethod
    def _cors_origins(cls, value: str) -> str:
        parse_origins(value)  # a typo must not pass silently: it would turn CORS off
        return value

    # Where the JavaScript SDK's build is (coordinator/sdk.py): sdk/js with dist/ and package.json;
    # empty: the sdk/js beside the coordinator package (the checkout; /app/sdk/js in the image).
    sdk_dir: str = ""

    @field_validator("sdk_dir")
    @classmethod
    def _sdk_dir(cls, value: str) -> str:
        check_dir(value)
        return value

    # Webhooks (coordinator/webhooks/, docs/WEBHOOKS.md). Targets: comma-separated host names and
    # networks; empty: any host whose addresses are all public. Loopback, link-local, private and
    # reserved addresses are refused unless a listed network holds them.
    webhook_hosts: str = ""
    max_webhooks: int = Field(5, ge=1, le=100)  # webhooks per experiment
    webhook_timeout_seconds: float = Field(5.0, gt=0, le=60)  # one attempt, all included
    # the wait before the first retry; each next one doubles it (capped at an hour)
    webhook_backoff_seconds: float = Field(10.0, gt=0, le=3_600)
    webhook_max_attempts: int = Field(8, ge=1, le=100)  # then the delivery is failed
    # how often a coordinator sweeps the experiments with webhooks (besides their change messages)
    webhook_poll_seconds: float = Field(1.0, gt=0, le=60)

    @field_validator("webhook_hosts")
    @classmethod
    def _webhook_hosts(cls, value: str) -> str:
        AllowedHosts.parse(value)  # a typo must fail at start, not refuse every webhook later
        return value

    @model_validator(mode="after")
    def _production_secrets(self) -> Settings:
        if self.environment == "production":
            problems = self.insecure()
            if problems:
                raise InsecureSettings(
                    "DEXP_ENVIRONMENT=production refuses to start with placeholder or weak "
                    "secrets: " + "; ".join(problems)
                )
        return self

    @property
    def open_enrollment_enabled(self) -> bool:
        """Open enrollment (the shared secret): on in development, off in production unless
        DEXP_OPEN_ENROLLMENT=true."""
        if self.open_enrollment is None:
            return self.environment == "development"
        return self.open_enrollment

    def insecure(self) -> list[str]:
        """What would make these settings unfit for production (empty: nothing)."""
        problems = []
        secrets = [("DEXP_ADMIN_TOKEN", self.admin_token, DEV_ADMIN_TOKEN)]
        if self.open_enrollment_enabled:  # the shared secret is used only by open enrollment
            secrets.append(
                ("DEXP_ENROLLMENT_SECRET", self.enrollment_secret, DEV_ENROLLMENT_SECRET)
            )
        password = urlsplit(self.redis_url).password
        if password is not None and password not in DEV_REDIS_PASSWORDS:
            secrets.append(("the Redis password in DEXP_REDIS_URL", password, ""))
        for name, value, placeholder in secrets:
            if value == placeholder:
                problems.append(f"{name} is the development default; set a random secret")
            elif len(value) < MIN_SECRET_LENGTH:
                problems.append(f"{name} is shorter than {MIN_SECRET_LENGTH} characters")
            elif (guesses := guesses_log10(value)) < MIN_GUESSES_LOG10:
                problems.append(
                    f"{name} is too easy to guess (about 10^{guesses:.0f} guesses, at least "
                    f"10^{MIN_GUESSES_LOG10} required): use a random secret, e.g. "
                    "`python3 -c 'import secrets; print(secrets.token_urlsafe(32))'`"
                )
        if self.open_enrollment_enabled and self.admin_token == self.enrollment_secret:
            problems.append("DEXP_ADMIN_TOKEN and DEXP_ENROLLMENT_SECRET must differ")
        if password in DEV_REDIS_PASSWORDS:
            problems.append("the Redis password in DEXP_REDIS_URL is a development default")
        return problems


def guesses_log10(secret: str) -> float:
    """log10 of the guesses zxcvbn estimates an attacker needs (a repeat, a word, a keyboard walk
    or a date is found cheaply; a random string costs about 10 per character). Only the first 64
    characters are scored: beyond them a secret is long enough whatever it holds."""
    return float(zxcvbn(secret[:64])["guesses_log10"])


@lru_cache
def get_settings() -> Settings:
    return Settings()
