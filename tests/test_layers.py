"""The import layers ARCHITECTURE.md declares, checked on the source (issue 10): adapters depend
only on the domain and the ports, and nothing outside ``mongo/`` imports the driver."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "src" / "board_outbox"
# what an adapter package may import from board_outbox (besides its own package)
ADAPTER_MAY = {"domain", "errors", "validation", "ports", "clock", "backoff", "bounds",
               "outbox_transitions"}
ADAPTERS = ("memory", "mongo", "launchers")
DRIVER = ("pymongo", "bson", "motor")
# modules outside mongo/ allowed to reach the driver: tooling that starts or probes a server
DRIVER_OK = {"wireserver.py"}


def imports(path: Path) -> list[tuple[str, int]]:
    """(absolute dotted module, line) for every import in ``path``."""
    mod_parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if mod_parts[-1] == "__init__":
        mod_parts.pop()
    out: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                keep = len(mod_parts) - node.level + (1 if path.name == "__init__.py" else 0)
                base = ".".join(mod_parts[:keep])
                if node.module is None:  # from .. import x: each name is a module
                    out += [(f"{base}.{a.name}", node.lineno) for a in node.names]
                    continue
                target = f"{base}.{node.module}"
            else:
                target = node.module or ""
            out.append((target, node.lineno))
    return out


def sources(*under: str) -> list[Path]:
    return sorted(p for u in under for p in (PKG / u).rglob("*.py"))


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_adapters_import_only_the_domain_and_the_ports(adapter: str) -> None:
    bad = []
    for path in sources(adapter):
        for target, line in imports(path):
            parts = target.split(".")
            if parts[0] != "board_outbox" or len(parts) < 2 or parts[1] == adapter:
                continue
            if parts[1] not in ADAPTER_MAY:
                bad.append(f"{path.relative_to(PKG)}:{line} imports {target}")
    assert bad == []


def test_only_the_mongo_adapter_imports_the_driver() -> None:
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG)
        if rel.parts[0] == "mongo" or str(rel) in DRIVER_OK:
            continue
        for target, line in imports(path):
            if target.split(".")[0] in DRIVER:
                bad.append(f"{rel}:{line} imports {target}")
    assert bad == []


def test_the_checker_sees_relative_imports() -> None:
    """The scan must resolve ``from ..runtime import x`` to board_outbox.runtime, or the tests
    above could pass by not seeing anything."""
    found = {t for t, _ in imports(PKG / "memory" / "__init__.py")}
    assert "board_outbox.ports" in found
    found = {t for t, _ in imports(PKG / "mongo" / "outbox.py")}
    assert "board_outbox.outbox_transitions" in found and "pymongo" in {t.split(".")[0] for t in found}
