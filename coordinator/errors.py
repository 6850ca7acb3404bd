"""Domain errors, each with the HTTP status it maps to (one place: app.py's handler)."""

from __future__ import annotations


class CoordinatorError(Exception):
    status = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(CoordinatorError):
    status = 404


class Conflict(CoordinatorError):
    status = 409


class Unauthorized(CoordinatorError):
    status = 401


class Forbidden(CoordinatorError):
    status = 403


class Invalid(CoordinatorError):
    status = 422
