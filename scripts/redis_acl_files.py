#!/usr/bin/env python3
"""Write the Redis users of common/redis_acl.py into the deployment files that hold them.

    python3 scripts/redis_acl_files.py            # rewrite what differs, print each file written
    python3 scripts/redis_acl_files.py --check    # exit status 1 if a file differs, write nothing

The redis-server command of docker-compose.yml, docker-compose.production.yml and
deploy/swarm/docker-stack.yml (its memory limit, common/redis_memory.py, and its `--user`
arguments, each password from the file's variable),
and the `auth.acl.users` of deploy/kubernetes/redis-values.yaml. tests/test_deploy_compose.py and
tests/test_deploy_kubernetes.py fail while a file holds other users: change the rules in
common/redis_acl.py, then run this.
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common import redis_acl as acl  # noqa: E402
from common import redis_memory  # noqa: E402

WIDTH = 100
HEAD = [
    ["redis-server", "--dir", "/data", "--appendonly", "yes"],
    ["--appendfsync", "${DEXP_REDIS_FSYNC:-everysec}", "--protected-mode", "no"],
    # a memory limit and no eviction (common/redis_memory.py)
    redis_memory.server_args(f"${{DEXP_REDIS_MAXMEMORY:-{redis_memory.MAXMEMORY}}}"),
]
Password = Callable[[acl.RedisUser], str]


def development(user: acl.RedisUser) -> str:
    return f"${{{user.password_variable}:-{user.development_password}}}"


def required(user: acl.RedisUser) -> str:
    variable = user.password_variable
    return f"${{{variable}:?set {variable} in .env (see .env.example)}}"


def flow(words: list[str], indent: str) -> list[str]:
    """`words` as quoted YAML flow items, each line within WIDTH, continued further indented."""
    lines, line = [], indent
    for word in words:
        item = json.dumps(word) + ","
        if len(line) + len(item) + 1 > WIDTH and line.strip():
            lines.append(line.rstrip())
            line = indent + "  "
        line += item + " "
    lines.append(line.rstrip())
    return lines


def command(password: Password) -> str:
    """The redis service's `command:`, one line group per `--user` directive."""
    args = acl.server_args({name: password(acl.USERS[name]) for name in acl.SERVICES})
    groups: list[list[str]] = [[]]
    for arg in args:
        if arg == "--user" and groups[-1]:
            groups.append([])
        groups[-1].append(arg)
    lines = [line for group in HEAD + groups for line in flow(group, "      ")]
    lines[-1] = lines[-1].removesuffix(",")
    return "\n".join(["    command: [", *lines, "      ]"])


def chart_users() -> str:
    lines = []
    for user in acl.bitnami_users():
        lines += [
            f"      - username: {user['username']}",
            '        enabled: "on"',
            f"        keys: {json.dumps(user['keys'])}",
            f"        channels: {json.dumps(user['channels'])}",
            "        commands: >-",
            *("          " + part for part in textwrap.wrap(user["commands"], WIDTH - 12)),
        ]
    return "\n".join(lines)


def with_command(text: str, password: Password) -> str:
    start = text.index('    command: [\n      "redis-server"')
    end = text.index("      ]", start) + len("      ]")
    return text[:start] + command(password) + text[end:]


def with_chart_users(text: str) -> str:
    start = text.index("    users:\n") + len("    users:\n")
    end = text.index("\n\n", start)
    return text[:start] + chart_users() + text[end:]


FILES: dict[str, Callable[[str], str]] = {
    "docker-compose.yml": lambda text: with_command(text, development),
    "docker-compose.production.yml": lambda text: with_command(text, required),
    "deploy/swarm/docker-stack.yml": lambda text: with_command(text, development),
    "deploy/kubernetes/redis-values.yaml": with_chart_users,
}


def main(argv: list[str]) -> int:
    check = argv == ["--check"]
    if argv and not check:
        print(__doc__, file=sys.stderr)
        return 2
    differ = []
    for name, rewrite in FILES.items():
        path = ROOT / name
        text = path.read_text()
        if rewrite(text) != text:
            differ.append(name)
            if not check:
                path.write_text(rewrite(text))
    for name in differ:
        print(f"{name}: {'differs from' if check else 'written from'} common/redis_acl.py")
    return 1 if check and differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
