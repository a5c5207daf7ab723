"""Service configuration: a TOML file and BOARD_OUTBOX_* environment variables, decoded and
validated with msgspec. Every problem is a ``ConfigError`` whose message names the setting.

This module loads: the file, the environment values converted by the type of the field they
set, the renamed settings, the backend the configuration must name (O10). The tables' types
are in ``service/config_sections.py``, the cross-field rules in ``service/config_rules.py``."""

from __future__ import annotations

import os
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from board_outbox.engine.flow.limits import LimitSettings
from board_outbox.engine.flow.membership import MembershipSettings
from board_outbox.engine.tail.drain import TailSettings
from board_outbox.engine.upkeep.audit import AuditSettings
from board_outbox.engine.upkeep.series import SeriesSettings
from board_outbox.engine.work.worksettings import WorkerSettings
from board_outbox.model.errors import ConfigError
from board_outbox.model.retention import Retention
from board_outbox.service.config_rules import validate
from board_outbox.service.config_sections import (
    Config,
    DoctorSettings,
    LauncherConfig,
    ServiceConfig,
    StoreConfig,
    UiConfig,
)

_SECTION_TYPES: dict[str, type] = {
    "store": StoreConfig, "tail": TailSettings, "worker": WorkerSettings,
    "service": ServiceConfig, "launcher": LauncherConfig, "membership": MembershipSettings,
    "ui": UiConfig, "audit": AuditSettings, "limits": LimitSettings,
    "series": SeriesSettings, "retention": Retention, "doctor": DoctorSettings,
}
ENV_PREFIX = "BOARD_OUTBOX_"
_SECTIONS = {*_SECTION_TYPES, "handlers"}


def _env_overrides(env: Mapping[str, str]) -> dict[str, Any]:
    """BOARD_OUTBOX_STORE__URI=... -> {"store": {"uri": "..."}}; BOARD_OUTBOX_PROJECTIONS=a,b."""
    out: dict[str, Any] = {}
    for key, value in env.items():
        if not key.startswith(ENV_PREFIX):
            continue
        rest = key[len(ENV_PREFIX) :].lower()
        if rest == "config":
            continue
        if rest == "projections":
            out["projections"] = [p for p in (s.strip() for s in value.split(",")) if p]
            continue
        section, sep, field = rest.partition("__")
        if not sep or section not in _SECTIONS or not field:
            raise ConfigError(
                f"{key}: not a setting (use {ENV_PREFIX}<SECTION>__<NAME>, sections: "
                f"{', '.join(sorted(_SECTIONS))})"
            )
        out.setdefault(section, {})[field] = _env_value(key, section, field, value)
    return out


def _env_value(key: str, section: str, field: str, value: str) -> Any:
    """Convert an environment value by the TYPE of the field it sets (a numeric-looking replica
    name or database name stays a string; a port becomes an int); an unknown field is left as
    the string, for the decoder to name."""
    if section == "handlers":
        return value
    struct = _SECTION_TYPES[section]
    hints = typing.get_type_hints(struct, include_extras=True)
    if field not in hints:
        return value
    hint = hints[field]
    raw: Any = value.strip()
    if _is_list(hint):
        raw = _env_list(key, section, field, raw)
    try:
        return msgspec.convert(raw, hint, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{section}.{field} ({key}): {str(exc).split(' - at ')[0]} "
                          f"(got {value[:80]!r})") from None


_SEQUENCES = (list, tuple, set, frozenset)


def _is_list(hint: Any) -> bool:
    """Is ``hint`` a list-valued setting (``list[str]``, possibly ``Annotated`` or optional)?"""
    origin = typing.get_origin(hint)
    if origin is Annotated:
        return _is_list(typing.get_args(hint)[0])
    if origin in _SEQUENCES:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_is_list(arg) for arg in typing.get_args(hint))
    return False


def _env_list(key: str, section: str, field: str, value: str) -> list[Any]:
    """A list-valued setting from one environment value: a JSON array (``["10.0.0.2",
    "10.0.0.0/8"]``) or a comma-separated list (``10.0.0.2, 10.0.0.0/8``; blanks around the
    commas and empty items dropped; an empty value is the empty list)."""
    if value.startswith("["):
        try:
            items = msgspec.json.decode(value)
        except msgspec.DecodeError as exc:
            raise ConfigError(f"{section}.{field} ({key}): not a JSON array: {exc} (got "
                              f"{value[:80]!r}; or give a comma-separated list)") from None
        return list(items)  # a value that starts with "[" and decodes is an array
    return [item for item in (part.strip() for part in value.split(",")) if item]


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(merged.get(k), dict):
            merged[k] = _merge(merged[k], v)
        else:
            merged[k] = v
    return merged


def _setting_error(exc: msgspec.ValidationError) -> ConfigError:
    msg = str(exc)
    m = re.search(r" - at `\$\.?(.*)`$", msg)
    where = m.group(1) if m else ""
    text = msg[: m.start()] if m else msg
    if "Object contains unknown field" in text:
        field = re.search(r"`(.*?)`", text)
        name = f"{where}.{field.group(1)}" if where and field else (field.group(1) if field else "?")
        return ConfigError(f"{name}: unknown setting")
    if "missing required field" in text:
        return ConfigError(f"{where or 'config'}: {text}")
    return ConfigError(f"{where or 'config'}: {text}")


# settings that were renamed or removed: naming one is a one-line error pointing at the new one
RENAMED: dict[tuple[str, str], str] = {
    ("audit", "done_ttl_seconds"): "it is now retention.done_seconds (how long done rows are "
                                   "kept; the TTL index, the audit and the replays follow it)",
}


def _renamed(data: Mapping[str, Any]) -> None:
    for (section, name), what in RENAMED.items():
        table = data.get(section)
        if isinstance(table, Mapping) and name in table:
            raise ConfigError(f"{section}.{name}: no longer a setting: {what}")


NO_BACKEND = ("no store is configured: store.backend is not set (no --config FILE, "
              "$BOARD_OUTBOX_CONFIG or BOARD_OUTBOX_STORE__BACKEND names one); pass --config FILE "
              "with [store] backend = \"mongo\" and its uri, or backend = \"memory\" for a "
              "try-out that keeps nothing")


def require_backend(cfg: Config) -> Literal["memory", "mongo"]:
    """The configured store's backend; a ``ConfigError`` naming the way out when the
    configuration does not name one (O10: never a silent in-memory store)."""
    if cfg.store.backend is None:
        raise ConfigError(NO_BACKEND)
    return cfg.store.backend


def load_config(
    path: str | Path | None = None, env: Mapping[str, str] | None = None, **overrides: Any
) -> Config:
    env = os.environ if env is None else env
    data: dict[str, Any] = {}
    path = path or env.get(ENV_PREFIX + "CONFIG")
    if path:
        p = Path(path)
        try:
            raw = p.read_bytes()
        except OSError as exc:
            raise ConfigError(f"config file {p}: {exc.strerror or exc}") from None
        try:
            decoded = msgspec.toml.decode(raw)
        except msgspec.DecodeError as exc:
            raise ConfigError(f"config file {p}: not valid TOML: {exc}") from None
        if not isinstance(decoded, dict):
            raise ConfigError(f"config file {p}: expected a TOML table")
        data = decoded
    data = _merge(data, _env_overrides(env))
    data = _merge(data, overrides)
    _renamed(data)
    try:
        cfg = msgspec.convert(data, Config)
    except msgspec.ValidationError as exc:
        raise _setting_error(exc) from None
    return validate(cfg)
