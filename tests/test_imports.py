"""The intra-package import graph of margindist is acyclic (module-level imports only).

Imports inside functions are deliberate late imports (optional dependencies, heavy modules)
and are not counted; every ``import`` / ``from ... import`` statement at module level is,
including those under a module-level ``if`` / ``try``.
"""

import ast
from pathlib import Path

import margindist

ROOT = Path(margindist.__file__).resolve().parent
PACKAGE = "margindist"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _module_level(tree: ast.Module):
    """Import statements at module level (descending into if / try / with, not into defs)."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, (ast.If, ast.Try, ast.With)) or type(node).__name__ == "TryStar":
            for name in ("body", "orelse", "finalbody"):
                stack.extend(getattr(node, name, []))
            for handler in getattr(node, "handlers", []):
                stack.extend(handler.body)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph() -> dict:
    """module -> set of margindist modules it imports at module level."""
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        edges = set()
        for node in _module_level(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                src = _resolve(name, is_package, node)
                targets = [f"{src}.{a.name}" if f"{src}.{a.name}" in modules else src for a in node.names]
            edges |= {t for t in targets if t in modules and t != name}
        graph[name] = edges
    return graph


def find_cycle(graph: dict):
    """One cycle as a list of modules (first == last), or None."""
    state, path = {}, []

    def visit(node):
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_graph_covers_the_package():
    graph = import_graph()
    assert PACKAGE in graph and f"{PACKAGE}.experiments.registry" in graph
    assert f"{PACKAGE}.experiments.stats" in graph[f"{PACKAGE}.experiments.reports"]


def test_a_cycle_is_found():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)
