"""Suite-wide rule: under CI no test is skipped. A skip there means a prerequisite CI should have
provided is missing (tests/prerequisites.py), or a test that depends on another one's data; either
way the suite would be green without having checked what it claims, so the skip becomes a failure
that names its reason."""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.prerequisites import under_ci

# Every coordinator the tests start (in process or as a subprocess, which inherits this
# environment) publishes each vote at once, as most tests read votes back right after sending
# them. tests/services/test_timing.py tries the batches and the cadence (the defaults, 10 and 5 s),
# and the Docker stacks run with the defaults.
os.environ.setdefault("DEXP_PUBLISH_BATCH", "1")
os.environ.setdefault("DEXP_PUBLISH_CADENCE_SECONDS", "0")
# Leases last a day unless a test asks otherwise (tests/services/test_leases.py, the cluster's):
# a lease taken early in a long test (the fuzz enrolls agents with `lease: true`) must not lapse
# in the middle of it and change Redis under a check that a refused request changed nothing.
os.environ.setdefault("DEXP_AGENT_LEASE_SECONDS", "86400")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.skipped and not hasattr(report, "wasxfail") and under_ci():
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped under CI, where every test must run: {reason}"


def tree_commit() -> str:
    """The commit of the tree the tests run from: its short hash, and "+ uncommitted changes"
    when the tree differs from it (untracked files included: a new test counts)."""

    def git(*args: str) -> str:
        root = Path(__file__).resolve().parent.parent
        try:
            done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
        except OSError:  # no git here (an image without it)
            return ""
        return done.stdout.strip() if done.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD") or "unknown (not a git checkout)"
    return f"{head} + uncommitted changes" if git("status", "--porcelain") else head


def pytest_report_header(config: pytest.Config) -> str:
    """Every run says the commit it ran on, above what it prints (the figures that tests print
    with -s, for the docs, among them)."""
    return f"commit: {config.stash[COMMIT]}"


COMMIT = pytest.StashKey[str]()

# Tests that share something outside the process run on one xdist worker, one after the other
# (`scripts/test` runs two workers with --dist loadgroup): the Docker stacks (fixed compose
# project names, one swarm) and the Redis Cluster of tests/cluster (started once per worker).
GROUPS = {"e2e/test_compose": "docker", "e2e/test_swarm": "docker", "cluster/": "cluster"}


@pytest.hookimpl(trylast=True)  # after junitxml's, which opens the report
def pytest_configure(config: pytest.Config) -> None:
    """The commit, also a property of the JUnit report (`--junitxml`), so that the times
    scripts/suite_times.py prints say which code they measured. The controller writes the report
    (xdist's workers send it their results), so it records the property itself:
    `record_testsuite_property` does not reach the report from a worker."""
    config.stash[COMMIT] = tree_commit()
    if hasattr(config, "workerinput"):  # an xdist worker: the controller writes the report
        return
    from _pytest.junitxml import xml_key

    xml = config.stash.get(xml_key, None)
    if xml is not None:
        xml.add_global_property("commit", config.stash[COMMIT])


@pytest.fixture(scope="module", autouse=True)
def docker_alone(request: pytest.FixtureRequest) -> Iterator[None]:
    """Under xdist, a module of Docker tests holds the machine alone: its containers' health checks
    and start-up deadlines assume the cores are theirs (with another worker's tests beside them,
    the compose stacks did not come up in time). It takes an exclusive lock for the whole module;
    every other test takes a shared one for its own duration (`shared_with_docker`), so the other
    worker waits between two tests. Without xdist, nothing runs beside them and no lock is taken."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None or request.node.get_closest_marker("docker") is None:
        yield
        return
    with _machine_lock(request.config, fcntl.LOCK_EX):
        yield


@pytest.fixture(autouse=True)
def shared_with_docker(request: pytest.FixtureRequest) -> Iterator[None]:
    if "PYTEST_XDIST_WORKER" not in os.environ or request.node.get_closest_marker("docker"):
        yield
        return
    with _machine_lock(request.config, fcntl.LOCK_SH):
        yield


@contextlib.contextmanager
def _machine_lock(config: pytest.Config, mode: int) -> Iterator[None]:
    """flock on a file the workers share (xdist gives them one test run uid)."""
    run = getattr(config, "workerinput", {}).get("testrunuid", "serial")
    path = Path(tempfile.gettempdir()) / f"dexp-tests-{run}.lock"
    with open(path, "a") as handle:
        fcntl.flock(handle, mode)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = item.path.as_posix()
        group = next((g for key, g in GROUPS.items() if f"tests/{key}" in path), None)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
