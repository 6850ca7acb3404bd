"""The JavaScript SDK served by the real coordinator (coordinator/sdk.py) over real HTTP.

GET /sdk/agent.js answers the bytes of sdk/js/dist/agent.min.js with its version (package.json),
a strong ETag (304 on If-None-Match, gzip's tag included), a short Cache-Control; the versioned
path /sdk/agent-<version>.js the same bytes cached for good, any other version a 404 in JSON.
Under DEXP_CORS_ORIGINS a page on an allowed origin may import it and call CDE's report route;
another origin gets no CORS header; the dashboard keeps its exact CSP and answers no CORS.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from coordinator.dashboard.routes import SECURITY_HEADERS
from coordinator.settings import Settings

from .helpers import ThreadedCoordinator, coordinator, coordinator_settings, preflight

SDK = Path(__file__).resolve().parents[2] / "sdk" / "js"
SERVED = (SDK / "dist" / "agent.min.js").read_bytes()
VERSION = json.loads((SDK / "package.json").read_text())["version"]
IDENTITY = {"Accept-Encoding": "identity"}
ORIGIN = "https://shop.example"
STRANGER = "https://evil.example"
# The dashboard's policy as it was before the SDK was served: written out, not imported, so that a
# change to it is a change to this test too.
DASHBOARD_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)


def test_the_current_sdk_is_the_built_file_with_its_version_and_tag(client: httpx.Client) -> None:
    answer = client.get("/sdk/agent.js", headers=IDENTITY)
    assert answer.status_code == 200, answer.text
    assert answer.content == SERVED
    assert answer.headers["content-type"] == "text/javascript; charset=utf-8"
    assert answer.headers["x-dexp-sdk-version"] == VERSION
    assert answer.headers["cache-control"] == "public, max-age=300"
    assert answer.headers["x-content-type-options"] == "nosniff"
    tag = answer.headers["etag"]
    assert tag.startswith('"') and tag.endswith('"') and len(tag) > 20  # strong
    for sent in (tag, f"W/{tag}", f'"other", {tag}', "*"):
        again = client.get("/sdk/agent.js", headers={**IDENTITY, "If-None-Match": sent})
        assert again.status_code == 304 and again.content == b"", sent
        assert again.headers["etag"] == tag and again.headers["x-dexp-sdk-version"] == VERSION
    stale = client.get("/sdk/agent.js", headers={**IDENTITY, "If-None-Match": '"an-old-build"'})
    assert stale.status_code == 200 and stale.content == SERVED


def test_head_answers_the_headers_of_get_without_the_body(client: httpx.Client) -> None:
    """`HEAD /sdk/agent.js` (a CDN, a monitor, a page checking the version) answered 405 (issue 37,
    point 8): it gets GET's status and headers, the current build's and a pinned one's, no body."""
    for path in ("/sdk/agent.js", f"/sdk/agent-{VERSION}.js"):
        got = client.get(path, headers=IDENTITY)
        head = client.head(path, headers=IDENTITY)
        assert head.status_code == 200, (path, head.status_code, head.text)
        assert head.content == b""
        for name in ("etag", "content-type", "cache-control", "x-dexp-sdk-version"):
            assert head.headers[name] == got.headers[name], name
        assert head.headers["content-length"] == str(len(SERVED))
    assert client.head("/sdk/agent-0.0.0-none.js").status_code == 404


def test_the_sdk_is_gzipped_on_the_wire_with_its_own_tag(client: httpx.Client) -> None:
    plain = client.get("/sdk/agent.js", headers=IDENTITY).headers["etag"]
    with client.stream("GET", "/sdk/agent.js", headers={"Accept-Encoding": "gzip"}) as answer:
        wire = b"".join(answer.iter_raw())
        headers = answer.headers
    assert headers["content-encoding"] == "gzip"
    assert gzip.decompress(wire) == SERVED
    # compressed once at level 9: the figure docs/DEVICES.md quotes is what goes on the wire
    assert len(wire) == len(gzip.compress(SERVED, 9, mtime=0)) < len(SERVED) / 2
    identity = client.get("/sdk/agent.js", headers=IDENTITY)
    assert "content-encoding" not in identity.headers and identity.content == SERVED
    assert "Accept-Encoding" in headers["vary"]
    assert headers["etag"] == plain[:-1] + '-gzip"'  # another representation, another tag
    again = client.get("/sdk/agent.js", headers={"If-None-Match": headers["etag"]})
    assert again.status_code == 304 and again.headers["etag"] == headers["etag"]


def test_a_pinned_version_is_immutable_and_another_is_a_json_404(client: httpx.Client) -> None:
    pinned = client.get(f"/sdk/agent-{VERSION}.js", headers=IDENTITY)
    assert pinned.status_code == 200 and pinned.content == SERVED
    assert pinned.headers["cache-control"] == "public, max-age=31536000, immutable"
    assert pinned.headers["x-dexp-sdk-version"] == VERSION
    assert pinned.headers["etag"] == client.get("/sdk/agent.js", headers=IDENTITY).headers["etag"]
    for path in ("/sdk/agent-0.0.9.js", f"/sdk/agent-{VERSION}-beta.js", "/sdk/agent.min.js"):
        missing = client.get(path)
        assert missing.status_code == 404, path
        assert missing.headers["content-type"] == "application/json", path
        assert "x-dexp-sdk-version" not in missing.headers
    detail = client.get("/sdk/agent-0.0.9.js").json()["detail"]
    assert "'0.0.9'" in detail and f"/sdk/agent-{VERSION}.js" in detail


def test_the_sdk_directory_is_a_setting_checked_at_start(redis_url: str, tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="DEXP_SDK_DIR"):
        Settings(sdk_dir=str(tmp_path))  # no build there
    (tmp_path / "dist").mkdir()
    (tmp_path / "dist" / "agent.min.js").write_bytes(b"export const version = '7.0.0';\n")
    (tmp_path / "package.json").write_text('{"name": "@dexp/agent", "version": "7.0.0"}')
    with coordinator(coordinator_settings(redis_url, sdk_dir=str(tmp_path))) as other:
        answer = httpx.get(f"{other.url}/sdk/agent-7.0.0.js", headers=IDENTITY, trust_env=False)
    assert answer.status_code == 200
    assert answer.content == b"export const version = '7.0.0';\n"
    assert answer.headers["x-dexp-sdk-version"] == "7.0.0"


# -- CORS -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cors_server(redis_url: str) -> Iterator[ThreadedCoordinator]:
    with coordinator(coordinator_settings(redis_url, cors_origins=ORIGIN)) as running:
        yield running


@pytest.fixture
def cors(cors_server: ThreadedCoordinator, clean_redis: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=cors_server.url, timeout=10.0, trust_env=False) as http:
        yield http


def test_an_allowed_origin_may_import_the_sdk_and_report(cors: httpx.Client) -> None:
    for path in ("/sdk/agent.js", f"/sdk/agent-{VERSION}.js"):
        answer = cors.get(path, headers={"Origin": ORIGIN})
        assert answer.status_code == 200 and answer.content == SERVED
        assert answer.headers["access-control-allow-origin"] == ORIGIN, path
        assert "Origin" in answer.headers["vary"]
        assert "ETag" in answer.headers["access-control-expose-headers"]
    answer = preflight(cors, "/v1/experiments/web/report", "POST", ORIGIN)
    assert answer.status_code == 200, answer.text
    assert answer.headers["access-control-allow-origin"] == ORIGIN
    assert "POST" in answer.headers["access-control-allow-methods"]
    # the report itself (no token here: 401) names the origin, so the page can read the error
    refused = cors.post("/v1/experiments/web/report", json={"arm": 0}, headers={"Origin": ORIGIN})
    assert refused.status_code == 401
    assert refused.headers["access-control-allow-origin"] == ORIGIN
    # the SDK is only read: no preflight for another method
    assert preflight(cors, "/sdk/agent.js", "POST", ORIGIN).status_code == 405


def test_no_cors_for_another_origin_and_the_dashboard_csp_is_unchanged(cors: httpx.Client) -> None:
    answer = cors.get("/sdk/agent.js", headers={"Origin": STRANGER})
    assert answer.status_code == 200  # the bytes are public; a browser refuses them to the page
    assert "access-control-allow-origin" not in answer.headers
    refused = preflight(cors, "/v1/experiments/web/report", "POST", STRANGER)
    assert refused.status_code == 405 and "access-control-allow-origin" not in refused.headers
    dashboard = cors.get("/dashboard", headers={"Origin": ORIGIN})
    assert dashboard.status_code == 200
    assert dashboard.headers["content-security-policy"] == DASHBOARD_CSP
    assert SECURITY_HEADERS["Content-Security-Policy"] == DASHBOARD_CSP
    assert not any(name.startswith("access-control-") for name in dashboard.headers)
    assert preflight(cors, "/dashboard", "GET", ORIGIN).status_code == 405
