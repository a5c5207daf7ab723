"""The import layers, checked on the source by folder (issue 19; ARCHITECTURE.md).

    model -> ports -> engine | adapters -> sdk | testing -> service -> surface

A module imports only from layers below its own, or from its own folder (engine and adapters
are peers: neither imports the other). The package's import graph has no circles, and only the
Mongo adapter (plus the wire-server launcher) imports the driver. The built-in projections
under the top-level ``projections/`` import only the public SDK, and nothing under ``src/``
imports them.

Inside the engine, the rooms (sub-packages) stand in an order of their own, ``ENGINE_ROOMS``:

    telemetry | flow -> tail | handlers -> work -> upkeep

A room imports only from rooms of a lower rank, or from itself (rooms of one rank are peers:
neither imports the other), so no import runs back up and the rooms form no circle; every
module of the engine sits in a room.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "src" / "board_outbox"
PROJECTIONS = ROOT / "projections"
# rank of each top-level part of the package: lower ranks never import higher ones
RANK = {"model": 0, "ports": 1, "engine": 2, "adapters": 2, "sdk": 3, "testing": 3, "producer": 3,
        "service": 4, "surface": 5, "__init__": 6, "__main__": 6,
        # the version (its one source, read by the build): a leaf any layer may read
        "__about__": 0}
# rank of each room (sub-package) of the engine: lower ranks never import higher ones
ENGINE_ROOMS = {"telemetry": 0, "flow": 0, "tail": 1, "handlers": 1, "work": 2, "upkeep": 3}
DRIVER = ("pymongo", "bson", "motor")
DRIVER_OK = ("adapters/mongo/", "service/wireserver.py")


def module_of(path: Path, base: Path) -> list[str]:
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return parts


def imports(path: Path, base: Path | None = None) -> list[tuple[str, int]]:
    """(absolute dotted module, line) for every import in ``path`` (TYPE_CHECKING ones too)."""
    mod_parts = module_of(path, PKG.parent if base is None else base)
    out: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                keep = len(mod_parts) - node.level + (1 if path.name == "__init__.py" else 0)
                base_mod = ".".join(mod_parts[:keep])
                if node.module is None:  # from .. import x: each name is a module
                    out += [(f"{base_mod}.{a.name}", node.lineno) for a in node.names]
                    continue
                target = f"{base_mod}.{node.module}"
            else:
                target = node.module or ""
                if target == "board_outbox":  # from board_outbox import x: x may be a module
                    out += [(f"board_outbox.{a.name}", node.lineno) for a in node.names]
                    continue
            out.append((target, node.lineno))
    return out


def package_sources() -> list[Path]:
    return sorted(p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)


def top(parts: list[str]) -> str:
    """The layer part of a module path inside board_outbox (``model``, ``sdk``...)."""
    return parts[1] if len(parts) > 1 else "__init__"


def upward_imports() -> list[str]:
    bad = []
    for path in package_sources():
        mine = top(["board_outbox", *module_of(path, PKG)]) if path != PKG / "__init__.py" else "__init__"
        for target, line in imports(path):
            parts = target.split(".")
            if parts[0] != "board_outbox" or len(parts) < 2:
                continue
            theirs = parts[1]
            if theirs == mine:
                continue
            if theirs not in RANK:
                bad.append(f"{path.relative_to(PKG)}:{line} imports {target} (no layer)")
            elif mine not in RANK or RANK[theirs] >= RANK[mine]:
                bad.append(f"{path.relative_to(PKG)}:{line} imports {target} "
                           f"({mine} may not import {theirs})")
    return bad


def circles() -> list[list[str]]:
    """Strongly connected components of more than one module in the package's import graph."""
    mods = {".".join(["board_outbox", *module_of(p, PKG)]): p for p in package_sources()}
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        for target, _ in imports(p):
            # an import of a name from a module: the longest known module prefix
            parts = target.split(".")
            for i in range(len(parts), 0, -1):
                cand = ".".join(parts[:i])
                if cand in mods:
                    if cand != m and not m.startswith(cand + ".") and cand != "board_outbox":
                        graph[m].add(cand)
                    break
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def engine_rooms_of(path: Path) -> list[tuple[str, int]]:
    """(room, line) for every import of another module of the engine in ``path``; the room of
    ``from board_outbox.engine import x`` is ``x``."""
    out: list[tuple[str, int]] = []
    for target, line in imports(path):
        parts = target.split(".")
        if parts[:2] == ["board_outbox", "engine"] and len(parts) > 2:
            out.append((parts[2], line))
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "board_outbox.engine":
            out += [(a.name, node.lineno) for a in node.names]
    return out


def engine_arrows_back_up() -> list[str]:
    """Imports between the engine's rooms that do not run down ``ENGINE_ROOMS``, and modules that
    sit in no room."""
    bad = []
    engine = PKG / "engine"
    for path in package_sources():
        if engine not in path.parents:
            continue
        rel = path.relative_to(engine)
        if rel == Path("__init__.py"):
            continue
        mine = rel.parts[0] if len(rel.parts) > 1 else ""
        if mine not in ENGINE_ROOMS:
            bad.append(f"engine/{rel} sits in no room of ENGINE_ROOMS")
            continue
        for theirs, line in engine_rooms_of(path):
            if theirs == mine:
                continue
            if theirs not in ENGINE_ROOMS:
                bad.append(f"engine/{rel}:{line} imports engine.{theirs} (no room)")
            elif ENGINE_ROOMS[theirs] >= ENGINE_ROOMS[mine]:
                bad.append(f"engine/{rel}:{line} imports engine.{theirs} "
                           f"({mine} may not import {theirs})")
    return bad


def test_every_module_sits_in_a_layer() -> None:
    stray = [str(p.relative_to(PKG)) for p in package_sources()
             if top(["board_outbox", *module_of(p, PKG)]) not in RANK]
    assert stray == []


def test_no_module_imports_a_layer_above_its_own() -> None:
    assert upward_imports() == []


def test_the_package_has_no_import_circles() -> None:
    assert circles() == []


def test_the_engine_rooms_import_only_rooms_below_their_own() -> None:
    assert engine_arrows_back_up() == []


def test_the_engine_rooms_are_the_ranked_ones() -> None:
    """A room added or renamed takes its place in ``ENGINE_ROOMS``; a room gone leaves it."""
    rooms = {p.parent.name for p in (PKG / "engine").glob("*/__init__.py")}
    assert rooms == set(ENGINE_ROOMS)


def test_the_engine_check_sees_an_arrow_back_up_and_a_module_outside_the_rooms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The room check must flag an import up (absolute, relative or ``from engine import x``), one
    between peers and a flat module, or the test above could pass by seeing nothing."""
    fake = tmp_path / "board_outbox"
    for room in ("", "flow", "tail", "handlers", "work"):
        (fake / "engine" / room).mkdir(parents=True, exist_ok=True)
        (fake / "engine" / room / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("")
    (fake / "engine" / "flow" / "a.py").write_text("from ..work.b import c\n")
    (fake / "engine" / "tail" / "d.py").write_text("from board_outbox.engine import handlers\n")
    (fake / "engine" / "work" / "b.py").write_text(
        "from board_outbox.engine.flow.a import e\nfrom board_outbox.engine.tail import d\n")
    (fake / "engine" / "flat.py").write_text("")
    monkeypatch.setattr(__import__(__name__, fromlist=["PKG"]), "PKG", fake)
    assert sorted(b.split(" ")[0] for b in engine_arrows_back_up()) == [
        "engine/flat.py", "engine/flow/a.py:1", "engine/tail/d.py:1"]


def test_only_the_mongo_adapter_imports_the_driver() -> None:
    bad = []
    for path in package_sources():
        rel = str(path.relative_to(PKG))
        if rel.startswith(DRIVER_OK):
            continue
        for target, line in imports(path):
            if target.split(".")[0] in DRIVER:
                bad.append(f"{rel}:{line} imports {target}")
    assert bad == []


def test_the_checker_sees_relative_and_upward_imports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scan must resolve relative imports and flag an upward one, or the tests above could
    pass by seeing nothing."""
    found = {t for t, _ in imports(PKG / "adapters" / "mongo" / "outbox" / "claim.py")}
    assert "pymongo" in {t.split(".")[0] for t in found}
    fake = tmp_path / "board_outbox"
    (fake / "model").mkdir(parents=True)
    (fake / "service").mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "model" / "__init__.py").write_text("")
    (fake / "service" / "__init__.py").write_text("")
    (fake / "model" / "x.py").write_text("from ..service.y import w\n")
    (fake / "service" / "y.py").write_text("from board_outbox.model.x import z\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["PKG"]), "PKG", fake)
    assert [b.split(" ")[0] for b in upward_imports()] == ["model/x.py:1"]
    assert circles() == [["board_outbox.model.x", "board_outbox.service.y"]]


def test_builtin_projections_import_only_the_sdk_and_nothing_imports_them() -> None:
    srcs = sorted(PROJECTIONS.rglob("*.py"))
    assert srcs, "the top-level projections/ package is missing"
    bad = []
    for path in srcs:
        for target, line in imports(path, PROJECTIONS):
            parts = target.split(".")
            if parts[0] == "board_outbox" and target != "board_outbox.sdk":
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    for path in package_sources():
        for target, line in imports(path):
            if target.split(".")[0] == "board_outbox_projections":
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert bad == []
