"""The configuration's cross-field rules, the ones msgspec's per-field bounds cannot express:
the lease against the stuck-row sweep's horizon, the poll interval against the stall time, the
[handlers] kind names, the admin token's strength, the trusted proxies and the identity header,
the launch limits' slots against the heartbeat. ``validate`` runs them on every loaded
``Config``; each problem is one ``ConfigError`` that names the setting."""

from __future__ import annotations

import ipaddress
import re

from board_outbox.model.errors import ConfigError
from board_outbox.model.limits import rate_problem
from board_outbox.model.validation import LEASE_HORIZON_SECONDS
from board_outbox.service.config_sections import Config, UiConfig

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
