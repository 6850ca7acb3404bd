#!/usr/bin/env python3
"""Create the Docker secrets of deploy/swarm/production.yml, on a Swarm manager.

    python3 scripts/swarm_secrets.py --tls-cert fullchain.pem --tls-key privkey.pem [--prefix dexp]

Makes a fresh admin token and three Redis passwords (secrets.token_urlsafe(32) each), and creates,
each secret's content given to `docker secret create NAME -` on its standard input (so no secret
is ever on a command line or written to disk here):

    PREFIX_admin_token              the coordinator's DEXP_ADMIN_TOKEN
    PREFIX_redis_users              Redis's ACL file: its users (common/redis_acl.py), passwords as
                                    SHA-256 digests only
    PREFIX_redis_coordinator_url    DEXP_REDIS_URL of the coordinator (redis://coordinator:...)
    PREFIX_redis_generator_url      DEXP_REDIS_URL of the load generator
    PREFIX_redis_agent_url          DEXP_REDIS_URL of the agents
    PREFIX_tls_certificate          the proxy's certificate chain (PEM), from --tls-cert
    PREFIX_tls_key                  its private key (PEM), from --tls-key
    PREFIX_tickets                  the agents' tickets: none yet (a comment line), until the
                                    operator issues some (deploy/swarm/README.md, "Production")

Prints the admin token on standard output, and nothing else: keep it (a password manager), it is
the one copy outside the swarm. Exit status 1 if a secret of that name exists already (secrets are
immutable: rotate by creating a set under another prefix and deploying with DEXP_SECRETS=it).
"""

from __future__ import annotations

import argparse
import secrets
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common import redis_acl as acl  # noqa: E402

NO_TICKETS = "# no tickets yet: issue some, make them a secret, deploy with DEXP_TICKETS_SECRET\n"
URL_SECRETS = {
    acl.COORDINATOR: "redis_coordinator_url",
    acl.LOAD_GENERATOR: "redis_generator_url",
    acl.AGENT: "redis_agent_url",
}


def contents(
    admin_token: str, passwords: dict[str, str], cert: bytes, key: bytes
) -> dict[str, bytes]:
    """Each secret's name (without the prefix) and content."""
    return {
        "admin_token": admin_token.encode(),
        "redis_users": acl.acl_file(passwords).encode(),
        **{
            URL_SECRETS[user]: acl.url(user, passwords[user], "redis", 6379).encode()
            for user in acl.SERVICES
        },
        "tls_certificate": cert,
        "tls_key": key,
        "tickets": NO_TICKETS.encode(),
    }


def create(name: str, content: bytes, prefix: str) -> None:
    """`docker secret create` with the content on stdin, labelled with the set's prefix."""
    result = subprocess.run(
        ["docker", "secret", "create", "--label", f"dexp.secrets={prefix}", name, "-"],
        input=content,
        capture_output=True,
        timeout=60,
    )
    if result.returncode != 0:
        sys.exit(f"swarm_secrets: {name}: {result.stderr.decode(errors='replace').strip()}")
    print(f"created {name}", file=sys.stderr)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prefix", default="dexp", help="the secrets' names start with PREFIX_")
    parser.add_argument("--tls-cert", type=Path, required=True, help="certificate chain (PEM)")
    parser.add_argument("--tls-key", type=Path, required=True, help="its private key (PEM)")
    args = parser.parse_args(argv)
    admin_token = secrets.token_urlsafe(32)
    passwords = {user: secrets.token_urlsafe(32) for user in acl.SERVICES}
    made = contents(admin_token, passwords, args.tls_cert.read_bytes(), args.tls_key.read_bytes())
    for name, content in made.items():
        create(f"{args.prefix}_{name}", content, args.prefix)
    print(admin_token)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
