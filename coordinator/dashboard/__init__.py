"""The operator dashboard (GET /dashboard): static files shipped in this package, no build step.

The page reads only the public, unauthenticated GET routes of /v1/experiments, so it never needs
or holds the admin token; `routes.router` serves it under strict security headers.
"""

from coordinator.dashboard.routes import router

__all__ = ["router"]
