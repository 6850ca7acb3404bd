"""Secrets from files (clients/secret_files.py) and Redis's users from an ACL file
(common/redis_acl.py's acl_file): what deploy/swarm/production.yml gives the services as Docker
secrets. The settings are read from real files; the ACL file is loaded by a real redis-server."""

from __future__ import annotations

import hashlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from pydantic import ValidationError
from redis.backoff import NoBackoff
from redis.retry import Retry

from agent.settings import AgentSettings
from common import redis_acl as acl
from coordinator.settings import Settings
from load_generator.settings import LoadSettings
from tests.services.helpers import free_port, redis_server_binary

TOKEN = "Zq3v-8Jd_Xk2pLw9Rt5Yb7Nc1Hm4Fs6G"  # random-looking: production accepts it
PASSWORD = "Vb6-Tn2_Qw8Lk4Zr9Xp3Hs7Dj5Fm1Gc0"


def login(port: int, user: str | None = None, password: str | None = None) -> redis.Redis:
    """A client of the test's redis-server that does not retry a refused login."""
    return redis.Redis(port=port, username=user, password=password, retry=Retry(NoBackoff(), 0))


def secret_file(directory: Path, name: str, content: str) -> Path:
    path = directory / name
    path.write_text(content + "\n")  # as `echo secret > file` writes it
    return path


def test_a_production_coordinator_reads_its_secrets_from_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DEXP_ADMIN_TOKEN_FILE and DEXP_REDIS_URL_FILE give the coordinator its secrets, the
    trailing newline dropped; production's checks apply to them as to any value."""
    url = f"redis://coordinator:{PASSWORD}@redis:6379/0"
    monkeypatch.setenv("DEXP_ADMIN_TOKEN_FILE", str(secret_file(tmp_path, "token", TOKEN)))
    monkeypatch.setenv("DEXP_REDIS_URL_FILE", str(secret_file(tmp_path, "url", url)))
    settings = Settings(environment="production")
    assert (settings.admin_token, settings.redis_url) == (TOKEN, url)
    monkeypatch.setenv("DEXP_ADMIN_TOKEN_FILE", str(secret_file(tmp_path, "weak", "a" * 20)))
    with pytest.raises(ValidationError, match="DEXP_ADMIN_TOKEN is too easy to guess"):
        Settings(environment="production")


@pytest.mark.parametrize("settings_class", [Settings, AgentSettings, LoadSettings])
def test_every_service_reads_its_redis_url_from_a_file(
    settings_class: type[Settings | AgentSettings | LoadSettings],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = f"redis://agent:{PASSWORD}@redis:6379/0"
    monkeypatch.setenv("DEXP_REDIS_URL_FILE", str(secret_file(tmp_path, "url", url)))
    assert settings_class().redis_url == url


def test_a_value_and_its_file_or_an_unreadable_file_are_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Either error names the variables and the path, never the secret."""
    monkeypatch.setenv("DEXP_ADMIN_TOKEN_FILE", str(secret_file(tmp_path, "token", TOKEN)))
    monkeypatch.setenv("DEXP_ADMIN_TOKEN", "another-token-of-the-environment")
    with pytest.raises(ValidationError, match="set DEXP_ADMIN_TOKEN or DEXP_ADMIN_TOKEN_FILE") as e:
        Settings()
    assert TOKEN not in str(e.value) and "another-token" not in str(e.value)
    monkeypatch.delenv("DEXP_ADMIN_TOKEN")
    missing = tmp_path / "gone"
    monkeypatch.setenv("DEXP_ADMIN_TOKEN_FILE", str(missing))
    with pytest.raises(ValidationError, match=f"DEXP_ADMIN_TOKEN_FILE: cannot read {missing}"):
        Settings()
    monkeypatch.setenv("DEXP_ADMIN_TOKEN_FILE", str(tmp_path))  # a directory
    with pytest.raises(ValidationError, match="DEXP_ADMIN_TOKEN_FILE: cannot read"):
        Settings()


def test_the_agents_tickets_file_keeps_its_meaning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DEXP_TICKETS_FILE is a setting of its own (a file read again while agents wait for a
    ticket), not DEXP_TICKETS read once from a file: both may be set."""
    tickets = secret_file(tmp_path, "tickets", "# none yet\nticket.demo.abc")
    monkeypatch.setenv("DEXP_TICKETS_FILE", str(tickets))
    monkeypatch.setenv("DEXP_TICKETS", "ticket.demo.first")
    settings = AgentSettings()
    assert (settings.tickets, settings.tickets_file) == ("ticket.demo.first", str(tickets))
    assert settings.ticket_list() == ["ticket.demo.first", "ticket.demo.abc"]


@pytest.fixture
def redis_with_acl_file(tmp_path: Path) -> Iterator[tuple[int, dict[str, str], str]]:
    """A redis-server whose users come from acl_file: its port, the passwords, the file."""
    passwords = {user: f"{user}-{PASSWORD}" for user in acl.SERVICES}
    users = tmp_path / "users.acl"
    users.write_text(acl.acl_file(passwords))
    port = free_port()
    server = subprocess.Popen(
        [redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--dir", str(tmp_path), "--aclfile", str(users)],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                login(port).ping()
            except redis.AuthenticationError:
                break  # up, and asking for a user
            except redis.ConnectionError:
                assert server.poll() is None and time.monotonic() < deadline, "no redis-server"
                time.sleep(0.05)
        yield port, passwords, users.read_text()
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_redis_takes_the_services_users_from_the_acl_file(
    redis_with_acl_file: tuple[int, dict[str, str], str],
) -> None:
    """The ACL file (a Docker secret in Swarm) holds each password's SHA-256, not the password;
    redis-server loads it: each service's user logs in with its password and may do what
    common/redis_acl.py allows and no more, and nobody logs in without a user."""
    port, passwords, text = redis_with_acl_file
    for password in passwords.values():
        assert password not in text
        assert f"#{hashlib.sha256(password.encode()).hexdigest()}" in text
    with pytest.raises(redis.AuthenticationError):
        login(port).ping()
    with pytest.raises(redis.AuthenticationError):
        login(port, acl.AGENT, passwords[acl.COORDINATOR]).ping()
    coordinator, agent, generator = (
        login(port, user, passwords[user])
        for user in (acl.COORDINATOR, acl.AGENT, acl.LOAD_GENERATOR)
    )
    assert coordinator.hset("dexp:{demo}:credentials", "a", "b") == 1
    with pytest.raises(redis.exceptions.NoPermissionError):
        agent.hget("dexp:{demo}:credentials", "a")
    assert generator.set("dexp:{demo}:load-generator", "run") is True
    with pytest.raises(redis.exceptions.NoPermissionError):
        generator.flushall()
    for client in (coordinator, agent, generator):
        client.close()
