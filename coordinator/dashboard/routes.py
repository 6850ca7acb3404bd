"""Routes of the dashboard: the page at /dashboard and /dashboard/, and its assets.

The files are package data (pyproject: "dashboard/static/*"), found with importlib.resources so an
installed coordinator serves the same bytes as a checkout. Only the named assets are served: no
path from the request ever reaches the file system.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import APIRouter
from starlette.exceptions import HTTPException
from starlette.responses import FileResponse

STATIC = files("coordinator.dashboard") / "static"
ASSETS = {
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
# No inline script or style and nothing from elsewhere: data drawn on the page (arm names) cannot
# run even if some code path forgot to escape it. Styles set through the CSSOM (element.style) are
# not inline styles for CSP, so the bars' widths need no 'unsafe-inline'.
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ]
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",  # frame-ancestors 'none' for browsers that predate it
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cache-Control": "no-cache",  # revalidate: an upgraded coordinator's page is seen at once
}

router = APIRouter(prefix="/dashboard", include_in_schema=False)


def _file(name: str, media_type: str) -> FileResponse:
    return FileResponse(str(STATIC / name), media_type=media_type, headers=SECURITY_HEADERS)


@router.get("")
@router.get("/")
async def page() -> FileResponse:
    """The page itself; both spellings, since a redirect would be one more round trip."""
    return _file("index.html", "text/html; charset=utf-8")


@router.get("/static/{name}")
async def asset(name: str) -> FileResponse:
    media_type = ASSETS.get(name)
    if media_type is None:
        raise HTTPException(status_code=404, detail="no such dashboard asset")
    return _file(name, media_type)
