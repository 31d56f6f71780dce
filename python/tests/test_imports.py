"""The client's modules import each other without a circle (issue 28).

Every import statement counts, including those under ``if TYPE_CHECKING:`` and inside functions:
a circle hidden from the interpreter still ties the modules' designs together, and the next
runtime import along it fails with a half-initialised module. Importing a module alone in a fresh
interpreter would prove little here, since ``import wmrl_client.x`` runs the package's
``__init__`` first and so always imports in one order; the static graph sees every order.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import wmrl_client

PACKAGE = Path(wmrl_client.__file__).parent


def module_name(root: Path, path: Path) -> str:
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module → the modules of the same package it imports (every import statement)."""
    paths = {module_name(root, p): p for p in sorted(root.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for mod, path in paths.items():
        pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                edges.update(a.name for a in node.names if a.name in paths)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    target = ".".join([*base, node.module] if node.module else base)
                else:
                    target = node.module or ""
                if target not in paths:
                    continue
                # `from . import contract` names a module; `from .records import Rollout` a member.
                subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in paths]
                edges.update(subs if len(subs) == len(node.names) else [*subs, target])
        edges.discard(mod)
        graph[mod] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle as [a, b, ..., a], or [] when the graph has none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str]:
        state[m] = 1
        path.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                return [*path[path.index(n) :], n]
            if n not in state and (found := visit(n)):
                return found
        path.pop()
        state[m] = 2
        return []

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return []


def write_package(root: Path, files: dict[str, str]) -> Path:
    pkg = root / "pkg"
    for name, text in files.items():
        f = pkg / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    return pkg


@pytest.mark.parametrize(
    ("files", "want"),
    [
        ({"__init__.py": "", "a.py": "from .b import X\n", "b.py": "Y = 1\n"}, []),
        (
            {
                "__init__.py": "",
                "a.py": "from .b import X\n",
                "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import Y\n",
            },
            ["pkg.a", "pkg.b", "pkg.a"],
        ),
        (
            {"__init__.py": "from .a import f\n", "a.py": "def f():\n    from pkg import g\n"},
            ["pkg", "pkg.a", "pkg"],
        ),
        (
            {
                "__init__.py": "",
                "sub/__init__.py": "",
                "sub/x.py": "from .. import y\n",
                "y.py": "from .sub import x\n",
            },
            ["pkg.sub.x", "pkg.y", "pkg.sub.x"],
        ),
        ({"__init__.py": "", "sub/__init__.py": "", "sub/x.py": "from ..y import Z\n", "y.py": "import pkg.z\n"}, []),
    ],
    ids=["no-circle", "type-checking-circle", "function-level-circle", "subpackage-circle", "chain"],
)
def test_find_cycle(tmp_path: Path, files: dict[str, str], want: list[str]) -> None:
    assert find_cycle(import_graph(write_package(tmp_path, files))) == want


def test_client_has_no_import_circle() -> None:
    graph = import_graph(PACKAGE)
    assert "wmrl_client.stream" in graph and "wmrl_client.step" in graph["wmrl_client.stream"]
    assert find_cycle(graph) == []
