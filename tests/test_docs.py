"""The README is a newcomer's page and the docs hold the rest (issue 37, point 7): the README stays
short, every file the README and docs/ name exists, and nothing points outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
# A path of the repository as the docs name it: `docs/X.md`, deploy/proxy/README.md, scripts/test.
PATH = re.compile(
    r"(?<![\w/.-])((?:docs|deploy|scripts|examples|tests|benchmarks|sdk/js)/[\w./-]*\w)"
)
URL = re.compile(r"https?://([^/\s`)>\"',]+)")
# loopback, a bare service name, and the names reserved for examples (RFC 2606: example, example.com)
LOCAL_HOSTS = re.compile(
    r"^(localhost|127\.0\.0\.1|\[::1\]|[\w-]+)(:\d+)?$|\.example$|^example\.|"
    r"(^|\.)example\.(com|org|net)(:\d+)?$"
)


def test_the_readme_is_one_newcomers_page() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    for heading in ("## The two commands", "## Quickstart", "## Concepts", "## Where to go next"):
        assert heading in readme
    assert "scripts/test" in readme and "docker compose up --build" in readme


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_path_a_doc_names_exists(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    missing = {
        path
        for path in PATH.findall(text)
        if "*" not in path
        and not path.endswith(("/", "-"))
        and not (ROOT / path).exists()
        and not (ROOT / path.rstrip(".")).exists()
        and not list(ROOT.glob(path + "*"))
    }
    assert not missing, f"{doc.name} names files that do not exist: {sorted(missing)}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_no_doc_points_outside_the_repository(doc: Path) -> None:
    hosts = {h for h in URL.findall(doc.read_text(encoding="utf-8")) if not LOCAL_HOSTS.search(h)}
    assert not hosts, f"{doc.name} points outside the repository: {sorted(hosts)}"
