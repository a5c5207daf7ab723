"""The docs stand with the code (issue 19).

- Every requirement id the repository cites (``M8``, ``S3``, ``M10b``...) is defined in the
  requirements table of docs/design.md, so the repository needs no outside document to read.
- Every function or class ARCHITECTURE.md names in backticks exists: a dotted name
  (``Tail.drain_tenant``, ``reading.read_batch``) or a call (``claim_any(...)``) is resolved
  against the AST of src/ and projections/; a bare CamelCase name (``GapTracker``) must be a
  class or function defined in the source tree or the test support code.
- Every path ARCHITECTURE.md and docs/*.md give in backticks exists.
- Every setting the configuration accepts has a row in docs/configuration.md.
- README.md stays short enough for a newcomer (about 12 KB).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import get_origin

import msgspec
import pytest

from board_outbox.service.config_sections import Config

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"
ARCHITECTURE = ROOT / "ARCHITECTURE.md"
CONFIGURATION = ROOT / "docs" / "configuration.md"
README = ROOT / "README.md"

# --- requirement ids -------------------------------------------------------------------------

# A letter from the requirement families, one or two digits, an optional "b" (M10b, M11b).
REQ_ID = re.compile(r"(?<![\w$#/.-])([ABCEFMOPRSUW][0-9]{1,2}b?)(?![\w])")
# Tool codes that look like ids: ruff suppressions (noqa, e.g. E731) and mypy ones (type: ignore[...]).
TOOL_CODES = re.compile(r"#\s*noqa\b[^\n]*|#\s*type:\s*ignore\[[^\]]*\]")
SCANNED_DIRS = ("src", "tests", "benchmarks", "tracing", "projections", "docs")
SCANNED_FILES = ("README.md", "ARCHITECTURE.md", "board-outbox.example.toml", "dev.sh")
SUFFIXES = {".py", ".md", ".toml", ".yaml", ".yml", ".txt", ".sh"}


def scanned_files() -> list[Path]:
    files = [ROOT / name for name in SCANNED_FILES]
    for d in SCANNED_DIRS:
        files += [p for p in sorted((ROOT / d).rglob("*"))
                  if p.is_file() and p.suffix in SUFFIXES and "__pycache__" not in p.parts]
    return files


def cited_ids(text: str) -> set[str]:
    return set(REQ_ID.findall(TOOL_CODES.sub("", text)))


def defined_ids(design: str) -> list[str]:
    """The ids in the first column of docs/design.md's requirements table."""
    section = design.split("\n## Requirements", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| ([A-Z][0-9]{1,2}b?) \|", section, flags=re.MULTILINE)


def test_the_id_scanner_sees_ids_and_ignores_tool_codes() -> None:
    undefined = "M" + "99"  # spelt in two parts so that this file does not cite it
    text = ("# M10b: re-verify (S3, O6)\nx = 1  # noqa: E731\ny: int = f()  # type: ignore[C2]\n"
            f"fenced (M8); B3 shadow; sha 0xA1, 1f3c, p99, E501, {undefined}")
    assert cited_ids(text) == {"M10b", "S3", "O6", "M8", "B3", undefined}
    assert undefined not in defined_ids(DESIGN.read_text())


def test_every_cited_requirement_id_is_defined_in_the_design_page() -> None:
    defined = defined_ids(DESIGN.read_text())
    assert len(defined) == len(set(defined)), "an id is defined twice in docs/design.md"
    missing: dict[str, list[str]] = {}
    for path in scanned_files():
        for rid in cited_ids(path.read_text(errors="replace")):
            if rid not in defined:
                missing.setdefault(rid, []).append(str(path.relative_to(ROOT)))
    assert not missing, ("requirement ids cited but not defined in docs/design.md's table: "
                         + "; ".join(f"{k} ({', '.join(v[:3])})" for k, v in sorted(missing.items())))


def test_the_design_page_defines_the_ids_the_code_leans_on() -> None:
    """A table that lost its rows would make the check above pass on nothing."""
    defined = set(defined_ids(DESIGN.read_text()))
    cited = set().union(*(cited_ids(p.read_text(errors="replace")) for p in scanned_files()
                          if p.suffix == ".py"))
    assert {"M1", "M8", "M10b", "M11b", "S1", "O4", "P2", "R1", "W2", "B3"} <= cited
    assert cited <= defined


# --- names in ARCHITECTURE.md ----------------------------------------------------------------

# Names that only exist once the worker rewrite of issue 19 (the one writer of row transitions)
# is merged. The check fails once one of them exists: then drop it from this set.
PENDING_NAMES: frozenset[str] = frozenset()
# Dotted strings in backticks that are not Python names (entry-point groups, span names).
NOT_CODE = frozenset({"board_outbox.projections", "board_outbox.handlers"})
FILE_SUFFIXES = {"py", "md", "toml", "json", "txt", "png", "yaml", "yml", "sh"}
CALL = re.compile(r"\([^()]*\)")
DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
CAMEL = re.compile(r"[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)*")


@dataclass
class Index:
    """What the source defines: modules by their last name, classes with members and bases."""

    modules: dict[str, list[set[str]]] = field(default_factory=dict)  # stem -> top-level names
    classes: dict[str, list[tuple[set[str], list[str]]]] = field(default_factory=dict)
    names: set[str] = field(default_factory=set)  # every name defined anywhere

    def add_module(self, path: Path, base: Path) -> None:
        parts = list(path.relative_to(base).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        tree = ast.parse(path.read_text())
        top: set[str] = set()
        for node in tree.body:
            top |= _bound(node)
            if isinstance(node, ast.ClassDef):
                self._add_class(node)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                self.names.add(node.attr)
        self.names |= top
        for i, part in enumerate(parts):
            self.names.add(part)
            # a package's scope also holds its subpackages and modules
            scope = top if i == len(parts) - 1 else {parts[i + 1]}
            self.modules.setdefault(part, []).append(scope)

    def _add_class(self, node: ast.ClassDef) -> None:
        members: set[str] = set()
        for item in node.body:
            members |= _bound(item)
        for sub in ast.walk(node):
            if (isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store)
                    and isinstance(sub.value, ast.Name) and sub.value.id == "self"):
                members.add(sub.attr)
        bases = [b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else ""
                 for b in node.bases]
        self.classes.setdefault(node.name, []).append((members, bases))
        self.names |= members

    def class_members(self, name: str, seen: frozenset[str] = frozenset()) -> set[str] | None:
        if name not in self.classes or name in seen:
            return None
        out: set[str] = set()
        for members, bases in self.classes[name]:
            out |= members
            for b in bases:
                out |= self.class_members(b, seen | {name}) or set()
        return out

    def resolves(self, ref: str) -> bool:
        """``a.b.c(...)``: ``a`` a module, class or any defined name; each next part a member
        of what came before (a module's top level, a class's members) when that is known, and
        after a call (whose result's type is unknown) any defined name."""
        called = "(" in ref
        parts = CALL.sub("()", ref).split(".")
        head = parts[0].removesuffix("()")
        if head not in self.names and head not in self.classes:
            return False
        scope: set[str] | None = None
        if not parts[0].endswith("()"):
            scope = self._scope(head)
        for part in parts[1:]:
            name = part.removesuffix("()")
            if scope is not None and name not in scope:
                return False
            if scope is None and name not in self.names:
                return False
            scope = None if part.endswith("()") else self._scope(name)
        return called or len(parts) > 1

    def _scope(self, name: str) -> set[str] | None:
        members = self.class_members(name)
        if members is not None:
            return members
        if name in self.modules:
            return set().union(*self.modules[name])
        return None


def _bound(node: ast.stmt) -> set[str]:
    """Names a statement binds in its scope."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, ast.Assign):
        return {t.id for t in node.targets if isinstance(t, ast.Name)}
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return {node.target.id}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    if isinstance(node, ast.If):  # TYPE_CHECKING imports, version switches
        out: set[str] = set()
        for sub in node.body + node.orelse:
            out |= _bound(sub)
        return out
    return set()


def index_of(dirs: Iterable[Path]) -> Index:
    idx = Index()
    for d in dirs:  # module names are relative to the folder: board_outbox.engine.tail.tail
        for path in sorted(d.rglob("*.py")):
            if "__pycache__" not in path.parts:
                idx.add_module(path, d)
    return idx


def code_refs(markdown: str) -> tuple[set[str], set[str]]:
    """(dotted names and calls, bare CamelCase names) in backticks that look like code."""
    dotted: set[str] = set()
    camel: set[str] = set()
    for span in re.findall(r"`([^`\n]+)`", markdown):
        span = span.strip()
        bare = CALL.sub("()", span)
        if not re.fullmatch(r"[A-Za-z_][\w.]*(?:\(\)[\w.]*)*", bare) or span in NOT_CODE:
            continue
        if "." in bare.replace("()", "") or "(" in span:
            if bare.split(".")[-1] in FILE_SUFFIXES:
                continue  # a file name: sdk.py
            dotted.add(span)
        elif CAMEL.fullmatch(span):
            camel.add(span)
    return dotted, camel


def pending(ref: str) -> bool:
    return any(p.removesuffix("()") in PENDING_NAMES for p in CALL.sub("()", ref).split("."))


@pytest.fixture(scope="module")
def source() -> Index:
    return index_of([ROOT / "src", ROOT / "projections"])


@pytest.fixture(scope="module")
def everything() -> Index:
    return index_of([ROOT / "src", ROOT / "projections", ROOT / "tests"])


def test_the_name_check_can_fail(source: Index) -> None:
    dotted, camel = code_refs(
        "`Tail.drain_tenant`, `Tail.drain_everything`, `reading.read_batch`, `reading.read_all`, "
        "`HandlerRegistry.handler(kind).execute(row, ctx)`, `run_batch(w)`, `GapTracker`, "
        "`NoSuchTracker`, `sdk.py`, `engine/work/worker.py`, `young_gap_seconds`")
    assert dotted == {"Tail.drain_tenant", "Tail.drain_everything", "reading.read_batch",
                      "reading.read_all", "HandlerRegistry.handler(kind).execute(row, ctx)",
                      "run_batch(w)"}
    assert camel == {"GapTracker", "NoSuchTracker"}
    assert [r for r in sorted(dotted) if not source.resolves(r)] == [
        "Tail.drain_everything", "reading.read_all", "run_batch(w)"]


def test_every_name_architecture_gives_exists(source: Index, everything: Index) -> None:
    dotted, camel = code_refs(ARCHITECTURE.read_text())
    assert len(dotted) > 30 and len(camel) > 20, "the scan found almost nothing: is it broken?"
    missing = sorted(r for r in dotted if not pending(r) and not source.resolves(r))
    missing += sorted(n for n in camel if n not in PENDING_NAMES
                      and n not in everything.classes and n not in everything.names)
    assert not missing, f"ARCHITECTURE.md names what the code does not define: {missing}"


PENDING_PATHS: frozenset[str] = frozenset()


def doc_paths(markdown: str) -> set[str]:
    """Paths in backticks: ``engine/tail/tail.py``, ``adapters/*/outbox/claim.py``, ``tests/harness/``."""
    return {span for span in re.findall(r"`([^`\s]+)`", markdown)
            if "/" in span and re.fullmatch(r"[\w.*/-]+", span) and not span.startswith("/")
            and (span.endswith("/") or re.search(r"\.(py|md|toml|json|txt|png|yaml|yml)$", span))}


def path_exists(span: str, page: Path = ARCHITECTURE) -> bool:
    """Relative to the repository, to the package (ARCHITECTURE's convention) or to the page."""
    bases = (ROOT, ROOT / "src" / "board_outbox", page.parent)
    return any(any(base.glob(span.rstrip("/"))) for base in bases)


def test_every_path_the_docs_give_exists() -> None:
    assert {"engine/tail/tail.py", "adapters/*/outbox/claim.py", "tests/harness/"} <= doc_paths(
        ARCHITECTURE.read_text())
    assert not path_exists("engine/run_batch.py")
    missing: list[str] = []
    for page in [ARCHITECTURE, *sorted((ROOT / "docs").glob("*.md"))]:
        missing += [f"{page.name}: {p}" for p in sorted(doc_paths(page.read_text()))
                    if p not in PENDING_PATHS and not path_exists(p, page)]
    assert not missing, f"the docs name paths that do not exist: {missing}"


def test_pending_names_are_still_pending(source: Index) -> None:
    """When the worker rewrite lands, its names and paths must be checked like every other."""
    landed = sorted(n for n in PENDING_NAMES if n in source.names or n in source.classes)
    landed += sorted(p for p in PENDING_PATHS if path_exists(p))
    assert not landed, (f"these exist now: drop them from PENDING_NAMES / PENDING_PATHS in "
                        f"{__file__}: {landed}")


# --- configuration reference ------------------------------------------------------------------


def documented_settings(text: str) -> dict[str, set[str]]:
    """Section ("" for the top level) -> the settings in its table's first column."""
    out: dict[str, set[str]] = {}
    section = ""
    for line in text.splitlines():
        m = re.match(r"^## (?:`\[(\w+)\]`|Top level)", line)
        if m:
            section = m.group(1) or ""
            continue
        row = re.match(r"^\| `\[?(\w+)\]?` \|", line)
        if row:
            out.setdefault(section, set()).add(row.group(1))
    return out


def accepted_settings() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {"": set()}
    for f in msgspec.structs.fields(Config):
        if get_origin(f.type) is None and isinstance(f.type, type) and issubclass(f.type, msgspec.Struct):
            out[f.name] = {g.name for g in msgspec.structs.fields(f.type)}
        else:
            out[""].add(f.name)
    return out


def test_every_setting_is_in_the_configuration_reference() -> None:
    documented = documented_settings(CONFIGURATION.read_text())
    accepted = accepted_settings()
    assert {"store", "tail", "worker"} <= accepted.keys() and "lease_seconds" in accepted["worker"]
    gaps = {sec: sorted(names - documented.get(sec, set()))
            for sec, names in accepted.items() if names - documented.get(sec, set())}
    assert not gaps, f"settings missing from docs/configuration.md: {gaps}"
    extra = {sec: sorted(names - accepted.get(sec, set()))
             for sec, names in documented.items() if names - accepted.get(sec, set())}
    assert not extra, f"docs/configuration.md lists settings the code does not accept: {extra}"


def test_readme_is_short_and_links_pages_that_exist() -> None:
    text = README.read_text()
    assert len(text.encode()) <= 12 * 1024, f"README.md is {len(text.encode())} bytes (at most 12 KB)"
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert links and all((ROOT / link).exists() for link in links if "://" not in link), links


# --- the plugin guide's examples --------------------------------------------------------------


def test_the_plugin_guide_examples_import_only_the_sdk_and_run() -> None:
    """docs/extending.md's Python examples import board-outbox only through ``board_outbox.sdk``
    (a plugin's test example: also ``board_outbox.testing``) and define what they say with today's
    names (each plugin block runs as a module would)."""
    import board_outbox.sdk as sdk
    import board_outbox.testing as testing

    faces = {"board_outbox.sdk": set(sdk.__all__), "board_outbox.testing": set(testing.__all__)}

    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "extending.md").read_text(), re.S)
    assert len(blocks) >= 2
    for code in blocks:
        tree = ast.parse(code)
        is_test = False
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("board_outbox"):
                assert node.module in faces, f"the guide imports {node.module}"
                assert {a.name for a in node.names} <= faces[node.module]
                is_test = is_test or node.module == "board_outbox.testing"
            elif isinstance(node, ast.Import):
                assert not any(a.name.startswith("board_outbox") for a in node.names)
        if is_test:  # a plugin's test module: it imports the plugin it tests, so it is not run here
            continue
        namespace: dict[str, object] = {"__name__": "guide_example"}
        exec(compile(tree, "docs/extending.md", "exec"), namespace)
        classes = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
        assert classes and all(isinstance(namespace[c], type) for c in classes)
