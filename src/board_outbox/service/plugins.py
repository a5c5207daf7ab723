"""User projections and effect kinds, loaded by name (P1).

A projection is named in ``projections`` by the name of an entry point in the group
``board_outbox.projections`` (the built-ins ``board-reflect`` and ``card-activity`` are entry
points of board-outbox's own distribution, in the top-level ``projections/`` package) or by a topic
string ``"module:Class"``. An effect kind maps to a handler class in the ``[handlers]`` table
(``kind = "module:Class"``); every entry point in the group ``board_outbox.handlers`` registers
its kind too (the table wins over an entry point of the same kind).

How each class is built:

- a projection: ``cls(readmodels)`` -- the read-model store, as board-reflect is built;
- a handler: ``cls(ctx)`` -- a ``HandlerContext`` holding the stores a handler may use.

Every problem (unknown name, failing import, a class that does not fit the protocol, a name
clashing with a built-in) is a one-line ``ConfigError`` naming the setting: exit 2.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import Any

from board_outbox.engine.handlers.contract import HandlerContext
from board_outbox.engine.handlers.registry import EffectHandler, HandlerRegistry, Projection
from board_outbox.engine.work.gathered import GatheredReadModels
from board_outbox.model.errors import ConfigError, InvalidId
from board_outbox.model.ids import LAUNCH, PROJECTION, check_id, check_kind
from board_outbox.ports import ReadModelStore, Stores

PROJECTION_GROUP = "board_outbox.projections"
HANDLER_GROUP = "board_outbox.handlers"
BUILTIN_KINDS = (LAUNCH, PROJECTION)


# the package of the built-in projections (top-level projections/), registered as entry points
BUILTIN_PACKAGE = "board_outbox_projections"
_EP_CACHE: dict[tuple[object, str], dict[str, list[metadata.EntryPoint]]] = {}


def _all_entry_points(group: str) -> dict[str, list[metadata.EntryPoint]]:
    """The installed entry points of ``group`` by name (a name two distributions publish has two),
    scanned once per process (a scan reads every installed distribution's metadata: ~15 ms, and
    registries are built per service and per test). Keyed by the scanning function too, so a
    replaced one scans afresh."""
    key = (metadata.entry_points, group)
    found = _EP_CACHE.get(key)
    if found is None:
        found = {}
        for ep in metadata.entry_points(group=group):
            same = found.setdefault(ep.name, [])
            if all(e.value != ep.value for e in same):  # one distribution seen twice on the path
                same.append(ep)
        _EP_CACHE[key] = found
    return found


def _is_builtin(ep: metadata.EntryPoint) -> bool:
    return ep.value.split(":")[0].split(".")[0] == BUILTIN_PACKAGE


def builtin_projections() -> list[str]:
    """The names of the built-in projections (entry points into the built-ins' package)."""
    return sorted(n for n, eps in _all_entry_points(PROJECTION_GROUP).items()
                  if any(_is_builtin(e) for e in eps))


def _entry_points(group: str) -> dict[str, metadata.EntryPoint]:
    """One entry point per name (the last one found)."""
    return {name: eps[-1] for name, eps in _all_entry_points(group).items()}


def _import_topic(topic: str, where: str) -> Any:
    module, sep, attr = topic.partition(":")
    if not sep or not module or not attr:
        raise ConfigError(f"{where}: {topic!r} is not a topic (use \"module:Class\")")
    try:
        obj: Any = importlib.import_module(module)
    except Exception as exc:
        raise ConfigError(f"{where}: cannot import {module!r} for {topic!r}: "
                          f"{type(exc).__name__}: {exc}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(f"{where}: module {module!r} has no {attr!r}") from None
    return obj


def _load_entry_point(ep: metadata.EntryPoint, where: str) -> Any:
    try:
        return ep.load()
    except Exception as exc:
        raise ConfigError(f"{where}: cannot load entry point {ep.group}:{ep.name} = {ep.value!r}: "
                          f"{type(exc).__name__}: {exc}") from None


def _is_async(cls: type, method: str) -> bool:
    return inspect.iscoroutinefunction(getattr(cls, method, None))


def _takes_one_argument(cls: type) -> bool:
    try:
        inspect.signature(cls).bind(object())
    except (TypeError, ValueError):
        return False
    return True


def _check_projection_class(obj: Any, where: str) -> type:
    if not isinstance(obj, type):
        raise ConfigError(f"{where}: {obj!r} is not a class")
    missing = [m for m in ("apply", "reset") if not _is_async(obj, m)]
    if missing:
        raise ConfigError(f"{where}: {obj.__qualname__} does not fit the projection protocol: "
                          f"needs async {' and async '.join(missing)}")
    if hasattr(obj, "apply_many") and not _is_async(obj, "apply_many"):
        raise ConfigError(f"{where}: {obj.__qualname__}.apply_many must be async")
    if not _takes_one_argument(obj):
        raise ConfigError(f"{where}: {obj.__qualname__}'s constructor must take the read-model "
                          "store as its one argument")
    name = getattr(obj, "name", None)
    if not isinstance(name, str):
        raise ConfigError(f"{where}: {obj.__qualname__} needs a class attribute `name` (a str)")
    try:
        check_id("projection name", name)
    except InvalidId as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return obj


def resolve_projection(spec: str, where: str) -> type:
    """The class a ``projections`` entry names (not constructed)."""
    ep: metadata.EntryPoint | None = None
    if ":" in spec:
        cls = _check_projection_class(_import_topic(spec, where), where)
    else:
        eps = _all_entry_points(PROJECTION_GROUP).get(spec, [])
        if len(eps) > 1 and any(_is_builtin(e) for e in eps):
            other = next(e for e in eps if not _is_builtin(e))
            raise ConfigError(f"{where}: {spec!r} is both a built-in projection and an entry point "
                              f"{PROJECTION_GROUP}:{spec} = {other.value!r}: rename the entry point")
        ep = eps[-1] if eps else None
        if ep is None:
            raise ConfigError(
                f"{where}: unknown projection {spec!r} (built-in: {', '.join(builtin_projections())}; "
                f"entry points ({PROJECTION_GROUP}): "
                f"{', '.join(sorted(_entry_points(PROJECTION_GROUP))) or 'none'}; "
                "or a \"module:Class\" topic)")
        cls = _check_projection_class(_load_entry_point(ep, where), where)
        if cls.name != spec:  # type: ignore[attr-defined]
            raise ConfigError(f"{where}: entry point {spec!r} loads a projection named "
                              f"{cls.name!r}; the two names must agree")  # type: ignore[attr-defined]
    if cls.name in builtin_projections() and (ep is None or not _is_builtin(ep)):  # type: ignore[attr-defined]
        raise ConfigError(f"{where}: {spec!r} is named {cls.name!r}, "  # type: ignore[attr-defined]
                          "which clashes with a built-in projection")
    return cls


def resolve_projections(specs: Sequence[str]) -> list[type]:
    """Every ``projections`` entry resolved, names unique."""
    out: list[type] = []
    seen: dict[str, str] = {}
    for i, spec in enumerate(specs):
        where = f"projections[{i}]"
        cls = resolve_projection(spec, where)
        name = str(cls.name)  # type: ignore[attr-defined]
        if name in seen:
            raise ConfigError(f"{where}: {spec!r} is named {name!r}, like {seen[name]!r} before it")
        seen[name] = spec
        out.append(cls)
    return out


def _check_handler_class(obj: Any, where: str) -> type:
    if not isinstance(obj, type):
        raise ConfigError(f"{where}: {obj!r} is not a class")
    if not _is_async(obj, "execute"):
        raise ConfigError(f"{where}: {obj.__qualname__} does not fit the effect handler protocol: "
                          "needs async execute(row, ctx)")
    if not _takes_one_argument(obj):
        raise ConfigError(f"{where}: {obj.__qualname__}'s constructor must take a HandlerContext "
                          "as its one argument")
    return obj


def _check_kind(kind: str, where: str) -> None:
    """A kind no subscription could name (``check_kind``) would never get a row: refuse it."""
    try:
        check_kind(kind)
    except InvalidId as exc:
        raise ConfigError(f"{where}: {exc}") from None


def resolve_handlers(table: Mapping[str, str]) -> dict[str, type]:
    """Effect kind -> handler class: the ``[handlers]`` table over the entry points."""
    out: dict[str, type] = {}
    for kind, ep in sorted(_entry_points(HANDLER_GROUP).items()):
        if kind in table:
            continue
        where = f"entry point {HANDLER_GROUP}:{kind}"
        if kind in BUILTIN_KINDS:
            raise ConfigError(f"{where}: kind {kind!r} clashes with a built-in effect kind")
        _check_kind(kind, where)
        out[kind] = _check_handler_class(_load_entry_point(ep, where), where)
    for kind, topic in table.items():
        where = f"handlers.{kind}"
        if kind in BUILTIN_KINDS:
            raise ConfigError(f"{where}: kind {kind!r} clashes with a built-in effect kind")
        _check_kind(kind, where)
        if not isinstance(topic, str):
            raise ConfigError(f"{where}: expected a \"module:Class\" string")
        out[kind] = _check_handler_class(_import_topic(topic, where), where)
    return out


def _construct(cls: type, arg: Any, where: str) -> Any:
    try:
        return cls(arg)
    except Exception as exc:
        raise ConfigError(f"{where}: constructing {cls.__qualname__} failed: "
                          f"{type(exc).__name__}: {exc}") from None


def build_projections(specs: Sequence[str], store: ReadModelStore) -> list[Projection]:
    out: list[Projection] = []
    for i, cls in enumerate(resolve_projections(specs)):
        proj = _construct(cls, store, f"projections[{i}]")
        if proj.name != cls.name:  # type: ignore[attr-defined]
            raise ConfigError(f"projections[{i}]: an instance's name {proj.name!r} differs from "
                              f"its class's {cls.name!r}")  # type: ignore[attr-defined]
        out.append(proj)
    return out


def build_handlers(table: Mapping[str, str], stores: Stores) -> dict[str, EffectHandler]:
    ctx = HandlerContext.of(stores)
    return {kind: _construct(cls, ctx, f"handlers.{kind}")
            for kind, cls in resolve_handlers(table).items()}


def register_projections(registry: HandlerRegistry, store: ReadModelStore, names: Sequence[str]) -> None:
    """Register the named projections (entry-point names, built-in or not, and ``module:Class``
    topics); a bad name is a one-line ``ConfigError`` naming the setting. They write through
    ``GatheredReadModels``: a claimed batch's rows of one projection, across tenants, meet in one
    bulk write (P2)."""
    for proj in build_projections(names, GatheredReadModels(store)):
        registry.register_projection(proj)
