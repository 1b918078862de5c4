"""The folders are the layers: core is pure, imports flow one way, no circles."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "langchain_s2b"
CORE_MODULES = sorted(
    f"langchain_s2b.core.{p.stem}" for p in (PACKAGE / "core").glob("*.py") if p.stem != "__init__"
)
FORBIDDEN_IN_CORE = (
    "faiss",
    "langchain_s2b.store",
    "langchain_s2b.cli",
    "langchain_s2b.evaluation",
    "langchain_s2b.retriever",
    "langchain_core.stores",
    "langchain_core.vectorstores",
    "langchain_community",
    "langchain_classic",
    "sqlalchemy",
    "redis",
)
# What each layer may import from the package (besides itself); top level = the rest.
ALLOWED = {
    "langchain_s2b.core": ("langchain_s2b.core",),
    "langchain_s2b.store": ("langchain_s2b.core", "langchain_s2b.store"),
}


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def package_imports(path: Path) -> list[tuple[str, bool]]:
    """``(imported module, at module level)`` for every import of our package in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = {id(node) for node in tree.body}
    for node in tree.body:  # ``if TYPE_CHECKING:`` imports run only under the type checker
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            top.update(id(child) for child in node.body)
    known = {module_name(p) for p in PACKAGE.rglob("*.py")}
    out = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module
                for a in node.names
            ]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            if name.startswith("langchain_s2b"):
                out.append((name, id(node) in top))
    return out


def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        name = module_name(path)
        edges[name] = {dep for dep, _ in package_imports(path) if dep != name}
    return edges


@pytest.mark.parametrize("module", CORE_MODULES)
def test_core_module_loads_no_faiss_and_no_store(module: str) -> None:
    code = (
        "import importlib, sys\n"
        f"importlib.import_module({module!r})\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    bad = [m for m in loaded if any(m == f or m.startswith(f + ".") for f in FORBIDDEN_IN_CORE)]
    assert bad == []


def test_core_modules_are_all_checked() -> None:
    assert len(CORE_MODULES) >= 15
    assert "langchain_s2b.core.keys" in CORE_MODULES


def test_layers_import_only_downwards() -> None:
    wrong = []
    for module, deps in graph().items():
        for layer, allowed in ALLOWED.items():
            if module == layer or module.startswith(layer + "."):
                wrong += [
                    (module, dep)
                    for dep in deps
                    if dep != "langchain_s2b" and not dep.startswith(allowed)
                ]
                wrong += [(module, dep) for dep in deps if dep == "langchain_s2b"]
    assert wrong == []


def test_no_import_circles() -> None:
    edges = graph()
    cycles = []

    def visit(node: str, stack: list[str], done: set[str]) -> None:
        if node in stack:
            cycles.append([*stack[stack.index(node) :], node])
            return
        if node in done:
            return
        for dep in sorted(edges.get(node, ())):
            if dep != "langchain_s2b":  # the package's lazy public names, never a dependency
                visit(dep, [*stack, node], done)
        done.add(node)

    done: set[str] = set()
    for module in sorted(edges):
        visit(module, [], done)
    assert cycles == []


def test_no_function_level_imports_of_the_package() -> None:
    """A lazy import of our own modules would hide a circle; there are none."""
    lazy = [
        (module_name(path), dep)
        for path in PACKAGE.rglob("*.py")
        for dep, at_top in package_imports(path)
        if not at_top
    ]
    assert lazy == []


STORE = PACKAGE / "store"
# The rooms of ``store/``, and the rooms each may import (only through their faces).
ROOMS = {
    "base": (),
    "lexical": ("base",),
    "vectors": ("base", "lexical"),
    "nodes": ("base",),
    "children": ("base", "lexical", "vectors"),
    "snapshots": ("base", "lexical", "vectors", "nodes"),
    "sqlite": ("base", "lexical", "vectors"),
}
MAX_MODULE_LINES = 520
MAX_CLASS_LINES = 420


def room_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["langchain_s2b", "store"] else None


def test_store_rooms_are_the_sub_packages() -> None:
    found = sorted(p.parent.name for p in STORE.glob("*/__init__.py"))
    assert found == sorted(ROOMS)


def test_rooms_import_lower_rooms_only_through_their_faces() -> None:
    wrong = []
    for module, deps in graph().items():
        room = room_of(module)
        if room not in ROOMS:
            continue
        for dep in deps:
            other = room_of(dep)
            if other is None or other == room:
                continue
            if other not in ROOMS[room] or dep != f"langchain_s2b.store.{other}":
                wrong.append((module, dep))
    assert wrong == []


def test_rooms_have_no_circle() -> None:
    def below(room: str) -> set[str]:
        out: set[str] = set()
        for lower in ROOMS[room]:
            out |= {lower, *below(lower)}
        return out

    assert [room for room in ROOMS if room in below(room)] == []
    edges: dict[str, set[str]] = {room: set() for room in ROOMS}
    for module, deps in graph().items():
        room = room_of(module)
        if room in ROOMS:
            edges[room] |= {r for d in deps if (r := room_of(d)) in ROOMS and r != room}
    assert [(a, b) for a in edges for b in edges[a] if a in edges[b]] == []
    assert all(edges[room] <= below(room) for room in ROOMS)


def test_each_room_has_a_docstring_and_a_face() -> None:
    for room in ROOMS:
        tree = ast.parse((STORE / room / "__init__.py").read_text(encoding="utf-8"))
        assert ast.get_docstring(tree), room
        names = [
            n.targets[0].id
            for n in tree.body
            if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)
        ]
        assert "__all__" in names, room


def test_store_modules_and_classes_stay_small() -> None:
    big = []
    for path in sorted(STORE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        name = module_name(path)
        if len(text.splitlines()) > MAX_MODULE_LINES:
            big.append((name, len(text.splitlines())))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_CLASS_LINES:
                    big.append((f"{name}.{node.name}", lines))
    assert big == []
