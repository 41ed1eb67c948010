"""The house's one rule on imports: rooms point down, never up, never round.

    tools/  ->  backends/  ->  engines/  ->  algorithms/  ->  model/

A module of a room may import its own room and any room below it; ``mpicoll/__init__.py`` and
``__main__.py`` are the front of the house and may import any room; nothing inside the package
imports ``tools`` except ``tools`` itself.  Imports are read from the source (``ast``, every
``import`` and ``from ... import`` anywhere in a module, function bodies included), so a lazy
import inside a function counts as much as one at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "mpicoll"
#: the rooms, top first: a room may import those after it in this list, never those before
ROOMS = ("tools", "backends", "engines", "algorithms", "model")


def _module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, package: Path) -> set[str]:
    """Every ``mpicoll...`` module ``path`` imports (relative imports resolved)."""
    name = _module_name(path, package)
    is_pkg = path.name == "__init__.py"
    here = name.split(".") if is_pkg else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "mpicoll")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.split(".")[0] != "mpicoll":
                continue
            for a in node.names:  # `from . import x`: x is a module or a name of mod
                sub = f"{mod}.{a.name}"
                found.add(sub if _exists(sub, package) else mod)
    return found


def _exists(module: str, package: Path) -> bool:
    path = package.parent.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def room_of(module: str) -> str | None:
    """The room of ``mpicoll.<room>...``, or None for the front (``mpicoll``, ``__main__``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ROOMS else None


def wrong_way_edges(package: Path) -> list[str]:
    """``a -> b`` for every import that points up (or sideways out of the rooms' order)."""
    problems = []
    for path in sorted(package.rglob("*.py")):
        src = _module_name(path, package)
        src_room = room_of(src)
        for target in sorted(imports_of(path, package)):
            dst_room = room_of(target)
            if src_room is None:
                continue  # the front of the house may import any room
            if dst_room is None:
                if target == "mpicoll":
                    problems.append(f"{src} -> {target} (a room imports the package front)")
                continue
            if ROOMS.index(dst_room) < ROOMS.index(src_room):
                problems.append(f"{src} -> {target} ({src_room} may not import {dst_room})")
    return problems


def cycles(package: Path) -> list[list[str]]:
    """Import cycles between the package's modules (each as the list of modules on it)."""
    graph: dict[str, set[str]] = {}
    for path in package.rglob("*.py"):
        graph[_module_name(path, package)] = set()
    for path in package.rglob("*.py"):
        src = _module_name(path, package)
        graph[src] = {t for t in imports_of(path, package) if t in graph and t != src}
    # a package's __init__ importing its own submodules is not a cycle of design: drop edges
    # from a submodule to the package that contains it
    for src, targets in graph.items():
        graph[src] = {t for t in targets if not src.startswith(t + ".")}
    found: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for t in sorted(graph[node]):
            if state.get(t) == 1:
                found.append([*stack[stack.index(t):], t])
            elif t not in state:
                visit(t)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def test_every_room_exists() -> None:
    for room in ROOMS:
        assert (PACKAGE / room / "__init__.py").is_file(), f"mpicoll/{room}/ is missing"
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py",
                                                                          "__main__.py"))
    assert not loose, f"modules outside the rooms: {loose}"


def test_imports_point_down() -> None:
    assert wrong_way_edges(PACKAGE) == []


def test_no_import_cycles() -> None:
    assert cycles(PACKAGE) == []


@pytest.mark.parametrize(
    ("room", "module", "line", "expected"),
    [
        ("algorithms", "bad.py", "from ..backends import env\n",
         "algorithms may not import backends"),
        ("engines", "bad.py", "def f():\n    from ..tools import bench\n",
         "engines may not import tools"),
        ("model", "bad.py", "import mpicoll.engines.sim\n", "model may not import engines"),
        ("backends", "bad.py", "from .. import p2p\n", "a room imports the package front"),
    ],
)
def test_a_planted_wrong_way_import_is_found(tmp_path: Path, room: str, module: str,
                                             line: str, expected: str) -> None:
    """The checker itself: a copy of the rooms with one planted upward import fails."""
    pkg = tmp_path / "mpicoll"
    for r in ROOMS:
        (pkg / r).mkdir(parents=True)
        (pkg / r / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from .tools import x\n")
    (pkg / room / module).write_text(line)
    edges = wrong_way_edges(pkg)
    assert edges
    assert all(expected in e for e in edges), edges


def test_a_planted_cycle_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "mpicoll"
    (pkg / "engines").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "engines" / "__init__.py").write_text("")
    (pkg / "engines" / "a.py").write_text("from . import b\n")
    (pkg / "engines" / "b.py").write_text("def f():\n    from .a import g\n")
    assert cycles(pkg) == [["mpicoll.engines.a", "mpicoll.engines.b", "mpicoll.engines.a"]]
