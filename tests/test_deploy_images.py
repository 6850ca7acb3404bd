"""Two compose projects on one host build and run their own images (issue 25, point 4): the image
is named from the project, so `docker compose -p other up --build` never replaces the image another
checkout's containers run. Read by `docker compose config` itself, offline (no engine needed), for
the demo's file and the production override; Swarm and Kubernetes default to what the default
project builds."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.prerequisites import missing

ROOT = Path(__file__).resolve().parents[1]
DEMO = ["docker-compose.yml"]
PRODUCTION = ["docker-compose.yml", "docker-compose.production.yml"]
REQUIRED = re.compile(r"\$\{([A-Z0-9_]+):\?")  # a variable compose refuses to run without


def images(files: list[str], project: str | None) -> set[str]:
    """The images `docker compose config` resolves for `files` under `project` (None: the files'
    own `name:`), every required variable given a placeholder."""
    docker = shutil.which("docker")
    if docker is None:
        missing("the docker CLI is missing (its compose plugin reads the files offline)")
    env = {  # the files' defaults: no project, DEXP_ or image variable from the caller's shell
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("COMPOSE_", "DEXP_")) and k not in ("BASE_IMAGE", "REDIS_IMAGE")
    }
    for name in files:
        for variable in REQUIRED.findall((ROOT / name).read_text()):
            env[variable] = "/dev/null" if variable.startswith("DEXP_TLS") else "x" * 32
    argv = [docker, "compose", *(["-p", project] if project else [])]
    for name in files:
        argv += ["-f", str(ROOT / name)]
    done = subprocess.run(
        [*argv, "config", "--images"], capture_output=True, text=True, env=env, cwd=ROOT
    )
    if done.returncode != 0 and "is not a docker command" in done.stderr:
        missing("docker's compose plugin is missing")
    assert done.returncode == 0, done.stderr
    return {line for line in done.stdout.split() if line}


@pytest.mark.parametrize("files", [DEMO, PRODUCTION], ids=["demo", "production"])
def test_two_projects_get_different_images(files: list[str]) -> None:
    one, other = images(files, "checkout-one"), images(files, "checkout-two")
    built = {"checkout-one-app:latest"} | (
        {"checkout-one-proxy:latest"} if files == PRODUCTION else set()
    )
    assert built <= one
    assert {i.replace("checkout-one", "checkout-two") for i in built} <= other
    assert not [i for i in one & other if not i.startswith("redis:")]  # only Redis is shared


def test_the_default_project_builds_what_swarm_and_kubernetes_run() -> None:
    """The stacks cannot build: they run what `docker compose build` made, dexp-app:latest by
    default (DEXP_IMAGE, or the kustomization's images:, names another)."""
    assert "dexp-app:latest" in images(DEMO, None)
    for stack in ("deploy/swarm/docker-stack.yml", "deploy/swarm/production.yml"):
        assert "${DEXP_IMAGE:-dexp-app:latest}" in (ROOT / stack).read_text(), stack
    kustomization = yaml.safe_load((ROOT / "deploy/kubernetes/kustomization.yaml").read_text())
    assert [i["name"] for i in kustomization["images"]] == ["dexp-app"]
