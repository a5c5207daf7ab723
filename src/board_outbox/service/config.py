"""Service configuration: a TOML file and BOARD_OUTBOX_* environment variables, decoded and
validated with msgspec. Every problem is a ``ConfigError`` whose message names the setting."""

from __future__ import annotations

import ipaddress
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
from board_outbox.model.bounds import Pos
from board_outbox.model.errors import ConfigError
from board_outbox.model.limits import rate_problem
from board_outbox.model.retention import Retention
from board_outbox.model.row_documents import LEASE_HORIZON_SECONDS


class StoreConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    # O10: no default. A command that touches a store refuses until the configuration names
    # one ("mongo", or "memory" for a try-out): a pod that lost its config must not run on an
    # empty in-memory store and look healthy
    backend: Literal["memory", "mongo"] | None = None
    # TLS, auth, replicaSet... are URI options and are passed through to pymongo untouched.
    uri: str = "mongodb://127.0.0.1:27017/?replicaSet=rs0"
    database: str = "board_outbox"
    op_timeout_seconds: Pos = 10.0
    connect_timeout_seconds: Pos = 5.0
    # how long opening the store waits for a primary to answer (a command, `run` at start):
    # then one line names the host and the cause; every operation after that is bounded by
    # op_timeout_seconds
    server_selection_timeout_seconds: Pos = 10.0
    app_name: str = "board-outbox"
    # O5: events and cursors read, rows / cursor CAS / marks written, with majority by default
    read_concern: Literal["majority", "local", "linearizable"] = "majority"
    write_concern: Literal["majority"] | Annotated[int, msgspec.Meta(ge=1, le=50)] = "majority"
    # B3: how long a replica trusts its cached read-model generation pointer; a shadow rebuild
    # waits this long after announcing a generation and after swapping (set it the same on
    # every replica and on the rebuild)
    generation_cache_seconds: Pos = 5.0


class LauncherConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    kind: Literal["log", "http"] = "log"
    url: str = ""
    timeout_seconds: Pos = 10.0


class ServiceConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    shutdown_grace_seconds: Pos = 10.0
    log_format: Literal["text", "json"] = "text"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    replica_name: str = ""
    metrics_interval_seconds: Pos = 10.0
    # backpressure (T1): a pass of store calls slower than this (or a store timeout) halves the
    # batches, claims and poll rates of this replica until the store answers in time again
    slow_store_seconds: Pos = 2.0
    # /healthz, /readyz, /metrics (O1); http_port = 0 turns them off
    http_host: str = "127.0.0.1"
    http_port: Annotated[int, msgspec.Meta(ge=0, le=65535)] = 9464
    # names the operator port (and `board-outbox console`) answers to in the Host header, beside
    # localhost, 127.0.0.1, ::1 and the address bound (any IP address when bound to 0.0.0.0);
    # "*": any (behind a proxy that checks it). Other names get 400 (DNS rebinding)
    allowed_hosts: list[str] = msgspec.field(default_factory=list)


class UiConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The operator's web console (``surface/console``): under ``/ui`` on the operator port
    when ``enabled``; ``board-outbox console`` serves it alone on ``host:port``."""

    enabled: bool = False
    # actions (dead-letter replay) need this token; empty: the console is read-only
    admin_token: str = ""
    # trace ids link to {jaeger_url}/trace/{trace_id} when set
    jaeger_url: str = ""
    host: str = "127.0.0.1"
    port: Annotated[int, msgspec.Meta(ge=0, le=65535)] = 9465
    # U3: the reverse proxies in front of the console's port (addresses or networks); only
    # their forwarded headers name the client, scheme and host. Empty: none is believed
    trusted_proxies: list[str] = msgspec.field(default_factory=list)
    # the headers those proxies write: "x-forwarded" (X-Forwarded-For, -Proto, -Host) or
    # "forwarded" (RFC 7239); the other family is ignored
    proxy_headers: Literal["x-forwarded", "forwarded"] = "x-forwarded"
    # a header an auth proxy in front sets to the operator's name (e.g. X-Forwarded-User),
    # believed only from a trusted proxy; when set, it names the operator in every audit
    # entry and a login without it is refused. Empty: operators name themselves at login
    identity_header: str = ""


class DoctorSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What ``board-outbox doctor`` holds the deployment to (O7)."""

    # the lag budget: how far behind the change stream may fall (every replica stopped for a
    # deploy or an incident, a long backlog) and still resume from its saved token; the oplog
    # window must be at least this long
    oplog_budget_seconds: Pos = 86400.0
    # leases, heartbeats and due times are judged on each replica's own clock
    max_clock_skew_seconds: Pos = 2.0


class Config(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    store: StoreConfig = StoreConfig()
    tail: TailSettings = TailSettings()  # the components' own settings: decoded straight in
    worker: WorkerSettings = WorkerSettings()
    service: ServiceConfig = ServiceConfig()
    launcher: LauncherConfig = LauncherConfig()
    membership: MembershipSettings = MembershipSettings()
    ui: UiConfig = UiConfig()
    audit: AuditSettings = AuditSettings()
    limits: LimitSettings = LimitSettings()
    series: SeriesSettings = SeriesSettings()  # the console's charts
    retention: Retention = Retention()  # how long settled rows are kept (O8)
    doctor: DoctorSettings = DoctorSettings()
    projections: list[str] = msgspec.field(default_factory=lambda: ["board-reflect"])
    # effect kind -> "module:Class" (plugins.py); entry points in board_outbox.handlers add more
    handlers: dict[str, str] = msgspec.field(default_factory=dict)


# a [handlers] effect kind: stored in every row it names, shown by dead-letters and metrics
KIND_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,62}")


ADMIN_TOKEN_MIN = 16  # characters
ADMIN_TOKEN_DISTINCT = 8  # different characters at least


def token_problem(token: str) -> None:
    """The admin token is the only key to the console's actions: 16 printable characters or
    more, no whitespace or control character, and not a few characters repeated (easy to guess)."""
    bad = next((c for c in token if not c.isprintable() or c.isspace()), None)
    why = None
    if bad is not None:
        why = f"it contains {'whitespace' if bad.isspace() else 'a control character'} ({bad!r})"
    elif len(token) < ADMIN_TOKEN_MIN:
        why = f"{len(token)} characters, at least {ADMIN_TOKEN_MIN} are needed"
    elif len(set(token)) < ADMIN_TOKEN_DISTINCT:
        why = (f"only {len(set(token))} different characters, at least {ADMIN_TOKEN_DISTINCT} "
               "are needed")
    if why is not None:
        raise ConfigError(f"ui.admin_token: {why}: use {ADMIN_TOKEN_MIN} or more printable, "
                          "non-space characters (e.g. `python -c 'import secrets; "
                          "print(secrets.token_urlsafe(24))'`), or leave it empty for a "
                          "read-only console")


def validate(cfg: Config) -> Config:
    """Cross-field rules msgspec cannot express."""
    w, t, m = cfg.worker, cfg.tail, cfg.membership
    horizon = LEASE_HORIZON_SECONDS / 2
    if w.lease_seconds > horizon:
        raise ConfigError(
            f"worker.lease_seconds ({w.lease_seconds:g}) must be at most {horizon:g}: the "
            f"stuck-row sweep parks a claimed row whose lease ends more than "
            f"{LEASE_HORIZON_SECONDS:g}s ahead (half of that leaves room for clock skew)")
    if w.heartbeat_fraction > 0.5:
        raise ConfigError(
            f"worker.heartbeat_fraction ({w.heartbeat_fraction:g}) must be at most 0.5 (or 0: "
            "off): the lease is extended every lease_seconds x fraction, and an extension must "
            "land well before the lease ends")
    if w.max_execution_seconds < w.lease_seconds:
        raise ConfigError(
            f"worker.max_execution_seconds ({w.max_execution_seconds:g}) must be >= "
            f"worker.lease_seconds ({w.lease_seconds:g})")
    if t.poll_interval_seconds >= t.stall_seconds:
        raise ConfigError(
            f"tail.poll_interval_seconds ({t.poll_interval_seconds:g}) must be below "
            f"tail.stall_seconds ({t.stall_seconds:g}): every tenant behind would look stalled")
    if m.heartbeat_timeout_seconds < 0.1:
        raise ConfigError(
            f"membership.heartbeat_timeout_seconds ({m.heartbeat_timeout_seconds:g}) must be at "
            "least 0.1: members beat every sixth of it")
    for kind in cfg.handlers:
        if not KIND_NAME.fullmatch(kind):
            raise ConfigError(
                f"handlers: {kind[:80]!r} is not an effect kind name (a letter, then up to 62 "
                "letters, digits, '_', '.' or '-')")
    if cfg.tail.young_gap_seconds <= cfg.store.op_timeout_seconds:
        raise ConfigError(
            f"tail.young_gap_seconds ({cfg.tail.young_gap_seconds:g}) must exceed "
            f"store.op_timeout_seconds ({cfg.store.op_timeout_seconds:g}): a seq whose insert is "
            "still within the store timeout would otherwise be stepped over as a dead allocation"
        )
    db = cfg.store.database
    if not db or len(db.encode()) > 63 or any(c in db for c in '/\\. "$\0'):
        raise ConfigError(f"store.database: {db!r} is not a MongoDB database name (1-63 bytes, "
                          "none of / \\ . \" $ or spaces)")
    if cfg.tail.stall_seconds <= cfg.tail.young_gap_seconds:
        raise ConfigError(
            f"tail.stall_seconds ({cfg.tail.stall_seconds:g}) must exceed tail.young_gap_seconds "
            f"({cfg.tail.young_gap_seconds:g}): a tail waiting out a young gap is not stalled"
        )
    if cfg.worker.backoff_cap_seconds < cfg.worker.backoff_base_seconds:
        raise ConfigError("worker.backoff_cap_seconds must be >= worker.backoff_base_seconds")
    if cfg.launcher.kind == "http" and not cfg.launcher.url.startswith(("http://", "https://")):
        raise ConfigError("launcher.url: an http(s):// URL is required when launcher.kind = \"http\"")
    if cfg.ui.admin_token:
        token_problem(cfg.ui.admin_token)
    for name in cfg.service.allowed_hosts:
        if not name or any(c.isspace() or c in "/@?#" or not c.isprintable() for c in name):
            raise ConfigError(f"service.allowed_hosts: {name!r} is not a host name or address "
                              "(e.g. \"ops.example.internal\", \"10.0.0.5\" or \"*\")")
    if cfg.ui.jaeger_url and not cfg.ui.jaeger_url.startswith(("http://", "https://")):
        raise ConfigError("ui.jaeger_url: an http(s):// URL (the Jaeger UI, e.g. http://jaeger:16686)")
    _validate_proxies(cfg.ui)
    _validate_limits(cfg)
    from board_outbox.service.plugins import resolve_handlers, resolve_projections  # imports user code: P1

    resolve_projections(cfg.projections)
    resolve_handlers(cfg.handlers)
    return cfg


# RFC 7230's token: a header name
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}")
# headers the console reads for itself: never an operator's name
NOT_IDENTITY = frozenset({"host", "cookie", "origin", "referer", "forwarded", "x-forwarded-for",
                          "x-forwarded-proto", "x-forwarded-host", "sec-fetch-site",
                          "content-type", "content-length", "authorization"})


def _validate_proxies(ui: UiConfig) -> None:
    """U3: each trusted proxy an address or network; an identity header a header name that
    only a trusted proxy can be believed on."""
    for entry in ui.trusted_proxies:
        try:
            ipaddress.ip_network(entry.strip(), strict=True)
        except ValueError as exc:
            raise ConfigError(f"ui.trusted_proxies: {entry[:80]!r} is not an address or network "
                              f"({exc}; e.g. \"10.0.0.2\", \"10.0.0.0/8\", \"fd00::/8\")") from None
    name = ui.identity_header.strip()
    if not name:
        return
    if not HEADER_NAME.fullmatch(name) or name.lower() in NOT_IDENTITY:
        raise ConfigError(f"ui.identity_header: {name[:80]!r} is not a header an auth proxy "
                          "sets to the operator's name (e.g. \"X-Forwarded-User\" or "
                          "\"X-Auth-Request-Email\")")
    if not ui.trusted_proxies:
        raise ConfigError("ui.identity_header: it is believed only from ui.trusted_proxies, and "
                          "none is set: list the auth proxy's address there")


# an in-flight slot outlasts this many beats of the lease heartbeat that renews it
SLOT_BEATS = 3


def _validate_limits(cfg: Config) -> None:
    lim = cfg.limits
    for name in ("bot_per_second", "tenant_per_second"):
        problem = rate_problem(getattr(lim, name))
        if problem is not None:
            raise ConfigError(f"limits.{name}: {problem}")
    beat = cfg.worker.lease_seconds * cfg.worker.heartbeat_fraction
    if lim.slot_seconds < SLOT_BEATS * beat:
        raise ConfigError(
            f"limits.slot_seconds ({lim.slot_seconds:g}) must be >= {SLOT_BEATS} heartbeat "
            f"intervals (worker.lease_seconds x worker.heartbeat_fraction = {beat:g}s): each "
            "beat renews a running launch's in-flight slots, and a slot must outlast a failed "
            "beat, or its launch is cut at its end")


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
