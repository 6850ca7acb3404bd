"""Settings read from files: `DEXP_X_FILE=/run/secrets/x` gives setting DEXP_X the file's content.

This is Docker's convention for secrets (the official postgres, mysql and redis images follow it):
a Docker secret is a file under /run/secrets, so a secret given this way is in no environment
variable, no `docker service inspect` output and no command line. The three services' settings
(coordinator, agent, load generator) derive from SecretFileSettings, so each of their settings may
come from a file, the secrets above all: DEXP_ADMIN_TOKEN_FILE, DEXP_ENROLLMENT_SECRET_FILE,
DEXP_REDIS_URL_FILE (deploy/swarm/production.yml).

The file's content is the value, without its trailing newline (`echo secret > file` writes one).
Setting both DEXP_X and DEXP_X_FILE is an error, as is a file that cannot be read: either names the
variable, never the content. A setting whose `<name>_file` is itself a setting (the agent's
DEXP_TICKETS_FILE, a file of tickets read again while agents wait for one) keeps its own meaning.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import model_validator
from pydantic_settings import BaseSettings

SUFFIX = "_FILE"


class SecretFileSettings(BaseSettings):
    """BaseSettings whose every setting DEXP_X may be given as a file named by DEXP_X_FILE."""

    @model_validator(mode="before")
    @classmethod
    def _from_files(cls, values: Any) -> Any:
        if not isinstance(values, dict):
            return values
        prefix = str(cls.model_config.get("env_prefix") or "").upper()
        environment = {name.upper(): value for name, value in os.environ.items()}
        for name, field in cls.model_fields.items():
            if field.validation_alias is not None or f"{name}_file" in cls.model_fields:
                continue
            variable = f"{prefix}{name.upper()}"
            path = environment.get(variable + SUFFIX, "")
            if not path:
                continue
            if values.get(name) not in (None, ""):
                raise ValueError(f"set {variable} or {variable}{SUFFIX}, not both")
            values[name] = read_secret(variable + SUFFIX, path)
        return values


def read_secret(variable: str, path: str) -> str:
    """The content of the file `variable` names, without its trailing newline; an error naming the
    variable and the path (never the content) if it cannot be read."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"{variable}: cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{variable}: {path} is not UTF-8 text") from None
    return text.removesuffix("\n").removesuffix("\r")
