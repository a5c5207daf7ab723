"""The public face (issue 19, item 1): ``board_outbox.sdk`` and ``board_outbox.testing`` export
exactly their pinned ``__all__`` (an accidental addition or removal fails here), every name
resolves to a public object of board-outbox, and every example a user copies -- the guide's code,
the test suite's user plugins, the shipped notify handler, the built-in projections -- imports
board-outbox only through them."""

from __future__ import annotations

import ast
import inspect
import re
import types

import pytest

import board_outbox.sdk as sdk
import board_outbox.testing as testing
from tests.test_layers import PROJECTIONS, ROOT, imports

SDK = {
    "LAUNCH", "PROJECTION", "BatchProjection", "BoardOutboxError", "EffectError", "EffectHandler",
    "EffectRow", "EventSnapshot", "ExecutionContext", "HandlerContext", "LeaseLost", "MatchRule",
    "PermanentEffectError", "PreparingHandler", "Projection", "PushRecent", "ReadModelStore",
    "StoreUnavailable", "Subscription", "SubscriptionNotFound", "UpsertIfNewer", "matches",
}
TESTING = {"PROPERTIES", "ProjectionContract", "ProjectionContractError", "ProjectionFactory",
           "check_projection", "contract_events"}


@pytest.mark.parametrize(("module", "pinned"), [(sdk, SDK), (testing, TESTING)])
def test_the_public_names_are_exactly_the_pinned_set(module: types.ModuleType, pinned: set[str]) -> None:
    assert len(module.__all__) == len(set(module.__all__))
    assert set(module.__all__) == pinned
    # nothing else public lies around in the module for a `from ... import *` or a guess
    loose = {n for n in vars(module) if not n.startswith("_") and n not in module.__all__
             and not isinstance(vars(module)[n], types.ModuleType)}
    if module is sdk:
        assert loose <= {"annotations"}, loose


@pytest.mark.parametrize(("module", "pinned"), [(sdk, SDK), (testing, TESTING)])
def test_every_public_name_resolves_to_a_public_object(module: types.ModuleType, pinned: set[str]) -> None:
    for name in module.__all__:
        assert not name.startswith("_"), name
        obj = getattr(module, name)  # raises if it does not resolve
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert obj.__module__.startswith("board_outbox."), (name, obj.__module__)
            # not defined in (or re-exported from) a private module
            assert not any(p.startswith("_") for p in obj.__module__.split(".")), (name, obj.__module__)
            assert not obj.__name__.startswith("_"), name


def test_the_sdk_names_are_the_objects_the_service_uses() -> None:
    from board_outbox.engine.handlers import contract
    from board_outbox.model import rows

    assert sdk.HandlerContext is contract.HandlerContext
    assert sdk.ExecutionContext is contract.ExecutionContext
    assert sdk.EffectRow is rows.EffectRow and sdk.LAUNCH == "launch"


# --- every example imports board-outbox only through the public face ---------------------------------

EXAMPLES = [
    ROOT / "tests" / "support" / "user_plugins.py",
    ROOT / "src" / "board_outbox" / "surface" / "demo" / "notify.py",
    *sorted(PROJECTIONS.rglob("*.py")),
]
ALLOWED = {"board_outbox.sdk"}
ALLOWED_IN_TESTS = {"board_outbox.sdk", "board_outbox.testing"}


def _guide_blocks() -> list[tuple[int, str]]:
    text = (ROOT / "docs" / "extending.md").read_text()
    return [(text[: m.start()].count("\n") + 1, m.group(1))
            for m in re.finditer(r"```python\n(.*?)```", text, re.S)]


def _board_outbox_imports(tree: ast.AST) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.append(node.module)
    return [m for m in out if m.split(".")[0] == "board_outbox"]


def test_examples_import_board_outbox_only_through_the_sdk() -> None:
    bad = []
    for path in EXAMPLES:
        base = PROJECTIONS if path.is_relative_to(PROJECTIONS) else (
            ROOT / "src" if path.is_relative_to(ROOT / "src") else ROOT)
        found = [t for t, _ in imports(path, base) if t.split(".")[0] == "board_outbox"]
        assert found or path.name == "__init__.py", f"{path}: imports no board_outbox (scan blind?)"
        bad += [f"{path.relative_to(ROOT)} imports {t}" for t in found if t not in ALLOWED]
    blocks = _guide_blocks()
    assert len(blocks) >= 3
    for line, code in blocks:
        allowed = ALLOWED_IN_TESTS if "tests/" in code.splitlines()[0] else ALLOWED
        bad += [f"docs/extending.md:{line} imports {t}" for t in _board_outbox_imports(ast.parse(code))
                if t not in allowed]
    assert bad == []


def test_the_import_scan_sees_a_private_import() -> None:
    code = "from board_outbox.model.domain import EffectRow\nimport board_outbox.sdk\n"
    assert _board_outbox_imports(ast.parse(code)) == ["board_outbox.model.domain", "board_outbox.sdk"]
