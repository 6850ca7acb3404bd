"""The store's Lua scripts and their Python call table agree: each script's header names its
inputs (`local meta_key = KEYS[1]`, `local agent_id = ARGV[1]`, `{unpack(KEYS, n)}` for a tail of
keys), coordinator.store.scripts.SCRIPTS lists the same names in the same order, and no line below
a header reads KEYS[n] or ARGV[n]: a call built from names cannot misorder the inputs."""

from __future__ import annotations

import re

import pytest

from coordinator.store.scripts import LUA, SCRIPTS

INPUT = re.compile(r"^local (\w+) = (KEYS|ARGV)\[(\d+)\]")
REST = re.compile(r"^local (\w+) = \{unpack\((KEYS|ARGV), (\d+)\)\}")
POSITIONAL = re.compile(r"\b(KEYS|ARGV)\b")


def header(lua: str) -> tuple[list[str], str | None, list[str], list[str]]:
    """The names of a script's KEYS, its tail of keys (or None) and its ARGV, from its first lines
    (comments, then the `local name = KEYS[n]` lines, comments between them allowed), and the
    lines below the header."""
    keys: list[str] = []
    args: list[str] = []
    rest: str | None = None
    lines = lua.splitlines()
    at = 0
    seen = False
    for at, line in enumerate(lines):  # noqa: B007 (the body starts where the loop stops)
        if line.startswith("--") or (not line.strip() and not seen):
            continue
        if match := INPUT.match(line):
            name, table, index = match.groups()
            names = keys if table == "KEYS" else args
            assert rest is None or table == "ARGV", f"KEYS[{index}] after the tail of keys"
            assert int(index) == len(names) + 1, f"{name}: {table}[{index}] out of order"
            names.append(name)
        elif match := REST.match(line):
            name, table, index = match.groups()
            assert table == "KEYS" and int(index) == len(keys) + 1, f"{name}: tail out of order"
            rest = name
        else:
            break
        seen = True
    return keys, rest, args, lines[at:]


def scripts() -> list[str]:
    return sorted(SCRIPTS)


@pytest.mark.parametrize("name", scripts())
def test_the_header_names_the_inputs_of_the_call_table(name: str) -> None:
    inputs = SCRIPTS[name]
    keys, rest, args, _ = header((LUA / inputs.file).read_text())
    assert keys == list(inputs.keys), f"{inputs.file}: KEYS"
    assert rest == inputs.rest_keys, f"{inputs.file}: the tail of KEYS"
    assert args == list(inputs.args), f"{inputs.file}: ARGV"
    assert set(inputs.optional) <= set(args[len(args) - len(inputs.optional) :]), "optional: last"


@pytest.mark.parametrize("name", scripts())
def test_no_line_below_the_header_reads_inputs_by_position(name: str) -> None:
    inputs = SCRIPTS[name]
    *_, body = header((LUA / inputs.file).read_text())
    code = [line.split("--", 1)[0] for line in body]
    positional = [line for line in code if POSITIONAL.search(line)]
    assert not positional, f"{inputs.file} reads KEYS or ARGV below its header: {positional}"


def test_every_script_is_in_the_table_and_helpers_read_no_input() -> None:
    """A .lua file is a script of the table or a helper prepended to some (local functions,
    which take their inputs as parameters)."""
    files = {p.name for p in LUA.glob("*.lua")}
    run = {inputs.file for inputs in SCRIPTS.values()}
    helpers = {h for inputs in SCRIPTS.values() for h in inputs.helpers}
    assert files == run | helpers and not run & helpers
    for helper in helpers:
        code = [line.split("--", 1)[0] for line in (LUA / helper).read_text().splitlines()]
        assert not any(POSITIONAL.search(line) for line in code), helper


def test_the_header_parser_sees_a_disagreement() -> None:
    """The checks above fail on what they are for: a misordered, a missing and a positional input."""
    swapped = "-- a script\nlocal b = KEYS[2]\nlocal a = KEYS[1]\nreturn a\n"
    with pytest.raises(AssertionError, match="out of order"):
        header(swapped)
    keys, rest, args, body = header("local a = KEYS[1]\nlocal x = ARGV[1]\nreturn KEYS[2]\n")
    assert (keys, rest, args) == (["a"], None, ["x"])
    assert POSITIONAL.search(body[0])
    tail = header("local a = KEYS[1]\nlocal rest = {unpack(KEYS, 2)}\nlocal x = ARGV[1]\n")
    assert tail[:3] == (["a"], "rest", ["x"])
    with pytest.raises(AssertionError, match="tail out of order"):
        header("local a = KEYS[1]\nlocal rest = {unpack(KEYS, 3)}\n")
