#!/usr/bin/env python3
"""The JavaScript SDK's figures, as docs/DEVICES.md quotes them: its version, the SRI hash of the
served file (for `integrity="sha384-..."`) and what it costs in bytes: the readable build
(dist/agent.js), the minified one the coordinator serves (dist/agent.min.js, made by the checked-in
esbuild's --minify in `npm run build`; scripts/test checks both are the build of src/) and that
gzipped at level 9 (what a page downloads from a server that compresses; the coordinator itself
gzips at level 6, a few bytes more). tests/test_sdk_docs.py checks that the docs quote these lines.

Usage: python3 scripts/sdk_size.py [SDK_DIR]   (default: sdk/js of this checkout)
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import sys
from pathlib import Path

DEFAULT = Path(__file__).resolve().parents[1] / "sdk" / "js"


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


def main(argv: list[str]) -> int:
    directory = Path(argv[1]) if len(argv) > 1 else DEFAULT
    for line in figures(directory):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
