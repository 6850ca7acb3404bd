"""docs/DEVICES.md's figures of the JavaScript SDK are the current build's: the lines that
`scripts/sdk_size.py` prints (version, sha384 integrity, sizes) stand verbatim in the section "In a
web page (JavaScript)", every hash and versioned URL there is the current one, and the hash is the
SRI of the file the coordinator serves. A rebuilt SDK without updated docs fails here."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SDK = ROOT / "sdk" / "js"
DOCS = (ROOT / "docs" / "DEVICES.md").read_text(encoding="utf-8")


def section(title: str) -> str:
    start = DOCS.index(f"\n## {title}\n")
    end = DOCS.index("\n## ", start + 1)
    return DOCS[start:end]


def test_the_docs_quote_the_figures_of_the_current_build() -> None:
    printed = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "sdk_size.py")],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.splitlines()
    assert len(printed) == 6, printed
    web = section("In a web page (JavaScript)")
    for line in printed:
        assert line in web, (
            f"docs/DEVICES.md does not say {line!r}: run scripts/sdk_size.py --update-docs"
        )
    # the hash is the served file's SRI, and the only one the docs give
    served = (SDK / "dist" / "agent.min.js").read_bytes()
    sri = "sha384-" + base64.b64encode(hashlib.sha384(served).digest()).decode()
    assert f"integrity: {sri}" in printed
    assert set(re.findall(r"sha384-[A-Za-z0-9+/=]+", DOCS)) == {sri}
    version = json.loads((SDK / "package.json").read_text())["version"]
    assert set(re.findall(r"/sdk/agent-([^/\s\"]+)\.js", DOCS)) == {version}
    assert "### Quickstart: a page that is one agent" in web  # run by test_sdk_browser.py


def test_the_web_section_follows_the_python_quickstart() -> None:
    titles = re.findall(r"^## (.+)$", DOCS, re.M)
    assert titles.index("In a web page (JavaScript)") == titles.index("Quickstart") + 1
