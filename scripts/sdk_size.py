#!/usr/bin/env python3
"""The JavaScript SDK's figures, as docs/DEVICES.md quotes them: its version, the SRI hash of the
served file (for `integrity="sha384-..."`) and what it costs in bytes: the readable build
(dist/agent.js), the minified one the coordinator serves (dist/agent.min.js, made by the checked-in
esbuild's --minify in `npm run build`; scripts/test checks both are the build of src/) and that
gzipped at level 9 (what a page downloads: coordinator/sdk.py sends that very form to a client
that accepts gzip). tests/test_sdk_docs.py checks that the docs quote these lines.

Usage: python3 scripts/sdk_size.py [--update-docs] [SDK_DIR]   (default: sdk/js of this checkout)
--update-docs also writes the figures into docs/DEVICES.md: the block of these lines, every sha384
hash and every versioned URL /sdk/agent-<version>.js (after `npm run build`, for a new SDK).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "sdk" / "js"
DOCS = ROOT / "docs" / "DEVICES.md"


def figures(directory: Path) -> list[str]:
    """The lines to print (and for the docs to quote), one figure each."""
    version = json.loads((directory / "package.json").read_text(encoding="utf-8"))["version"]
    readable = (directory / "dist" / "agent.js").read_bytes()
    minified = (directory / "dist" / "agent.min.js").read_bytes()
    sri = base64.b64encode(hashlib.sha384(minified).digest()).decode()
    gzipped = gzip.compress(minified, compresslevel=9, mtime=0)
    return [
        f"version: {version}",
        f"pinned URL: /sdk/agent-{version}.js",
        f"integrity: sha384-{sri}",
        f"unminified (dist/agent.js): {len(readable):,} bytes",
        f"minified (dist/agent.min.js, served): {len(minified):,} bytes",
        f"minified and gzipped (level 9): {len(gzipped):,} bytes",
    ]


def update_docs(lines: list[str], docs: Path = DOCS) -> None:
    """Writes `lines` into the docs' ```text block that starts with "version: ", and their hash
    and version wherever the docs give a sha384 hash or a versioned URL."""
    text = docs.read_text(encoding="utf-8")
    block = re.compile(r"^```text\nversion: .*?^```$", re.M | re.S)
    if len(block.findall(text)) != 1:
        raise SystemExit(f"{docs}: not exactly one ```text block of the SDK's figures")
    text = block.sub(lambda _: "```text\n" + "\n".join(lines) + "\n```", text)
    sri = lines[2].removeprefix("integrity: ")
    version = lines[0].removeprefix("version: ")
    text = re.sub(r"sha384-[A-Za-z0-9+/=]+", sri, text)
    text = re.sub(r"/sdk/agent-[^/\s\"]+\.js", f"/sdk/agent-{version}.js", text)
    docs.write_text(text, encoding="utf-8")


def main(argv: list[str]) -> int:
    update = "--update-docs" in argv[1:]
    arguments = [a for a in argv[1:] if a != "--update-docs"]
    directory = Path(arguments[0]) if arguments else DEFAULT
    lines = figures(directory)
    for line in lines:
        print(line)
    if update:
        update_docs(lines)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
