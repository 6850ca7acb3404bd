"""One settings object per service, documented in one table (docs/SETTINGS.md), and every setting
reaches its service through `docker compose up` (issue 37, point 3: `DEXP_CORS_ORIGINS=...
docker compose up` gave no CORS header, because docker-compose.yml did not pass it on). Read
offline against the three settings classes, so a new setting that the table or the compose file
forgets fails here before any image is built."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import AliasChoices, TypeAdapter
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

from agent.settings import AgentSettings
from coordinator.settings import Settings
from load_generator.settings import LoadSettings
from tests.prerequisites import missing

ROOT = Path(__file__).resolve().parents[1]
CLASSES: dict[str, type[BaseSettings]] = {
    "coordinator": Settings,
    "agent": AgentSettings,
    "load_generator": LoadSettings,
}
# How the table's "service" column names each service.
TABLE_NAMES = {"coordinator": "coordinator", "agent": "agent", "load_generator": "load generator"}
# What the stack sets itself (its own network, ports, volume and Redis users), not a choice.
STACK = {"DEXP_REDIS_URL", "DEXP_COORDINATOR_URL", "DEXP_HOST", "DEXP_PORT", "DEXP_STATE_DIR"}
# Agents' settings under a name of their own, since they share the environment with the coordinator.
RENAMED = {
    ("agent", "DEXP_EXPERIMENT"): "DEXP_AGENT_EXPERIMENTS",
    ("agent", "DEXP_LOG_LEVEL"): "DEXP_AGENT_LOG_LEVEL",
    ("agent", "DEXP_STATUS_SECONDS"): "DEXP_AGENT_STATUS_SECONDS",
    ("agent", "DEXP_LEAVE_ON_STOP"): "DEXP_AGENT_LEAVE_ON_STOP",
    ("coordinator", "DEXP_REWARDS"): "DEXP_EXPERIMENT_REWARDS",  # not the load generator's
}
# The demo's own defaults, which the table gives as "compose: ...".
DEMO_DEFAULTS = {
    ("agent", "AGENTS_PER_REPLICA"): "16",
    ("agent", "DEXP_EXPERIMENT"): "demo",  # the simulated agents join the demo only
    ("agent", "DEXP_LEAVE_ON_STOP"): "true",  # a replica scaled down leaves no agent behind
    ("agent", "DEXP_LOG_LEVEL"): "warning",
}
NOT_ENVIRONMENT = {("load_generator", "DEXP_JSON_OUTPUT")}  # the --json flag
PASS_THROUGH = re.compile(r"^\$\{(?P<name>\w+)(?::-|-)(?P<default>[^}]*)\}$")


def variable(settings: type[BaseSettings], name: str, field: FieldInfo) -> str:
    if isinstance(field.validation_alias, AliasChoices):
        return str(field.validation_alias.choices[0])
    return f"{settings.model_config.get('env_prefix', '')}{name}".upper()


def settings_of(service: str) -> list[tuple[str, FieldInfo]]:
    settings = CLASSES[service]
    return [
        (variable(settings, name, field), field)
        for name, field in settings.model_fields.items()
        if (service, variable(settings, name, field)) not in NOT_ENVIRONMENT
    ]


def compose_environment(service: str) -> dict[str, Any]:
    loaded = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))
    return dict(loaded["services"][service]["environment"])


def table() -> dict[str, list[str]]:
    """Each documented variable -> the services its rows name."""
    rows: dict[str, list[str]] = {}
    for line in (ROOT / "docs" / "SETTINGS.md").read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 4 or not cells[0].startswith("`"):
            continue
        for name in re.findall(r"`([A-Z_<>]+)`", cells[0]):
            rows.setdefault(name, []).append(cells[1])
    return rows


@pytest.mark.parametrize("service", CLASSES)
def test_compose_passes_every_setting_on_with_the_classes_default(service: str) -> None:
    environment = compose_environment(service)
    wrong = []
    for name, field in settings_of(service):
        if name in STACK:
            assert name in environment, f"{service}: the stack sets {name}"
            continue
        value = environment.get(name, "missing")
        if value is None:  # `DEXP_X:`: passed on when set, else the class's default
            continue
        match = PASS_THROUGH.match(str(value))
        outer = RENAMED.get((service, name), name)
        if not match or match["name"] != outer:
            wrong.append(f"{name}: {value!r} (expected ${{{outer}:-default}} or a bare {name}:)")
            continue
        expected = DEMO_DEFAULTS.get((service, name))
        if expected is not None:
            ok = match["default"] == expected
        elif field.default is None:
            ok = False  # an empty value is not "unset": pass it on bare
        else:
            parsed = TypeAdapter(field.annotation).validate_python(match["default"])
            ok = parsed == field.default
        if not ok:
            wrong.append(f"{name}: compose default {match['default']!r}, class {field.default!r}")
    assert not wrong, f"docker-compose.yml's {service} does not pass on: " + "; ".join(wrong)


@pytest.mark.parametrize("service", CLASSES)
def test_the_settings_table_documents_every_setting(service: str) -> None:
    rows = table()
    missing = [
        name
        for name, _ in settings_of(service)
        if not any(
            TABLE_NAMES[service] in services or services == "all" for services in rows.get(name, [])
        )
    ]
    assert not missing, f"docs/SETTINGS.md has no row for {service}'s {missing}"


def test_docker_compose_config_carries_each_setting_from_the_shell() -> None:
    """The issue's replay, without starting containers: `DEXP_X=... docker compose config` (what
    `docker compose up` would run) gives every service each of its settings as the shell set it."""
    if shutil.which("docker") is None:
        missing("the docker CLI (docker compose config)")
    sentinel = "sentinel-37"
    shell = {**os.environ}
    wanted: dict[str, set[str]] = {}
    for service in CLASSES:
        for name, _ in settings_of(service):
            if name not in STACK:
                shell[RENAMED.get((service, name), name)] = sentinel
                wanted.setdefault(service, set()).add(name)
    run = subprocess.run(
        ["docker", "compose", "-f", "docker-compose.yml", "config", "--format", "json"],
        cwd=ROOT,
        env=shell,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if run.returncode != 0 and "is not a docker command" in run.stderr:
        missing("docker compose")
    assert run.returncode == 0, run.stderr
    config = json.loads(run.stdout)["services"]
    lost = {
        service: sorted(n for n in names if config[service]["environment"].get(n) != sentinel)
        for service, names in wanted.items()
    }
    assert not any(lost.values()), f"docker compose up would not pass on: {lost}"
