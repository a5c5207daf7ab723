"""The configuration's shape: one frozen msgspec struct per table the service itself owns
([store], [launcher], [service], [ui], [doctor]) and ``Config``, which holds them beside the
components' own settings ([tail], [worker], [membership]...), decoded straight in. Kept apart
from the loading (``service/config.py``) and the cross-field rules (``service/config_rules.py``):
these types are what the rest of the service and the surface read."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from board_outbox.engine.flow.limits import LimitSettings
from board_outbox.engine.flow.membership import MembershipSettings
from board_outbox.engine.tail.drain import TailSettings
from board_outbox.engine.upkeep.audit import AuditSettings
from board_outbox.engine.upkeep.series import SeriesSettings
from board_outbox.engine.work.worksettings import WorkerSettings
from board_outbox.model.bounds import Pos
from board_outbox.model.retention import Retention


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
