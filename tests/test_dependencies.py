"""Every distribution the package imports directly is a declared runtime dependency: a module
that only arrives through another dependency (``yarl`` through aiohttp, ``opentelemetry.semconv``
through the SDK, ``markupsafe`` through Jinja2) disappears the day that dependency drops it,
and the container image's lock (deploy/requirements.lock) follows pyproject.toml."""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = (ROOT / "src" / "board_outbox", ROOT / "projections" / "board_outbox_projections")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _imported_modules() -> dict[str, str]:
    """Third-party module -> the first source file importing it (full dotted names, and for a
    ``from PACKAGE import name`` also ``PACKAGE.name``: a namespace package has no file)."""
    out: dict[str, str] = {}
    for folder in SOURCES:
        for path in sorted(folder.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                names: list[str] = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                for name in names:
                    top = name.split(".")[0]
                    if top in sys.stdlib_module_names or top.startswith("board_outbox"):
                        continue
                    out.setdefault(name, str(path.relative_to(ROOT)))
    return out


def _owners() -> dict[str, str]:
    """Installed module file, relative to its site directory (``yarl/__init__.py``) -> the
    distribution that installed it (read from the distributions' records: nothing imported)."""
    owners: dict[str, str] = {}
    for dist in md.distributions():
        for f in dist.files or ():
            if f.suffix == ".py" or f.suffix in (".so", ".pyd"):
                owners[f.as_posix()] = _norm(dist.metadata["Name"])
    return owners


def _owner(module: str, owners: dict[str, str]) -> str | None:
    path = module.replace(".", "/")
    for candidate in (f"{path}.py", f"{path}/__init__.py"):
        if candidate in owners:
            return owners[candidate]
    return next((d for f, d in owners.items()  # a compiled module: yarl/_quoting_c.cpython-...so
                 if f.startswith(path + ".") and f.endswith((".so", ".pyd"))), None)


def test_every_directly_imported_distribution_is_declared() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {_norm(re.split(r"[<>=!~;\[ ]", dep, maxsplit=1)[0]) for dep in project["dependencies"]}
    owners = _owners()
    used: dict[str, str] = {}
    unowned: list[str] = []
    for module, where in _imported_modules().items():
        owner = _owner(module, owners)
        if owner is not None:
            used.setdefault(owner, where)
        elif "." not in module and not any(f.startswith(module + "/") for f in owners):
            unowned.append(f"{module} ({where})")  # no distribution installed it (a namespace
            # package such as ``opentelemetry`` has no file of its own, its modules do)
    assert not unowned, f"imported, but no installed distribution holds it: {unowned}"
    assert {"pymongo", "yarl", "opentelemetry-semantic-conventions", "markupsafe"} <= set(used)
    missing = {dist: where for dist, where in used.items() if dist not in declared}
    assert not missing, f"imported but not declared in pyproject.toml's dependencies: {missing}"
