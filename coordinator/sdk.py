"""The JavaScript agent SDK (@dexp/agent), served at GET /sdk/agent.js for web pages to import.

The file is the SDK's minified build, sdk/js/dist/agent.min.js (its readable twin, dist/agent.js,
is the npm package's entry and what Node and the agreement tests load), with its version from
sdk/js/package.json. Both are found in DEXP_SDK_DIR, by default the sdk/js directory beside this
package: the checkout, or /app/sdk/js in the image (the Dockerfile copies them there). The file is
read once, when the app is made: a coordinator serves the SDK it started with.

/sdk/agent.js is the current version, cached briefly and revalidated with its strong ETag (a page
gets an upgraded coordinator's SDK within CURRENT_MAX_AGE); /sdk/agent-<version>.js pins one
version, cached for good (immutable); another version is a 404 in JSON. Pages on other origins
import it under CORS (coordinator/cors.py, DEXP_CORS_ORIGINS); gzip applies (coordinator/
compression.py's tag suffix for the compressed form): compressed once, when the file is read, at
gzip's level 9 (GZIP_LEVEL), so a client asking for it a million times costs no CPU, and the
gzipped size scripts/sdk_size.py prints is the size a page downloads.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.exceptions import HTTPException

from coordinator.caching import GZIP_SUFFIX, matching

log = logging.getLogger("dexp.coordinator.sdk")

DEFAULT_DIR = Path(__file__).resolve().parents[1] / "sdk" / "js"
SERVED = Path("dist") / "agent.min.js"
PACKAGE = Path("package.json")
CURRENT_MAX_AGE = 300  # seconds: /sdk/agent.js follows an upgrade this late at most
PINNED_MAX_AGE = 365 * 86_400  # a versioned file never changes
VERSION_HEADER = "X-Dexp-Sdk-Version"
GZIP_LEVEL = 9  # compressed once: the smallest form costs nothing per request
MEDIA_TYPE = "text/javascript; charset=utf-8"


def sdk_dir(configured: str) -> Path:
    """DEXP_SDK_DIR, or the sdk/js directory beside the coordinator package when it is empty."""
    return Path(configured) if configured else DEFAULT_DIR


def check_dir(configured: str) -> None:
    """A DEXP_SDK_DIR that is set must hold the build: a typo would silently serve nothing."""
    if not configured:
        return
    for name in (SERVED, PACKAGE):
        if not (Path(configured) / name).is_file():
            raise ValueError(
                f"DEXP_SDK_DIR: {configured!r} has no {name} (the directory sdk/js of the "
                "repository, with its dist/ built by `npm run build`)"
            )


@dataclass(frozen=True)
class Build:
    """The served file, its version, its strong tag (a digest of the bytes) and its gzip form."""

    version: str
    body: bytes
    etag: str
    gzipped: bytes

    @classmethod
    def read(cls, directory: Path) -> Build:
        body = (directory / SERVED).read_bytes()
        version = json.loads((directory / PACKAGE).read_text(encoding="utf-8"))["version"]
        tag = f'"{hashlib.sha256(body).hexdigest()[:32]}"'
        return cls(str(version), body, tag, gzip.compress(body, GZIP_LEVEL, mtime=0))

    @property
    def gzip_etag(self) -> str:
        return self.etag[:-1] + GZIP_SUFFIX + '"'  # another representation, another strong tag

    @classmethod
    def find(cls, configured: str) -> Build | None:
        """The build in DEXP_SDK_DIR; None, with a warning, where the default place has none (a
        coordinator installed from a wheel without the checkout: /sdk answers 404)."""
        directory = sdk_dir(configured)
        try:
            return cls.read(directory)
        except (OSError, ValueError, KeyError) as exc:
            if configured:
                raise
            log.warning("no JavaScript SDK in %s (%s): /sdk/agent.js answers 404", directory, exc)
            return None


def answer(request: Request, build: Build, max_age: str) -> Response:
    headers = {
        "Cache-Control": max_age,
        "Vary": "Accept-Encoding",
        VERSION_HEADER: build.version,
        "X-Content-Type-Options": "nosniff",
    }
    tag = matching(request.headers.get("if-none-match"), build.etag)
    if tag is not None:
        return Response(status_code=304, headers={**headers, "ETag": tag})
    if accepts_gzip(request.headers.get("accept-encoding")):
        headers |= {"ETag": build.gzip_etag, "Content-Encoding": "gzip"}
        return Response(build.gzipped, media_type=MEDIA_TYPE, headers=headers)
    return Response(build.body, media_type=MEDIA_TYPE, headers={**headers, "ETag": build.etag})


def accepts_gzip(value: str | None) -> bool:
    """Accept-Encoding names gzip: the test the GZip middleware makes for every other answer."""
    return "gzip" in (value or "").lower()


def served(request: Request) -> Build:
    build: Build | None = request.app.state.sdk
    if build is None:
        raise HTTPException(
            status_code=404,
            detail="this coordinator has no JavaScript SDK build (DEXP_SDK_DIR: the directory "
            "sdk/js with dist/agent.min.js and package.json)",
        )
    return build


router = APIRouter(prefix="/sdk", include_in_schema=False)


# GET and HEAD: a page, a CDN or a monitor may ask for the headers alone (the version, the ETag)
@router.api_route("/agent.js", methods=["GET", "HEAD"])
async def current(request: Request) -> Response:
    return answer(request, served(request), f"public, max-age={CURRENT_MAX_AGE}")


@router.api_route("/agent-{version}.js", methods=["GET", "HEAD"])
async def pinned(request: Request, version: str) -> Response:
    build = served(request)
    if version != build.version:
        raise HTTPException(
            status_code=404,
            detail=f"no SDK version {version!r} here: this coordinator serves {build.version} "
            f"(/sdk/agent-{build.version}.js)",
        )
    return answer(request, build, f"public, max-age={PINNED_MAX_AGE}, immutable")
