"""common/ imports without a circle: every import counts, a function's and a TYPE_CHECKING one
too, since an import hidden in a function still ties the two modules together."""

from __future__ import annotations

import ast
from pathlib import Path

COMMON = Path(__file__).resolve().parent.parent / "common"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(COMMON.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(node: ast.Import | ast.ImportFrom, importer: str, is_package: bool) -> list[str]:
    """The modules one import statement names: `from p import m` names p.m when m is a module
    (the caller keeps the names that are modules of common/), else p."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = importer.split(".") if is_package else importer.split(".")[:-1]
        package = package[: len(package) - node.level + 1]
        base = ".".join(package + ([node.module] if node.module else []))
    return [f"{base}.{alias.name}" for alias in node.names] + [base]


def import_graph() -> dict[str, set[str]]:
    """Each module of common/ to the modules of common/ it imports anywhere in its text."""
    paths = {module_name(path): path for path in COMMON.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = imported(node, name, path.name == "__init__.py")
                submodules = [m for m in names[:-1] if m in paths]
                targets.update(submodules or [m for m in names if m in paths])
        targets.discard(name)
        graph[name] = targets
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of imports, as the modules along it, or None (depth-first search)."""
    done: set[str] = set()
    for start in sorted(graph):
        if start in done:
            continue
        path: list[str] = [start]
        on_path = {start}
        stack = [iter(sorted(graph[start]))]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                stack.pop()
                done.add(path[-1])
                on_path.discard(path.pop())
            elif nxt in on_path:
                return [*path[path.index(nxt) :], nxt]
            elif nxt not in done:
                path.append(nxt)
                on_path.add(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


def test_the_graph_sees_imports_in_functions_and_type_checking_blocks() -> None:
    graph = import_graph()
    assert "common.simulation.config" in graph["common.certificate"]  # under TYPE_CHECKING
    assert "common.simulation.fast" in graph["common.simulation.runner"]  # inside a function
    assert "common.simulation.cde_fast" in graph["common.simulation.fast"]  # from pkg import mod


def test_find_cycle_finds_a_circle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_common_has_no_import_cycle() -> None:
    assert find_cycle(import_graph()) is None
