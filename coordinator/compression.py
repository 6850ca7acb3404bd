"""gzip for larger bodies: Starlette's GZipMiddleware's responders, with a compressed document's
strong ETag suffixed.

A device on a metered link reads the experiment's document again and again; with many arms it is
kilobytes of JSON that compress several-fold. Bodies of at least DEXP_GZIP_MIN_BYTES are compressed
for clients that accept gzip; the event stream is never buffered (Starlette leaves
text/event-stream alone). A strong ETag names one representation (RFC 9110), so a compressed
document's tag gets the suffix "-gzip" (coordinator/caching.py matches both forms).
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.middleware.gzip import GZipResponder, IdentityResponder

from coordinator.asgi import ASGIApp, Exchange, Message, Step, header
from coordinator.caching import GZIP_SUFFIX

LEVEL = 6  # zlib's default: most of level 9's gain for a fraction of its time on small JSON


class GZip(Step):
    """Starlette's GZipMiddleware as a step: its responder (gzip for a client that accepts it,
    else the identity, which still adds `Vary: Accept-Encoding` to the bodies it would compress)
    rewrites the answer on its way out, then the tag is suffixed."""

    def __init__(self, app: ASGIApp, min_bytes: int) -> None:
        super().__init__(app)
        self.min_bytes = min_bytes

    async def run(self, ex: Exchange) -> bool:
        send = ex.send

        async def tagged(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(raw=message.setdefault("headers", []))
                tag = headers.get("etag")
                gzipped = headers.get("content-encoding") == "gzip"
                strong = tag is not None and tag.startswith('"') and tag.endswith('"')
                # a body sent gzipped already (coordinator/sdk.py) carries its gzip tag
                if gzipped and tag is not None and strong and not tag.endswith(GZIP_SUFFIX + '"'):
                    headers["etag"] = tag[:-1] + GZIP_SUFFIX + '"'
            await send(message)

        responder: IdentityResponder
        if b"gzip" in (header(ex.scope, b"accept-encoding") or b""):
            responder = GZipResponder(self.app, self.min_bytes, compresslevel=LEVEL)
        else:
            responder = IdentityResponder(self.app, self.min_bytes)
        responder.send = tagged
        ex.send = responder.send_with_compression
        return False
